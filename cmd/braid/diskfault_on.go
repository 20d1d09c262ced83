//go:build braiddiskfault

package main

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/braidmq/braid/wal"
)

// The fault suite's disk-fault build: the node's logs are written through
// wal.NewFaultFS, which fails what <data-dir>/disk-fault says (read every
// 20 ms; absent or empty: nothing fails). Its one line is
//
//	<op> <errno> [<path part>]
//
// op "write" or "sync", errno "EIO" or "ENOSPC": every such operation on
// a file whose path holds path part (any file without one) fails with
// that error, as a failing disk or a full file system does.
func init() {
	diskFaults = func(dataDir string, base wal.FS, log *slog.Logger) wal.FS {
		type fault struct {
			op   string
			err  error
			part string
		}
		var now atomic.Pointer[fault]
		path := filepath.Join(dataDir, "disk-fault")
		go func() {
			var last string
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			for range tick.C {
				b, _ := os.ReadFile(path)
				line := strings.TrimSpace(string(b))
				if line == last {
					continue
				}
				last = line
				f := strings.Fields(line)
				if len(f) == 0 {
					now.Store(nil)
					log.Warn("a test build: disk faults off")
					continue
				}
				var errno error
				switch {
				case len(f) >= 2 && f[1] == "EIO":
					errno = syscall.EIO
				case len(f) >= 2 && f[1] == "ENOSPC":
					errno = syscall.ENOSPC
				}
				if errno == nil || f[0] != "write" && f[0] != "sync" || len(f) > 3 {
					log.Error("a test build: the disk-fault file says nothing it knows", "file", path, "line", line)
					continue
				}
				next := &fault{op: f[0], err: errno}
				if len(f) == 3 {
					next.part = f[2]
				}
				now.Store(next)
				log.Warn("a test build: disk faults on", "op", next.op, "err", next.err, "paths", next.part)
			}
		}()
		return wal.NewFaultFS(base, func(op, name string) error {
			if f := now.Load(); f != nil && f.op == op && strings.Contains(name, f.part) {
				return f.err
			}
			return nil
		})
	}
}
