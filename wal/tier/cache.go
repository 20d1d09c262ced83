package tier

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/braidmq/braid/wal"
	"github.com/nats-io/nats.go/jetstream"
)

// cache keeps the files downloaded from the tier for reads, up to a bound
// of bytes, the least recently used going first (a file being read stays
// until its readers are done).
type cache struct {
	dir   string
	limit int64

	mu      sync.Mutex
	files   map[string]*cached // by object name
	bytes   int64
	clock   uint64
	loading map[string]chan struct{}

	downloads, hits atomic.Int64
}

type cached struct {
	path    string
	file    *os.File
	reader  *wal.FileReader
	size    int64
	used    uint64
	readers int
	dropped bool
}

func newCache(dir string, limit int64) *cache {
	return &cache{dir: dir, limit: limit, files: map[string]*cached{}, loading: map[string]chan struct{}{}}
}

// Stats returns how many files the cache downloaded, how many reads it
// served from a file it had, and the bytes it holds.
func (t *Tier) Stats() (downloads, hits, bytes int64) {
	c := t.cache
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.downloads.Load(), c.hits.Load(), c.bytes
}

// get returns a reader of the file of e, downloading it if need be; the
// caller calls release when done with it.
func (c *cache) get(ctx context.Context, store jetstream.ObjectStore, e Entry) (*wal.FileReader, func(), error) {
	for {
		c.mu.Lock()
		if f, ok := c.files[e.Object]; ok {
			c.clock++
			f.used = c.clock
			f.readers++
			c.mu.Unlock()
			c.hits.Add(1)
			return f.reader, func() { c.release(e.Object, f) }, nil
		}
		if wait, ok := c.loading[e.Object]; ok {
			c.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			}
		}
		done := make(chan struct{})
		c.loading[e.Object] = done
		c.mu.Unlock()
		f, err := c.download(ctx, store, e)
		c.mu.Lock()
		delete(c.loading, e.Object)
		close(done)
		if err != nil {
			c.mu.Unlock()
			return nil, nil, err
		}
		c.downloads.Add(1)
		c.clock++
		f.used = c.clock
		f.readers = 1
		c.files[e.Object] = f
		c.bytes += f.size
		c.evictLocked()
		c.mu.Unlock()
		return f.reader, func() { c.release(e.Object, f) }, nil
	}
}

// download fetches the object of e into the cache directory and indexes
// it; the object store checks its digest.
func (c *cache) download(ctx context.Context, store jetstream.ObjectStore, e Entry) (*cached, error) {
	sum := sha256.Sum256([]byte(e.Object))
	path := filepath.Join(c.dir, hex.EncodeToString(sum[:16]))
	temp := path + ".part"
	if err := store.GetFile(ctx, e.Object, temp); err != nil {
		os.Remove(temp)
		return nil, fmt.Errorf("braid/tier: downloading %s: %w", e.Object, err)
	}
	if err := os.Rename(temp, path); err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	info, err := f.Stat()
	if err == nil && info.Size() != e.Bytes {
		err = fmt.Errorf("braid/tier: %s is %d bytes, the manifest says %d", e.Object, info.Size(), e.Bytes)
	}
	var r *wal.FileReader
	if err == nil {
		r, err = wal.NewFileReader(f, info.Size(), e.First, e.Next)
	}
	if err != nil {
		f.Close()
		os.Remove(path)
		return nil, fmt.Errorf("braid/tier: %s: %w", e.Object, err)
	}
	return &cached{path: path, file: f, reader: r, size: info.Size()}, nil
}

func (c *cache) release(name string, f *cached) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f.readers--
	if f.dropped && f.readers == 0 {
		f.file.Close()
		os.Remove(f.path)
	}
	c.evictLocked()
}

// evictLocked removes the least recently used files while the cache holds
// more than its limit; files being read stay.
func (c *cache) evictLocked() {
	for c.bytes > c.limit {
		var oldest string
		var of *cached
		for name, f := range c.files {
			if f.readers == 0 && (of == nil || f.used < of.used) {
				oldest, of = name, f
			}
		}
		if of == nil {
			return
		}
		c.removeLocked(oldest, of)
	}
}

func (c *cache) removeLocked(name string, f *cached) {
	delete(c.files, name)
	c.bytes -= f.size
	f.dropped = true
	if f.readers == 0 {
		f.file.Close()
		os.Remove(f.path)
	}
}

// drop removes the file of an object from the cache (its object is gone).
func (c *cache) drop(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f, ok := c.files[name]; ok {
		c.removeLocked(name, f)
	}
}
