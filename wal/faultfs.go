package wal

import (
	"io/fs"
)

// NewFaultFS returns a file system over base for fault tests (the fault
// suite's disk-fault build): before each write to a file (WriteAt, Write,
// Truncate) and each sync (a file's Sync, SyncDir), it asks fault, given
// the operation ("write" or "sync") and the file's name; an error it
// returns fails the operation, which then does nothing — as a disk that
// answers EIO, or a file system out of space (ENOSPC), does. Reads, opens
// and directory changes go to base.
func NewFaultFS(base FS, fault func(op, name string) error) FS {
	return &faultFS{FS: base, fault: fault}
}

type faultFS struct {
	FS
	fault func(op, name string) error
}

func (f *faultFS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	file, err := f.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &faultFile{File: file, fault: f.fault}, nil
}

func (f *faultFS) SyncDir(name string) error {
	if err := f.fault("sync", name); err != nil {
		return &fs.PathError{Op: "fsync", Path: name, Err: err}
	}
	return f.FS.SyncDir(name)
}

// faultFile is an open file of a faultFS.
type faultFile struct {
	File
	fault func(op, name string) error
}

// device is base's file system device, so that a log on a fault file
// system commits through the node's journal as it would on base.
func (f *faultFile) device() uint64 {
	if d, ok := f.File.(interface{ device() uint64 }); ok {
		return d.device()
	}
	return 0
}

func (f *faultFile) WriteAt(p []byte, off int64) (int, error) {
	if err := f.fault("write", f.Name()); err != nil {
		return 0, &fs.PathError{Op: "write", Path: f.Name(), Err: err}
	}
	return f.File.WriteAt(p, off)
}

func (f *faultFile) Write(p []byte) (int, error) {
	if err := f.fault("write", f.Name()); err != nil {
		return 0, &fs.PathError{Op: "write", Path: f.Name(), Err: err}
	}
	return f.File.Write(p)
}

func (f *faultFile) Truncate(size int64) error {
	if err := f.fault("write", f.Name()); err != nil {
		return &fs.PathError{Op: "truncate", Path: f.Name(), Err: err}
	}
	return f.File.Truncate(size)
}

func (f *faultFile) Sync() error {
	if err := f.fault("sync", f.Name()); err != nil {
		return &fs.PathError{Op: "fsync", Path: f.Name(), Err: err}
	}
	return f.File.Sync()
}
