package wal

import (
	"io"
	"io/fs"
	"os"
)

// FS is the file system a Log keeps its files in (Options.FS): the
// operating system's by default. Tests put a Log on a file system that
// forgets what was not synced when it "crashes", or that runs out of space
// (see package crashfs).
//
// Paths are the Log's own (absolute, joined with filepath). The methods
// mean what their namesakes in package os mean.
type FS interface {
	// OpenFile opens a file, with os.O_CREATE, os.O_TRUNC, os.O_RDWR,
	// os.O_WRONLY or os.O_RDONLY (0) in flag.
	OpenFile(name string, flag int, perm fs.FileMode) (File, error)
	// ReadDir lists a directory, sorted by name.
	ReadDir(name string) ([]fs.DirEntry, error)
	Stat(name string) (fs.FileInfo, error)
	MkdirAll(name string, perm fs.FileMode) error
	Rename(oldname, newname string) error
	Remove(name string) error
	// SyncDir makes the creations, renames and removals in a directory
	// durable.
	SyncDir(name string) error
}

// File is an open file of an FS.
type File interface {
	io.ReaderAt
	io.WriterAt
	io.Writer
	io.Closer
	Name() string
	Stat() (fs.FileInfo, error)
	Truncate(size int64) error
	// Sync makes what was written to the file durable: its data and what
	// reading it back needs (its size); an fdatasync.
	Sync() error
}

// asyncSyncer is a File that can start a Sync and wait for it later (the
// operating system's files, through io_uring).
type asyncSyncer interface {
	startSync() func() error
}

// startSync starts a Sync of f and returns the wait for it.
func startSync(f File) func() error {
	if a, ok := f.(asyncSyncer); ok {
		return a.startSync()
	}
	return f.Sync
}

// OSFS is the operating system's file system, what a Log uses unless
// Options.FS says otherwise.
var OSFS FS = osFS{}

type osFS struct{}

func (osFS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return osFile{File: f, dev: deviceOf(f)}, nil
}

func (osFS) ReadDir(name string) ([]fs.DirEntry, error)   { return os.ReadDir(name) }
func (osFS) Stat(name string) (fs.FileInfo, error)        { return os.Stat(name) }
func (osFS) MkdirAll(name string, perm fs.FileMode) error { return os.MkdirAll(name, perm) }
func (osFS) Rename(oldname, newname string) error         { return os.Rename(oldname, newname) }
func (osFS) Remove(name string) error                     { return os.Remove(name) }

func (osFS) SyncDir(name string) error {
	d, err := os.Open(name)
	if err != nil {
		return err
	}
	if err := d.Sync(); err != nil {
		d.Close()
		return err
	}
	return d.Close()
}

// osFile is an *os.File whose Sync is an fdatasync (through io_uring on
// Linux). dev is its file system's device (0 when unknown), for
// CommitGroup.
type osFile struct {
	*os.File
	dev uint64
}

func (f osFile) Sync() error                { return fsyncFile(f.File) }
func (f osFile) startSync() func() error    { return startFsync(f.File) }
func (f osFile) Stat() (fs.FileInfo, error) { return f.File.Stat() }
func (f osFile) device() uint64             { return f.dev }

// readWholeFile reads a file of fsys.
func readWholeFile(fsys FS, name string) ([]byte, error) {
	f, err := fsys.OpenFile(name, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, err
	}
	data := make([]byte, info.Size())
	if n, err := f.ReadAt(data, 0); n < len(data) {
		return nil, err
	}
	return data, nil
}
