package wal

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"path/filepath"
	"time"
)

// The storage lifecycle of a log: its files roll by size as it is written
// (Options.SegmentBytes, changeable with SetSegmentBytes) and, on demand,
// by age (Roll: a caller that ticks rolls a tail older than its policy);
// retention removes whole closed files from the head (DropFilesBefore,
// which rewrites nothing). ClosedFiles describes the closed files, with
// the time of each one's newest record, for a caller to decide what is
// past retention. None of these holds up appends for longer than a file
// creation or removal.

// FileInfo describes one closed file of a log: the offsets [First, Next)
// it holds, its size, and the time (unix ms) of its newest record: the
// largest timestamp of its records when Exact, else a lower bound of it
// (the last record's; producers set times in any order) that
// Log.ExactNewest makes exact.
type FileInfo struct {
	First, Next uint64
	Bytes       int64
	Newest      int64
	Exact       bool
}

// Unlimited is a SegmentBytes that never rolls by size.
const Unlimited = -1

// SetSegmentBytes changes the size past which the log rolls to a new file
// (0: DefaultSegmentBytes; Unlimited: never), from its next write on.
func (l *Log) SetSegmentBytes(n int) {
	switch {
	case n == Unlimited || n < 0:
		n = math.MaxInt
	case n == 0:
		n = DefaultSegmentBytes
	}
	l.segmentBytes.Store(int64(n))
}

// rollBytes is the size past which the tail rolls: SetSegmentBytes's,
// else Options.SegmentBytes (l.opts is not written after Open: readers
// read it without the write lock).
func (l *Log) rollBytes() int64 {
	if n := l.segmentBytes.Load(); n > 0 {
		return n
	}
	return int64(l.opts.SegmentBytes)
}

// TailStarted returns when the log's open file (its tail) was started; for
// a tail found on disk at Open, the time of its first record if it holds
// any and that is earlier, else when the log opened.
func (l *Log) TailStarted() time.Time { return time.Unix(0, l.tailStarted.Load()) }

// Roll closes the open file and starts a new one for the next append, if
// the open file holds any record; it reports whether it rolled. Under
// DurabilityAlways what was written and not yet committed is made durable
// first.
func (l *Log) Roll() (bool, error) {
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	if err := l.writableLocked(); err != nil {
		return false, err
	}
	if err := l.commitWrittenLocked(); err != nil {
		return false, err
	}
	if l.tail.next == l.tail.first {
		return false, nil
	}
	if err := l.rollLocked(l.tail.next); err != nil {
		return false, l.failLocked(fmt.Errorf("roll at %d: %w", l.tail.next, err))
	}
	return true, nil
}

// ClosedFiles describes the log's files before its open one, oldest first.
// A closed file does not change, so its size and the time of its newest
// record are learnt once and remembered. A file rolled in this process
// had its largest timestamp counted as it was written (Exact); for one
// closed before, only its last record is read (a lower bound: the caller
// about to act on it asks ExactNewest, which reads the file through once),
// or its modification time when that record cannot be read.
func (l *Log) ClosedFiles() ([]FileInfo, error) {
	l.mu.Lock()
	files := l.view.files
	first := l.view.first
	l.mu.Unlock()
	if len(files) < 2 {
		return nil, nil
	}
	out := make([]FileInfo, 0, len(files)-1)
	for i := 0; i+1 < len(files); i++ {
		c, ok, err := l.closedFile(files[i], files[i+1])
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, FileInfo{First: max(files[i], first), Next: files[i+1], Bytes: c.bytes, Newest: c.newest, Exact: c.exact})
		}
	}
	return out, nil
}

// forgetClosed drops what ClosedFiles remembers.
func (l *Log) forgetClosed() {
	l.newestMu.Lock()
	l.newest = nil
	l.newestMu.Unlock()
}

// closedInfo is what ClosedFiles remembers of a closed file.
type closedInfo struct {
	bytes, newest int64
	exact         bool
}

// closedFile returns what is known of the closed file that starts at first
// and ends before next, reading it the first time; ok is false when the
// file was removed under us (by a head truncation).
func (l *Log) closedFile(first, next uint64) (closedInfo, bool, error) {
	l.newestMu.Lock()
	c, ok := l.newest[first]
	l.newestMu.Unlock()
	if ok {
		return c, true, nil
	}
	l.mu.RLock()
	name, trimmed := segmentName(first), int64(0)
	if len(l.view.files) > 0 && l.view.files[0] == first && l.view.headPos > 0 {
		name, trimmed = segmentName(l.view.headName), l.view.headPos
	}
	l.mu.RUnlock()
	st, err := l.fs.Stat(filepath.Join(l.dir, name))
	if errors.Is(err, fs.ErrNotExist) {
		return c, false, nil
	}
	if err != nil {
		return c, false, err
	}
	c = closedInfo{bytes: st.Size() - trimmed, newest: st.ModTime().UnixMilli()}
	l.newestMu.Lock()
	m, counted := l.maxTimes[first]
	l.newestMu.Unlock()
	if counted {
		c.newest, c.exact = m, true
	} else if next > first {
		if recs, err := l.ReadRange(next-1, 1, 0); err == nil && len(recs) == 1 {
			c.newest = recs[0].Timestamp
		}
	}
	l.newestMu.Lock()
	if l.newest == nil {
		l.newest = map[uint64]closedInfo{}
	}
	l.newest[first] = c
	l.newestMu.Unlock()
	return c, true, nil
}

// rememberMaxTime records the largest timestamp of the file that starts at
// first, counted as it was written (see closedFile).
func (l *Log) rememberMaxTime(first uint64, ts int64) {
	l.newestMu.Lock()
	if l.maxTimes == nil {
		l.maxTimes = map[uint64]int64{}
	}
	l.maxTimes[first] = ts
	l.newestMu.Unlock()
}

// ExactNewest returns f (one of ClosedFiles) with Newest the largest
// timestamp of its records, reading the file through if that is not known
// yet (once: it is remembered).
func (l *Log) ExactNewest(f FileInfo) FileInfo {
	if f.Exact {
		return f
	}
	if m, ok := l.maxTimeIn(f.First, f.Next); ok {
		f.Newest = max(f.Newest, m)
	}
	f.Exact = true
	l.mu.RLock()
	files := l.view.files
	l.mu.RUnlock()
	if len(files) == 0 {
		return f
	}
	key := files[fileHolding(files, f.First)]
	l.newestMu.Lock()
	if c, ok := l.newest[key]; ok {
		c.newest, c.exact = f.Newest, true
		l.newest[key] = c
	}
	l.newestMu.Unlock()
	return f
}

// maxTimeIn reads the records [first, next) that are still there and
// returns their largest timestamp; ok is false when none could be read.
// Holes are stepped over.
func (l *Log) maxTimeIn(first, next uint64) (int64, bool) {
	best, ok := int64(math.MinInt64), false
	for off := max(first, l.FirstOffset()); off < next; {
		recs, err := l.ReadRange(off, int(min(next-off, 4096)), 4<<20)
		for _, r := range recs {
			best, ok = max(best, r.Timestamp), true
		}
		off += uint64(len(recs))
		if err != nil {
			var hole *HoleError
			if !errors.As(err, &hole) || hole.To <= off {
				break
			}
			off = hole.To
		} else if len(recs) == 0 {
			break
		}
	}
	return best, ok
}

// DropFilesBefore removes the closed files that hold only offsets below
// before, where before is the first offset of a file (as ClosedFiles
// gives them): FirstOffset becomes before. It never touches the open file
// and rewrites nothing.
func (l *Log) DropFilesBefore(before uint64) error {
	l.mu.Lock()
	files := l.view.files
	l.mu.Unlock()
	if len(files) == 0 || before > files[len(files)-1] {
		return fmt.Errorf("%w: %d is past the open file of %s", ErrNotFound, before, l.dir)
	}
	boundary := false
	for _, f := range files {
		boundary = boundary || f == before
	}
	if !boundary {
		return fmt.Errorf("%w: %d is not the first offset of a file of %s", ErrNotFound, before, l.dir)
	}
	if err := l.TruncateHead(before); err != nil {
		return err
	}
	l.newestMu.Lock()
	for f := range l.newest {
		if f < before {
			delete(l.newest, f)
		}
	}
	l.newestMu.Unlock()
	return nil
}
