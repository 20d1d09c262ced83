//go:build !linux || !(amd64 || arm64)

package wal

import "os"

// fsyncFile fsyncs f (io_uring is used only on Linux; see uring_linux.go).
func fsyncFile(f *os.File) error { return f.Sync() }

// startFsync returns the wait of an fsync of f: here, the system call.
func startFsync(f *os.File) func() error { return f.Sync }

// ringInUse reports whether fsyncs go through io_uring: never here.
func ringInUse() bool { return false }

// startFsyncs returns the waits of an fsync of each file: here, the
// system calls.
func startFsyncs(files []*os.File) []func() error {
	waits := make([]func() error, len(files))
	for i, f := range files {
		waits[i] = f.Sync
	}
	return waits
}
