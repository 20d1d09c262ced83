// Package crashfs holds file systems for testing what the logs of package
// wal do when the machine crashes or the disk fills up.
//
// Mem is a strict in-memory file system, in the manner of pebble's
// vfs.NewStrictMem: it keeps, beside what was written, what was made
// durable (a file's data by its Sync, a directory's entries by SyncDir),
// and Crash forgets everything else, as a power loss does. It counts the
// operations that change something, and can be told to fail every one
// after the n-th, as a process that died there: running a workload once to
// count them, then again for every n, crashing each time, tests every
// write and sync boundary of it.
//
// Full wraps a file system and fails writes with ENOSPC while it is told
// the disk is full, and syncs with EIO while it is told they fail.
package crashfs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/braidmq/braid/wal"
)

// ErrDied is what every operation returns once the operations allowed by
// DieAfter are used up.
var ErrDied = errors.New("crashfs: the process died here")

// Mem is a strict in-memory wal.FS. Paths are slash-separated and absolute
// ("/a/b"); the root always exists. Safe for concurrent use.
type Mem struct {
	mu   sync.Mutex
	root *node
	ops  int // operations that changed something
	// left is how many more changing operations may run; -1 without limit.
	left int
}

// node is a file or a directory.
type node struct {
	dir bool
	// A file's bytes, and what its last Sync made durable.
	data, durable []byte
	// A directory's entries, and what its last SyncDir made durable.
	entries, durableEntries map[string]*node
	modTime                 time.Time
}

func newDir() *node {
	return &node{dir: true, entries: map[string]*node{}, durableEntries: map[string]*node{}}
}

// NewMem returns an empty file system.
func NewMem() *Mem { return &Mem{root: newDir(), left: -1} }

// Ops is how many changing operations (a create, a write, a truncation, a
// sync, a rename, a removal, a directory made) ran so far.
func (m *Mem) Ops() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ops
}

// DieAfter lets n more changing operations run; every operation after them
// fails with ErrDied, and changes nothing, until Crash.
func (m *Mem) DieAfter(n int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.left = n
}

// Crash forgets everything that was not made durable: every file goes back
// to what its last Sync left, every directory to what its last SyncDir
// left (files and directories only in unsynced entries are gone), and
// operations run again. Open files of before must not be used.
func (m *Mem) Crash() {
	m.mu.Lock()
	defer m.mu.Unlock()
	var reset func(n *node)
	reset = func(n *node) {
		if !n.dir {
			n.data = slices.Clone(n.durable)
			return
		}
		n.entries = make(map[string]*node, len(n.durableEntries))
		for name, c := range n.durableEntries {
			n.entries[name] = c
			reset(c)
		}
	}
	reset(m.root)
	m.left = -1
}

// Durable returns a new file system holding what a crash now would leave
// of this one (what Crash would keep), this one going on unchanged: a
// test opens the copy to see what a power loss at this point keeps.
func (m *Mem) Durable() *Mem {
	m.mu.Lock()
	defer m.mu.Unlock()
	var copyNode func(n *node) *node
	copyNode = func(n *node) *node {
		if !n.dir {
			d := slices.Clone(n.durable)
			return &node{data: d, durable: slices.Clone(d), modTime: n.modTime}
		}
		c := newDir()
		c.modTime = n.modTime
		for name, e := range n.durableEntries {
			k := copyNode(e)
			c.entries[name], c.durableEntries[name] = k, k
		}
		return c
	}
	return &Mem{root: copyNode(m.root), left: -1}
}

// change accounts for one changing operation; the caller holds mu.
func (m *Mem) change() error {
	if m.left == 0 {
		return ErrDied
	}
	if m.left > 0 {
		m.left--
	}
	m.ops++
	return nil
}

// alive fails every operation once the process died; the caller holds mu.
func (m *Mem) alive() error {
	if m.left == 0 {
		return ErrDied
	}
	return nil
}

// split returns the names along an absolute path.
func split(name string) ([]string, error) {
	clean := path.Clean(name)
	if !strings.HasPrefix(clean, "/") {
		return nil, fmt.Errorf("crashfs: path %q is not absolute", name)
	}
	if clean == "/" {
		return nil, nil
	}
	return strings.Split(clean[1:], "/"), nil
}

// lookup finds the node of a path; the caller holds mu.
func (m *Mem) lookup(name string) (*node, error) {
	parts, err := split(name)
	if err != nil {
		return nil, err
	}
	n := m.root
	for _, p := range parts {
		if !n.dir {
			return nil, &os.PathError{Op: "open", Path: name, Err: syscall.ENOTDIR}
		}
		c, ok := n.entries[p]
		if !ok {
			return nil, &os.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
		}
		n = c
	}
	return n, nil
}

// parent finds the directory a path is in, and the path's last name; the
// caller holds mu.
func (m *Mem) parent(name string) (*node, string, error) {
	parts, err := split(name)
	if err != nil {
		return nil, "", err
	}
	if len(parts) == 0 {
		return nil, "", &os.PathError{Op: "open", Path: name, Err: fs.ErrInvalid}
	}
	d, err := m.lookup("/" + strings.Join(parts[:len(parts)-1], "/"))
	if err != nil {
		return nil, "", err
	}
	if !d.dir {
		return nil, "", &os.PathError{Op: "open", Path: name, Err: syscall.ENOTDIR}
	}
	return d, parts[len(parts)-1], nil
}

// OpenFile implements wal.FS.
func (m *Mem) OpenFile(name string, flag int, perm fs.FileMode) (wal.File, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.alive(); err != nil {
		return nil, err
	}
	d, base, err := m.parent(name)
	if err != nil {
		return nil, err
	}
	n, ok := d.entries[base]
	switch {
	case !ok && flag&os.O_CREATE == 0:
		return nil, &os.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	case ok && n.dir && flag&(os.O_WRONLY|os.O_RDWR) != 0:
		return nil, &os.PathError{Op: "open", Path: name, Err: syscall.EISDIR}
	case !ok:
		if err := m.change(); err != nil {
			return nil, err
		}
		n = &node{modTime: time.Now()}
		d.entries[base] = n
	case flag&os.O_TRUNC != 0 && len(n.data) > 0:
		if err := m.change(); err != nil {
			return nil, err
		}
		n.data = nil
	}
	return &memFile{m: m, n: n, name: name, writable: flag&(os.O_WRONLY|os.O_RDWR) != 0}, nil
}

// ReadDir implements wal.FS.
func (m *Mem) ReadDir(name string) ([]fs.DirEntry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.alive(); err != nil {
		return nil, err
	}
	d, err := m.lookup(name)
	if err != nil {
		return nil, err
	}
	if !d.dir {
		return nil, &os.PathError{Op: "readdir", Path: name, Err: syscall.ENOTDIR}
	}
	out := make([]fs.DirEntry, 0, len(d.entries))
	for base, n := range d.entries {
		out = append(out, fs.FileInfoToDirEntry(info(base, n)))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name() < out[j].Name() })
	return out, nil
}

// Stat implements wal.FS.
func (m *Mem) Stat(name string) (fs.FileInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.alive(); err != nil {
		return nil, err
	}
	n, err := m.lookup(name)
	if err != nil {
		return nil, err
	}
	return info(path.Base(name), n), nil
}

// MkdirAll implements wal.FS.
func (m *Mem) MkdirAll(name string, perm fs.FileMode) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.alive(); err != nil {
		return err
	}
	parts, err := split(name)
	if err != nil {
		return err
	}
	d := m.root
	for _, p := range parts {
		c, ok := d.entries[p]
		switch {
		case !ok:
			if err := m.change(); err != nil {
				return err
			}
			c = newDir()
			d.entries[p] = c
		case !c.dir:
			return &os.PathError{Op: "mkdir", Path: name, Err: syscall.ENOTDIR}
		}
		d = c
	}
	return nil
}

// Rename implements wal.FS.
func (m *Mem) Rename(oldname, newname string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.alive(); err != nil {
		return err
	}
	od, obase, err := m.parent(oldname)
	if err != nil {
		return err
	}
	n, ok := od.entries[obase]
	if !ok {
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: fs.ErrNotExist}
	}
	nd, nbase, err := m.parent(newname)
	if err != nil {
		return err
	}
	if err := m.change(); err != nil {
		return err
	}
	delete(od.entries, obase)
	nd.entries[nbase] = n
	return nil
}

// Remove implements wal.FS.
func (m *Mem) Remove(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.alive(); err != nil {
		return err
	}
	d, base, err := m.parent(name)
	if err != nil {
		return err
	}
	n, ok := d.entries[base]
	switch {
	case !ok:
		return &os.PathError{Op: "remove", Path: name, Err: fs.ErrNotExist}
	case n.dir && len(n.entries) > 0:
		return &os.PathError{Op: "remove", Path: name, Err: syscall.ENOTEMPTY}
	}
	if err := m.change(); err != nil {
		return err
	}
	delete(d.entries, base)
	return nil
}

// SyncDir implements wal.FS.
func (m *Mem) SyncDir(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.alive(); err != nil {
		return err
	}
	d, err := m.lookup(name)
	if err != nil {
		return err
	}
	if !d.dir {
		return &os.PathError{Op: "sync", Path: name, Err: syscall.ENOTDIR}
	}
	if err := m.change(); err != nil {
		return err
	}
	d.durableEntries = make(map[string]*node, len(d.entries))
	for base, c := range d.entries {
		d.durableEntries[base] = c
	}
	return nil
}

// memFile is an open file of a Mem.
type memFile struct {
	m        *Mem
	n        *node
	name     string
	writable bool
	pos      int64 // for Write
	closed   bool
}

func (f *memFile) check(write bool) error {
	if err := f.m.alive(); err != nil {
		return err
	}
	if f.closed {
		return &os.PathError{Op: "use", Path: f.name, Err: os.ErrClosed}
	}
	if write && !f.writable {
		return &os.PathError{Op: "write", Path: f.name, Err: syscall.EBADF}
	}
	return nil
}

func (f *memFile) Name() string { return f.name }

func (f *memFile) ReadAt(p []byte, off int64) (int, error) {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if err := f.check(false); err != nil {
		return 0, err
	}
	if off >= int64(len(f.n.data)) {
		return 0, io.EOF
	}
	n := copy(p, f.n.data[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (f *memFile) WriteAt(p []byte, off int64) (int, error) {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if err := f.check(true); err != nil {
		return 0, err
	}
	if err := f.m.change(); err != nil {
		return 0, err
	}
	if end := off + int64(len(p)); end > int64(len(f.n.data)) {
		f.n.data = append(f.n.data, make([]byte, end-int64(len(f.n.data)))...)
	}
	copy(f.n.data[off:], p)
	return len(p), nil
}

func (f *memFile) Write(p []byte) (int, error) {
	n, err := f.WriteAt(p, f.pos)
	f.pos += int64(n)
	return n, err
}

func (f *memFile) Truncate(size int64) error {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if err := f.check(true); err != nil {
		return err
	}
	if err := f.m.change(); err != nil {
		return err
	}
	if size <= int64(len(f.n.data)) {
		f.n.data = f.n.data[:size:size]
	} else {
		f.n.data = append(f.n.data, make([]byte, size-int64(len(f.n.data)))...)
	}
	return nil
}

func (f *memFile) Sync() error {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if err := f.check(false); err != nil {
		return err
	}
	if err := f.m.change(); err != nil {
		return err
	}
	f.n.durable = slices.Clone(f.n.data)
	return nil
}

func (f *memFile) Stat() (fs.FileInfo, error) {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if err := f.check(false); err != nil {
		return nil, err
	}
	return info(path.Base(f.name), f.n), nil
}

func (f *memFile) Close() error {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if f.closed {
		return &os.PathError{Op: "close", Path: f.name, Err: os.ErrClosed}
	}
	f.closed = true
	return nil
}

// fileInfo describes a node.
type fileInfo struct {
	name string
	size int64
	dir  bool
	mod  time.Time
}

func info(name string, n *node) fileInfo {
	return fileInfo{name: name, size: int64(len(n.data)), dir: n.dir, mod: n.modTime}
}

func (i fileInfo) Name() string       { return i.name }
func (i fileInfo) Size() int64        { return i.size }
func (i fileInfo) ModTime() time.Time { return i.mod }
func (i fileInfo) IsDir() bool        { return i.dir }
func (i fileInfo) Sys() any           { return nil }
func (i fileInfo) Mode() fs.FileMode {
	if i.dir {
		return fs.ModeDir | 0o750
	}
	return 0o640
}
