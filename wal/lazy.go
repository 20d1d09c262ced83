package wal

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"sync"
)

// NewLazyFS returns a file system over base that keeps what is written to
// a file in the process's memory until the file is synced, as the page
// cache of a machine that loses power does: a process killed (kill -9)
// loses exactly what a power cut would have lost of its files' data. It is
// the fault suite's (a test build of braid runs on it; see
// docs/faults.md), in the manner of LazyFS.
//
// Reads, sizes and later opens of the same file see what was written, as
// they would through a page cache. Directory changes (a file made,
// renamed or removed) reach base at once: a power cut that would undo an
// unsynced one is the crash file system's to test (package crashfs).
func NewLazyFS(base FS) FS {
	return &lazyFS{base: base, files: map[string]*lazyNode{}}
}

type lazyFS struct {
	base  FS
	mu    sync.Mutex
	files map[string]*lazyNode // by name, the files with writes not synced
}

// lazyNode is what a file holds beyond base's copy: the writes and
// truncations since its last sync, in order.
type lazyNode struct {
	mu   sync.Mutex
	ops  []lazyOp
	size int64 // the size with them
}

// lazyOp is a write (data at off) or a truncation (to size, data nil).
type lazyOp struct {
	off   int64
	data  []byte
	trunc bool
}

// node returns name's node, made from base's size when it has none.
func (l *lazyFS) node(name string, base File) (*lazyNode, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n, ok := l.files[name]; ok {
		return n, nil
	}
	info, err := base.Stat()
	if err != nil {
		return nil, err
	}
	n := &lazyNode{size: info.Size()}
	l.files[name] = n
	return n, nil
}

func (l *lazyFS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	trunc := flag&os.O_TRUNC != 0
	f, err := l.base.OpenFile(name, flag&^os.O_TRUNC, perm)
	if err != nil {
		return nil, err
	}
	n, err := l.node(name, f)
	if err != nil {
		f.Close()
		return nil, err
	}
	lf := &lazyFile{File: f, n: n, name: name}
	if trunc {
		if err := lf.Truncate(0); err != nil {
			f.Close()
			return nil, err
		}
	}
	return lf, nil
}

func (l *lazyFS) ReadDir(name string) ([]fs.DirEntry, error) {
	entries, err := l.base.ReadDir(name)
	if err != nil {
		return nil, err
	}
	out := make([]fs.DirEntry, len(entries))
	for i, e := range entries {
		out[i] = lazyEntry{DirEntry: e, l: l, path: name + "/" + e.Name()}
	}
	return out, nil
}

func (l *lazyFS) Stat(name string) (fs.FileInfo, error) {
	info, err := l.base.Stat(name)
	if err != nil {
		return nil, err
	}
	return l.sized(name, info), nil
}

// sized is info with the size of name's writes not synced.
func (l *lazyFS) sized(name string, info fs.FileInfo) fs.FileInfo {
	l.mu.Lock()
	n, ok := l.files[name]
	l.mu.Unlock()
	if !ok || info.IsDir() {
		return info
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return lazyInfo{FileInfo: info, size: n.size}
}

func (l *lazyFS) MkdirAll(name string, perm fs.FileMode) error { return l.base.MkdirAll(name, perm) }
func (l *lazyFS) SyncDir(name string) error                    { return l.base.SyncDir(name) }

func (l *lazyFS) Rename(oldname, newname string) error {
	if err := l.base.Rename(oldname, newname); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.files, newname)
	if n, ok := l.files[oldname]; ok {
		delete(l.files, oldname)
		l.files[newname] = n
	}
	return nil
}

func (l *lazyFS) Remove(name string) error {
	if err := l.base.Remove(name); err != nil {
		return err
	}
	l.mu.Lock()
	delete(l.files, name)
	l.mu.Unlock()
	return nil
}

type lazyEntry struct {
	fs.DirEntry
	l    *lazyFS
	path string
}

func (e lazyEntry) Info() (fs.FileInfo, error) {
	info, err := e.DirEntry.Info()
	if err != nil {
		return nil, err
	}
	return e.l.sized(e.path, info), nil
}

type lazyInfo struct {
	fs.FileInfo
	size int64
}

func (i lazyInfo) Size() int64 { return i.size }

// lazyFile is an open file of a lazyFS.
type lazyFile struct {
	File
	n    *lazyNode
	name string
	pos  int64 // Write's
}

func (f *lazyFile) Name() string { return f.name }

// device is base's file system device, so that a log on a lazy file
// system commits through the node's journal as it would on base.
func (f *lazyFile) device() uint64 {
	if d, ok := f.File.(interface{ device() uint64 }); ok {
		return d.device()
	}
	return 0
}

func (f *lazyFile) WriteAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, errors.New("braid/wal: lazy file: negative offset")
	}
	f.n.mu.Lock()
	defer f.n.mu.Unlock()
	f.n.ops = append(f.n.ops, lazyOp{off: off, data: append([]byte(nil), p...)})
	f.n.size = max(f.n.size, off+int64(len(p)))
	return len(p), nil
}

func (f *lazyFile) Write(p []byte) (int, error) {
	n, err := f.WriteAt(p, f.pos)
	f.pos += int64(n)
	return n, err
}

func (f *lazyFile) Truncate(size int64) error {
	f.n.mu.Lock()
	defer f.n.mu.Unlock()
	f.n.ops = append(f.n.ops, lazyOp{off: size, trunc: true})
	f.n.size = size
	return nil
}

// ReadAt reads base's copy, then lays the writes and truncations not
// synced over it, in order.
func (f *lazyFile) ReadAt(p []byte, off int64) (int, error) {
	f.n.mu.Lock()
	defer f.n.mu.Unlock()
	size := f.n.size
	if off >= size {
		return 0, io.EOF
	}
	want := p[:min(int64(len(p)), size-off)]
	clear(want)
	// Base's bytes, as far as the truncations not synced left them.
	baseEnd := size
	if info, err := f.File.Stat(); err == nil {
		baseEnd = min(baseEnd, info.Size())
	}
	for _, op := range f.n.ops {
		if op.trunc {
			baseEnd = min(baseEnd, op.off)
		}
	}
	if off < baseEnd {
		k := min(int64(len(want)), baseEnd-off)
		if n, err := f.File.ReadAt(want[:k], off); n < int(k) && err != nil && !errors.Is(err, io.EOF) {
			return 0, err
		}
	}
	// The writes since, each cut by the truncations after it.
	for i, op := range f.n.ops {
		if op.trunc {
			continue
		}
		end := op.off + int64(len(op.data))
		for _, later := range f.n.ops[i+1:] {
			if later.trunc {
				end = min(end, later.off)
			}
		}
		lo, hi := max(op.off, off), min(end, off+int64(len(want)))
		if lo < hi {
			copy(want[lo-off:hi-off], op.data[lo-op.off:hi-op.off])
		}
	}
	// Bytes cut by a truncation and not written again read as zeros (a
	// file truncated and extended): done by the clear above where base's
	// copy is not read.
	if len(want) < len(p) {
		return len(want), io.EOF
	}
	return len(want), nil
}

func (f *lazyFile) Stat() (fs.FileInfo, error) {
	info, err := f.File.Stat()
	if err != nil {
		return nil, err
	}
	f.n.mu.Lock()
	defer f.n.mu.Unlock()
	return lazyInfo{FileInfo: info, size: f.n.size}, nil
}

// Sync writes the writes and truncations not synced to base, in order,
// and syncs it.
func (f *lazyFile) Sync() error {
	f.n.mu.Lock()
	defer f.n.mu.Unlock()
	for _, op := range f.n.ops {
		var err error
		if op.trunc {
			err = f.File.Truncate(op.off)
		} else {
			_, err = f.File.WriteAt(op.data, op.off)
		}
		if err != nil {
			return err
		}
	}
	f.n.ops = nil
	return f.File.Sync()
}
