package wal_test

import (
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/braidmq/braid/wal"
)

// TestFileCacheBoundsDescriptors writes, commits, reads, rolls and
// truncates many logs from several goroutines at once through a file
// cache far smaller than their files: every record reads back as written,
// the cache evicted descriptors, and it holds no more than its bound once
// nothing uses them.
func TestFileCacheBoundsDescriptors(t *testing.T) {
	const logs, bound, appends = 40, 6, 30
	cache := wal.NewFileCache(bound)
	dir := t.TempDir()
	opts := wal.Options{Durability: wal.DurabilityAlways, SegmentBytes: 600, Files: cache}
	all := make([]*wal.Log, logs)
	for i := range all {
		l, err := wal.Open(filepath.Join(dir, fmt.Sprint(i)), opts)
		if err != nil {
			t.Fatal(err)
		}
		all[i] = l
	}
	payload := func(log, n int) string { return fmt.Sprintf("log %d record %d %s", log, n, "................") }
	var wg sync.WaitGroup
	errs := make(chan error, logs)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range appends {
				for i := w; i < logs; i += 4 {
					l := all[i]
					if _, err := l.Append(wal.Record{Payload: []byte(payload(i, n))}); err != nil {
						errs <- err
						return
					}
					if n == appends/2 {
						// Cut the last record and write it again.
						if err := l.TruncateTail(uint64(n)); err != nil {
							errs <- err
							return
						}
						if _, err := l.Append(wal.Record{Payload: []byte(payload(i, n))}); err != nil {
							errs <- err
							return
						}
					}
					// Read an early record (an older file) and the last.
					for _, off := range []uint64{0, uint64(n)} {
						rec, err := l.Read(off)
						if err != nil || string(rec.Payload) != payload(i, int(off)) {
							errs <- fmt.Errorf("log %d offset %d: %q, %v", i, off, rec.Payload, err)
							return
						}
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	c := cache.Counts()
	if c.Evictions == 0 || c.Open > bound {
		t.Fatalf("cache %+v: want evictions and at most %d open", c, bound)
	}
	for i, l := range all {
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		l, err := wal.Open(filepath.Join(dir, fmt.Sprint(i)), wal.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if l.NextOffset() != appends {
			t.Fatalf("log %d holds %d records, want %d", i, l.NextOffset(), appends)
		}
		l.Close()
	}
	if c := cache.Counts(); c.Open != 0 {
		t.Fatalf("%d descriptors open after every log closed", c.Open)
	}
	t.Logf("cache after the run: %+v", c)
}
