package compaction

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"

	"github.com/braidmq/braid/wal"
)

// A compacted log holds the records a compaction kept of one unit, each at
// the offset it had in the unit's log: it is a wal log whose records carry
// their original offset in a last header of a reserved name (stripped on
// read), in ascending order. A reader from an offset finds the first kept
// record at or after it by binary search over the log.

// offsetHeader names the header a compacted record's offset travels in.
const offsetHeader = "\x00braid.offset"

// LogWriter writes a compacted log.
type LogWriter struct {
	l       *wal.Log
	last    uint64
	any     bool
	pending []wal.Record
}

// CreateLog starts a compacted log in dir, which must not hold one.
func CreateLog(dir string) (*LogWriter, error) {
	l, err := wal.Open(dir, wal.Options{Durability: wal.DurabilityNone, SegmentBytes: 64 << 20})
	if err != nil {
		return nil, err
	}
	if l.NextOffset() != 0 {
		l.Close()
		return nil, fmt.Errorf("compaction: %s already holds a log", dir)
	}
	return &LogWriter{l: l}, nil
}

// Append adds the record kept at offset off; offsets must ascend.
func (w *LogWriter) Append(off uint64, rec wal.Record) error {
	if w.any && off <= w.last {
		return fmt.Errorf("compaction: offset %d after %d", off, w.last)
	}
	w.any, w.last = true, off
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], off)
	rec.Headers = append(append([]wal.Header(nil), rec.Headers...), wal.Header{Key: offsetHeader, Value: b[:]})
	w.pending = append(w.pending, rec)
	if len(w.pending) >= 256 {
		return w.flush()
	}
	return nil
}

func (w *LogWriter) flush() error {
	if len(w.pending) == 0 {
		return nil
	}
	_, err := w.l.Append(w.pending...)
	w.pending = w.pending[:0]
	return err
}

// Finish makes the log durable and closes it.
func (w *LogWriter) Finish() error {
	if err := w.flush(); err != nil {
		w.l.Close()
		return err
	}
	return errors.Join(w.l.Sync(), w.l.Close())
}

// Abort closes the log without making it durable (the caller removes it).
func (w *LogWriter) Abort() { w.l.Close() }

// LogReader reads a compacted log. It is safe for concurrent use.
type LogReader struct {
	l  *wal.Log
	mu sync.Mutex
	// lastOff and lastIdx cache where the last read ended: a reader going
	// on from there needs no search.
	lastOff, lastIdx uint64
}

// OpenLog opens the compacted log in dir; an error matching os.ErrNotExist
// when there is none.
func OpenLog(dir string) (*LogReader, error) {
	if _, err := os.Stat(dir); err != nil {
		return nil, err
	}
	l, err := wal.Open(dir, wal.Options{Durability: wal.DurabilityNone})
	if err != nil {
		return nil, err
	}
	return &LogReader{l: l}, nil
}

// Close closes the log.
func (r *LogReader) Close() error { return r.l.Close() }

// Len is how many records the log keeps.
func (r *LogReader) Len() uint64 { return r.l.NextOffset() - r.l.FirstOffset() }

// Bytes is the log's size on disk.
func (r *LogReader) Bytes() int64 { return r.l.SizeBytes() }

// Kept is a record of a compacted log at its original offset.
type Kept struct {
	Offset uint64
	Record wal.Record
}

// ReadFrom returns up to max kept records (within maxBytes, at least one)
// at or after offset from; none when no kept record is. end reports that
// they are the last the log keeps.
func (r *LogReader) ReadFrom(from uint64, max, maxBytes int) (kept []Kept, end bool, err error) {
	idx, err := r.seek(from)
	if err != nil {
		return nil, false, err
	}
	if idx >= r.l.NextOffset() {
		return nil, true, nil
	}
	recs, err := r.l.ReadRange(idx, max, maxBytes)
	if err != nil {
		return nil, false, err
	}
	out := make([]Kept, 0, len(recs))
	for _, rec := range recs {
		off, stripped, err := splitOffset(rec)
		if err != nil {
			return nil, false, err
		}
		out = append(out, Kept{Offset: off, Record: stripped})
	}
	n := len(out)
	if n > 0 {
		r.mu.Lock()
		r.lastOff, r.lastIdx = out[n-1].Offset+1, idx+uint64(n)
		r.mu.Unlock()
	}
	return out, idx+uint64(n) >= r.l.NextOffset(), nil
}

// seek returns the index in the log of the first kept record at or after
// off (the log's end when there is none).
func (r *LogReader) seek(off uint64) (uint64, error) {
	first, next := r.l.FirstOffset(), r.l.NextOffset()
	r.mu.Lock()
	if r.lastOff == off && r.lastIdx >= first && r.lastIdx <= next {
		idx := r.lastIdx
		r.mu.Unlock()
		return idx, nil
	}
	r.mu.Unlock()
	var ferr error
	i := sort.Search(int(next-first), func(i int) bool {
		rec, err := r.l.Read(first + uint64(i))
		if err != nil {
			ferr = err
			return true
		}
		o, _, err := splitOffset(rec)
		if err != nil {
			ferr = err
			return true
		}
		return o >= off
	})
	return first + uint64(i), ferr
}

// splitOffset takes a compacted record's offset out of its headers.
func splitOffset(rec wal.Record) (uint64, wal.Record, error) {
	n := len(rec.Headers)
	if n == 0 || rec.Headers[n-1].Key != offsetHeader || len(rec.Headers[n-1].Value) != 8 {
		return 0, rec, fmt.Errorf("%w: a compacted record without its offset", wal.ErrCorrupt)
	}
	off := binary.LittleEndian.Uint64(rec.Headers[n-1].Value)
	rec.Headers = rec.Headers[:n-1]
	if len(rec.Headers) == 0 {
		rec.Headers = nil
	}
	return off, rec, nil
}
