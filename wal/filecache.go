package wal

import (
	"io/fs"
	"sync"
	"sync/atomic"
)

// A FileCache bounds the file descriptors that many logs hold
// (Options.Files). A log keeps its tail file, and up to two older files it
// read last, open for its life; a node with tens of thousands of logs
// would run out of descriptors. Through a FileCache, a log's files are
// opened on first use and closed when the cache needs room for others
// (the least recently used that no operation is using, by the clock
// algorithm), and opened again, by name, on their next use. A file being
// used (a write, a read, a sync under way) is never closed; if every file
// is in use, the cache holds more than its bound until some are not.
//
// Closing and reopening a file loses nothing: its data stays in the page
// cache, a sync through the new descriptor makes the inode durable, and
// Linux reports a write-back failure not yet seen through any descriptor
// to one opened after it. A file reopened by name is the same file: a log
// renames or removes a file it has open only while it holds the locks
// that every use of that file takes, and lets go of the old one first.
type FileCache struct {
	max int

	mu sync.Mutex
	// Guarded by mu: ring holds the files with a descriptor open, each at
	// its slot; hand is where the clock's next sweep starts.
	ring []*cachedFile
	hand int

	opens, evictions atomic.Uint64
}

// NewFileCache returns a cache that keeps at most limit descriptors open
// (at least 1).
func NewFileCache(limit int) *FileCache { return &FileCache{max: max(limit, 1)} }

// FileCacheCounts are what a FileCache did and holds.
type FileCacheCounts struct {
	Open             int    // descriptors open now
	Opens, Evictions uint64 // descriptors opened and closed to make room, ever
	Max              int    // the bound
}

// Counts returns what the cache did and holds.
func (c *FileCache) Counts() FileCacheCounts {
	c.mu.Lock()
	n := len(c.ring)
	c.mu.Unlock()
	return FileCacheCounts{Open: n, Opens: c.opens.Load(), Evictions: c.evictions.Load(), Max: c.max}
}

// open opens name now (with flag) and returns it as a file of the cache,
// reopened later with reopenFlag.
func (c *FileCache) open(fsys FS, name string, flag, reopenFlag int, perm fs.FileMode) (File, error) {
	f, err := fsys.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	cf := &cachedFile{cache: c, fsys: fsys, name: name, flag: reopenFlag, f: f, slot: -1}
	cf.dev = deviceOfFile(f)
	c.opens.Add(1)
	c.admit(cf)
	return cf, nil
}

// admit puts a file that just opened its descriptor in the ring and makes
// room for it.
func (c *FileCache) admit(cf *cachedFile) {
	cf.used.Store(true)
	c.mu.Lock()
	defer c.mu.Unlock()
	cf.mu.Lock()
	// Not if it was closed, or evicted again, or admitted by another
	// reopen, meanwhile.
	ok := !cf.closed && cf.f != nil && cf.slot < 0
	if ok {
		cf.slot = len(c.ring)
		c.ring = append(c.ring, cf)
	}
	cf.mu.Unlock()
	if ok {
		c.evictLocked()
	}
}

// evictLocked closes descriptors until the ring is within its bound, or
// every file in it is in use. The caller holds mu.
func (c *FileCache) evictLocked() {
	for tries := 2 * len(c.ring); len(c.ring) > c.max && tries > 0; tries-- {
		if c.hand >= len(c.ring) {
			c.hand = 0
		}
		cf := c.ring[c.hand]
		if cf.used.Swap(false) || !cf.mu.TryLock() {
			c.hand++
			continue
		}
		if cf.users > 0 || cf.f == nil {
			cf.mu.Unlock()
			c.hand++
			continue
		}
		_ = cf.f.Close()
		cf.f = nil
		c.removeLocked(cf)
		cf.mu.Unlock()
		c.evictions.Add(1)
	}
}

// removeLocked takes cf out of the ring. The caller holds mu.
func (c *FileCache) removeLocked(cf *cachedFile) {
	i := cf.slot
	if i < 0 || i >= len(c.ring) || c.ring[i] != cf {
		return
	}
	last := len(c.ring) - 1
	c.ring[i] = c.ring[last]
	c.ring[i].slot = i
	c.ring[last] = nil
	c.ring = c.ring[:last]
	cf.slot = -1
}

// cachedFile is a File of a FileCache: its descriptor may be closed while
// no operation uses it, and is opened again by name when one does.
type cachedFile struct {
	cache *FileCache
	fsys  FS
	name  string
	flag  int    // to reopen it with
	dev   uint64 // its file system's device (0 when unknown)
	used  atomic.Bool

	mu sync.Mutex
	// Guarded by mu: f is the open descriptor (nil while evicted); users
	// counts the operations using it; slot is its place in the cache's
	// ring (guarded by the cache's mu as well; -1 when not in it); closed
	// is set by Close.
	f      File
	users  int
	slot   int
	closed bool
}

// acquire returns the open descriptor, opening it again if it was
// evicted, and pins it until release.
func (cf *cachedFile) acquire() (File, error) {
	cf.used.Store(true)
	cf.mu.Lock()
	if cf.closed {
		cf.mu.Unlock()
		return nil, fs.ErrClosed
	}
	reopened := false
	if cf.f == nil {
		f, err := cf.fsys.OpenFile(cf.name, cf.flag, 0)
		if err != nil {
			cf.mu.Unlock()
			return nil, err
		}
		cf.f, reopened = f, true
		cf.cache.opens.Add(1)
	}
	cf.users++
	f := cf.f
	cf.mu.Unlock()
	if reopened {
		cf.cache.admit(cf)
	}
	return f, nil
}

func (cf *cachedFile) release() {
	cf.mu.Lock()
	cf.users--
	cf.mu.Unlock()
}

func (cf *cachedFile) Name() string { return cf.name }

func (cf *cachedFile) ReadAt(p []byte, off int64) (int, error) {
	f, err := cf.acquire()
	if err != nil {
		return 0, err
	}
	defer cf.release()
	return f.ReadAt(p, off)
}

func (cf *cachedFile) WriteAt(p []byte, off int64) (int, error) {
	f, err := cf.acquire()
	if err != nil {
		return 0, err
	}
	defer cf.release()
	return f.WriteAt(p, off)
}

func (cf *cachedFile) Write(p []byte) (int, error) {
	f, err := cf.acquire()
	if err != nil {
		return 0, err
	}
	defer cf.release()
	return f.Write(p)
}

func (cf *cachedFile) Stat() (fs.FileInfo, error) {
	f, err := cf.acquire()
	if err != nil {
		return nil, err
	}
	defer cf.release()
	return f.Stat()
}

func (cf *cachedFile) Truncate(size int64) error {
	f, err := cf.acquire()
	if err != nil {
		return err
	}
	defer cf.release()
	return f.Truncate(size)
}

func (cf *cachedFile) Sync() error {
	f, err := cf.acquire()
	if err != nil {
		return err
	}
	defer cf.release()
	return f.Sync()
}

// startSync starts a sync through the descriptor, pinned until it is
// done.
func (cf *cachedFile) startSync() func() error {
	f, err := cf.acquire()
	if err != nil {
		return func() error { return err }
	}
	wait := startSync(f)
	return func() error {
		defer cf.release()
		return wait()
	}
}

// device is the file system's device of the file (0 when unknown).
func (cf *cachedFile) device() uint64 { return cf.dev }

// Close closes the descriptor, if open, and the file for good.
func (cf *cachedFile) Close() error {
	cf.cache.mu.Lock()
	cf.mu.Lock()
	cf.closed = true
	f := cf.f
	cf.f = nil
	cf.cache.removeLocked(cf)
	cf.mu.Unlock()
	cf.cache.mu.Unlock()
	if f == nil {
		return nil
	}
	return f.Close()
}

// deviceOfFile returns the device of an operating system's file's file
// system, 0 for others.
func deviceOfFile(f File) uint64 {
	if of, ok := f.(osFile); ok {
		return of.dev
	}
	return 0
}

// openLogFile opens a file of a log: through the log's FileCache, when it
// has one (reopened later with reopenFlag), else directly.
func openLogFile(opts Options, name string, flag, reopenFlag int, perm fs.FileMode) (File, error) {
	if opts.Files != nil {
		return opts.Files.open(opts.FS, name, flag, reopenFlag, perm)
	}
	return opts.FS.OpenFile(name, flag, perm)
}
