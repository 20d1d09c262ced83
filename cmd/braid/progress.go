package main

import (
	"io"
	"os"

	"github.com/schollz/progressbar/v3"
)

// progress is a progress bar on a terminal, nothing elsewhere (a pipe, a
// file, a test): schollz/progressbar draws it.
type progress struct {
	bar *progressbar.ProgressBar
}

// newProgress draws on w when w is a terminal; total 0 or less is unknown
// (a spinner with a count).
func newProgress(w io.Writer, label string, total int64) *progress {
	f, ok := w.(*os.File)
	if !ok || !isTerminal(f) {
		return &progress{}
	}
	if total <= 0 {
		total = -1
	}
	return &progress{bar: progressbar.NewOptions64(total, progressbar.OptionSetWriter(w), progressbar.OptionSetDescription(label),
		progressbar.OptionShowCount(), progressbar.OptionShowIts(), progressbar.OptionSetItsString("msg"),
		progressbar.OptionThrottle(100_000_000), progressbar.OptionClearOnFinish())}
}

// newByteProgress is newProgress counting bytes of a known total.
func newByteProgress(w io.Writer, label string, total int64) *progress {
	f, ok := w.(*os.File)
	if !ok || !isTerminal(f) {
		return &progress{}
	}
	return &progress{bar: progressbar.NewOptions64(total, progressbar.OptionSetWriter(w), progressbar.OptionSetDescription(label),
		progressbar.OptionShowBytes(true), progressbar.OptionThrottle(100_000_000), progressbar.OptionClearOnFinish())}
}

func (p *progress) set(n int64) {
	if p.bar != nil {
		_ = p.bar.Set64(n)
	}
}

func (p *progress) describe(s string) {
	if p.bar != nil {
		p.bar.Describe(s)
	}
}

func (p *progress) finish(n int64) {
	if p.bar != nil {
		_ = p.bar.Set64(n)
		_ = p.bar.Finish()
	}
}
