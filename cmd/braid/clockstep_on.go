//go:build braidclockstep

package main

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/braidmq/braid/clock"
)

// The fault suite's clock-step build: the node's wall clock is the real
// one stepped by the duration written in <data-dir>/clock-step (read
// every 50 ms; absent or empty: no step), as an operator or NTP steps a
// real clock. Its clock that never steps (what leases are measured by)
// is the real one.
func init() {
	steppedClock = func(dataDir string, log *slog.Logger) clock.Clock {
		c := &clock.Stepped{}
		path := filepath.Join(dataDir, "clock-step")
		go func() {
			var last time.Duration
			tick := time.NewTicker(50 * time.Millisecond)
			defer tick.Stop()
			for range tick.C {
				step := time.Duration(0)
				if b, err := os.ReadFile(path); err == nil && len(strings.TrimSpace(string(b))) > 0 {
					d, err := time.ParseDuration(strings.TrimSpace(string(b)))
					if err != nil {
						log.Error("a test build: the clock step file holds no duration", "file", path, "err", err)
						continue
					}
					step = d
				}
				if step != last {
					c.Step(step)
					log.Warn("a test build: the wall clock stepped", "offset", step, "by", step-last)
					last = step
				}
			}
		}()
		return c
	}
}
