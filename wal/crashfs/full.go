package crashfs

import (
	"io/fs"
	"os"
	"sync/atomic"
	"syscall"

	"github.com/braidmq/braid/wal"
)

// Full is a wal.FS over another (wal.OSFS, say) whose writes fail with
// ENOSPC while SetFull(true): a write, a file created, a file made longer,
// and a sync of a file written while full (its data could not be stored).
// Reads, renames and removals work, as on a full disk.
type Full struct {
	wal.FS
	full atomic.Bool
	// syncFails makes every sync fail with EIO (SetSyncFails).
	syncFails atomic.Bool
	// refused counts the writes refused, for tests.
	refused atomic.Int64
}

// NewFull wraps fsys.
func NewFull(fsys wal.FS) *Full { return &Full{FS: fsys} }

// SetFull says whether the disk is full.
func (f *Full) SetFull(full bool) { f.full.Store(full) }

// SetSyncFails says whether every sync fails with EIO, the writes before
// it having gone through: a disk whose cache could not be written back
// (the data may or may not be there after).
func (f *Full) SetSyncFails(fail bool) { f.syncFails.Store(fail) }

// Refused is how many writes were refused with ENOSPC.
func (f *Full) Refused() int64 { return f.refused.Load() }

func (f *Full) enospc(op, name string) error {
	f.refused.Add(1)
	return &os.PathError{Op: op, Path: name, Err: syscall.ENOSPC}
}

// OpenFile implements wal.FS: creating a file fails while full.
func (f *Full) OpenFile(name string, flag int, perm fs.FileMode) (wal.File, error) {
	if f.full.Load() && flag&os.O_CREATE != 0 {
		if _, err := f.FS.Stat(name); err != nil {
			return nil, f.enospc("open", name)
		}
	}
	file, err := f.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &fullFile{File: file, fs: f}, nil
}

// MkdirAll implements wal.FS: a new directory fails while full.
func (f *Full) MkdirAll(name string, perm fs.FileMode) error {
	if f.full.Load() {
		if _, err := f.FS.Stat(name); err != nil {
			return f.enospc("mkdir", name)
		}
	}
	return f.FS.MkdirAll(name, perm)
}

type fullFile struct {
	wal.File
	fs *Full
	// lost is set when a write was refused since the last sync: the sync
	// reports it, as a file system that could not store dirty pages does.
	lost atomic.Bool
}

func (f *fullFile) WriteAt(p []byte, off int64) (int, error) {
	if f.fs.full.Load() {
		f.lost.Store(true)
		return 0, f.fs.enospc("write", f.Name())
	}
	return f.File.WriteAt(p, off)
}

func (f *fullFile) Write(p []byte) (int, error) {
	if f.fs.full.Load() {
		f.lost.Store(true)
		return 0, f.fs.enospc("write", f.Name())
	}
	return f.File.Write(p)
}

func (f *fullFile) Truncate(size int64) error {
	if f.fs.full.Load() {
		if info, err := f.File.Stat(); err == nil && size > info.Size() {
			return f.fs.enospc("truncate", f.Name())
		}
	}
	return f.File.Truncate(size)
}

func (f *fullFile) Sync() error {
	if f.fs.syncFails.Load() {
		f.fs.refused.Add(1)
		return &os.PathError{Op: "sync", Path: f.Name(), Err: syscall.EIO}
	}
	if f.lost.Swap(false) {
		return f.fs.enospc("sync", f.Name())
	}
	return f.File.Sync()
}
