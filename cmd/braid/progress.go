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
	if total <= 0 {
		total = -1
	}
	return drawOn(w, label, total, progressbar.OptionShowCount(), progressbar.OptionShowIts(), progressbar.OptionSetItsString("msg"))
}

// newByteProgress is newProgress counting bytes of a known total.
func newByteProgress(w io.Writer, label string, total int64) *progress {
	return drawOn(w, label, total, progressbar.OptionShowBytes(true))
}

// drawOn is a bar with opts on w when w is a terminal, none elsewhere.
func drawOn(w io.Writer, label string, total int64, opts ...progressbar.Option) *progress {
	f, ok := w.(*os.File)
	if !ok || !isTerminal(f) {
		return &progress{}
	}
	opts = append(opts, progressbar.OptionSetWriter(w), progressbar.OptionSetDescription(label),
		progressbar.OptionThrottle(100_000_000), progressbar.OptionClearOnFinish())
	return &progress{bar: progressbar.NewOptions64(total, opts...)}
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
