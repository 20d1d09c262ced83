package wal

import (
	"errors"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
)

// A log whose fsync fails (EIO) acknowledges nothing of what it wrote,
// and stays failed: a later fsync that succeeds does not make the
// records it lost in the page cache durable (fsyncgate), so the log does
// not try it; it must be opened again, which reads only what its files
// hold.
func TestALogWhoseSyncFailedAcknowledgesNothingMore(t *testing.T) {
	var failing atomic.Bool
	fsys := NewFaultFS(OSFS, func(op, name string) error {
		if failing.Load() && op == "sync" {
			return syscall.EIO
		}
		return nil
	})
	dir := filepath.Join(t.TempDir(), "log")
	l, err := Open(dir, Options{FS: fsys, Durability: DurabilityAlways})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := l.Append(Record{Payload: []byte("a")}); err != nil {
		t.Fatal(err)
	}
	failing.Store(true)
	if _, err := l.Write(Record{Payload: []byte("b")}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Commit(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("a commit whose fsync failed: %v, want EIO", err)
	}
	failing.Store(false)
	if _, err := l.Append(Record{Payload: []byte("c")}); !errors.Is(err, ErrFailed) {
		t.Fatalf("an append after a failed fsync: %v, want ErrFailed", err)
	}
	if _, err := l.Commit(); !errors.Is(err, ErrFailed) {
		t.Fatalf("a commit after a failed fsync: %v, want ErrFailed", err)
	}
}

// A write refused ENOSPC acknowledges nothing.
func TestALogOutOfSpaceAcknowledgesNothing(t *testing.T) {
	var full atomic.Bool
	fsys := NewFaultFS(OSFS, func(op, name string) error {
		if full.Load() && op == "write" {
			return syscall.ENOSPC
		}
		return nil
	})
	l, err := Open(filepath.Join(t.TempDir(), "log"), Options{FS: fsys, Durability: DurabilityAlways})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	full.Store(true)
	if _, err := l.Append(Record{Payload: []byte("a")}); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("an append on a full disk: %v, want ENOSPC", err)
	}
	if next := l.DurableOffset(); next != 0 {
		t.Fatalf("durable offset %d after a refused append, want 0", next)
	}
}
