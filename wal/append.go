package wal

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
)

// The append path: records (or frames made by EncodeRecord) are encoded
// into batch frames in Log.buf, then written to the tail file, rolling to
// a new file at SegmentBytes and writing zeros ahead (preallocation).

// maxKeptBatchBytes bounds the write buffer a Log keeps between appends.
const maxKeptBatchBytes = 1 << 20

// plannedFrame is one frame of the append being written: records [from, to)
// of the append, at bytes [start, end) of Log.buf.
type plannedFrame struct {
	first       uint64
	from, to    int
	recordBytes int
	start, end  int
	maxTime     int64 // the largest timestamp of its records
}

// Append writes recs as one batch (one write, one fsync under
// DurabilityAlways) and returns the offset of the first; the others follow
// densely. Appending nothing returns NextOffset.
func (l *Log) Append(recs ...Record) (first uint64, err error) {
	return appendBodies(l, recordBodies(recs), plainFrame, true)
}

// AppendEncoded is Append for frames made by EncodeRecord, so that callers
// can encode outside any lock. It checks every frame's version and CRC
// first (the log stores the records under a CRC of its own, which would
// vouch for a damaged one) and writes nothing if one fails.
func (l *Log) AppendEncoded(frames [][]byte) (first uint64, err error) {
	for i, frame := range frames {
		if _, err := checkFrame(frame); err != nil {
			return 0, fmt.Errorf("braid/wal: frame %d of batch: %w", i, err)
		}
	}
	return appendBodies(l, frameBodies(frames), plainFrame, true)
}

// bodySource is the records of one append, as Records or as record frames.
type bodySource interface {
	len() int
	bodyLen(i int) int
	appendBody(dst []byte, i int) []byte
}

type recordBodies []Record

func (r recordBodies) len() int                            { return len(r) }
func (r recordBodies) bodyLen(i int) int                   { return bodyLen(r[i]) }
func (r recordBodies) appendBody(dst []byte, i int) []byte { return appendBody(dst, r[i]) }

type frameBodies [][]byte

func (f frameBodies) len() int          { return len(f) }
func (f frameBodies) bodyLen(i int) int { return len(f[i]) - frameHeaderLen }
func (f frameBodies) appendBody(dst []byte, i int) []byte {
	return append(dst, f[i][frameHeaderLen:]...)
}

// appendBodies writes src as one batch in frames of meta (a version 3 meta
// makes one frame of it all). Under DurabilityAlways it fsyncs and
// publishes the batch when wait is set, and leaves both to Commit when not
// (see Write).
func appendBodies[S bodySource](l *Log, src S, meta frameMeta, wait bool) (uint64, error) {
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	if err := l.writableLocked(); err != nil {
		return 0, err
	}
	first := l.tail.next
	if src.len() == 0 {
		return first, nil
	}
	encodeLocked(l, src, first, meta)
	err := l.writeFramesLocked()
	if cap(l.buf) > maxKeptBatchBytes {
		l.buf, l.bodyLens = nil, nil
	}
	if err != nil {
		return 0, l.failLocked(fmt.Errorf("write batch at offset %d: %w", first, err))
	}
	if l.opts.Durability == DurabilityAlways {
		if !wait {
			return first, nil
		}
		if err := l.syncLocked(); err != nil {
			return 0, err
		}
	}
	l.publishTailLocked()
	return first, nil
}

// encodeLocked fills buf with the entries of src, cut into frames of at
// most maxBatchRecordBytes of records (one frame, of any size, for a raft
// entry), the first at offset first.
func encodeLocked[S bodySource](l *Log, src S, first uint64, meta frameMeta) {
	whole := meta.version == entryVersion
	n := src.len()
	l.bodyLens = l.bodyLens[:0]
	l.plan = l.plan[:0]
	total := 0
	for i := 0; i < n; {
		f := plannedFrame{first: first + uint64(i), from: i}
		for ; i < n; i++ {
			size := src.bodyLen(i)
			stored := storedLen(size)
			if i > f.from && f.recordBytes+stored > maxBatchRecordBytes && !whole {
				break
			}
			l.bodyLens = append(l.bodyLens, size)
			f.recordBytes += stored
		}
		f.to = i
		frameLen := frameHeaderLenOf(meta.version) + f.recordBytes
		total += uvarintLen(uint64(frameLen)) + frameLen
		l.plan = append(l.plan, f)
	}
	l.buf = slices.Grow(l.buf[:0], total)
	for i := range l.plan {
		f := &l.plan[i]
		f.start = len(l.buf)
		var frameStart int
		l.buf, frameStart = beginBatch(l.buf, meta, f.first, f.to-f.from, f.recordBytes)
		f.maxTime = math.MinInt64
		for k := f.from; k < f.to; k++ {
			l.buf = binary.AppendUvarint(l.buf, uint64(l.bodyLens[k]))
			body := len(l.buf)
			l.buf = src.appendBody(l.buf, k)
			if ts, n := binary.Varint(l.buf[body:]); n > 0 && ts > f.maxTime { // a body starts with its timestamp
				f.maxTime = ts
			}
		}
		sealBatch(l.buf, frameStart)
		f.end = len(l.buf)
	}
}

// writeFramesLocked writes the planned frames to the tail, rolling to a new
// file before a frame when the tail has reached SegmentBytes.
func (l *Log) writeFramesLocked() error {
	chunk := 0
	for _, f := range l.plan {
		if l.tail.size >= l.rollBytes() {
			if err := l.writeTailLocked(l.buf[chunk:f.start]); err != nil {
				return err
			}
			chunk = f.start
			if err := l.rollLocked(f.first); err != nil {
				return err
			}
		}
		l.tail.frames = append(l.tail.frames, frameRef{first: f.first, pos: l.tail.size})
		l.tail.maxTime = max(l.tail.maxTime, f.maxTime)
		l.tail.size += int64(f.end - f.start)
		l.tail.next = f.first + uint64(f.to-f.from)
	}
	return l.writeTailLocked(l.buf[chunk:])
}

// writeTailLocked writes p, the bytes that end at tail.size, to the tail
// file, filling the file with zeros ahead of them first when they reach
// past what was preallocated.
func (l *Log) writeTailLocked(p []byte) error {
	if len(p) == 0 {
		return nil
	}
	l.unsynced = true
	if err := l.preallocateLocked(len(p)); err != nil {
		return err
	}
	if l.tail.alloc < l.tail.size {
		l.tail.alloc = 0 // a large write went past the zeros
	}
	l.preallocated.Store(max(l.tail.alloc-l.tail.size, 0))
	ioWrites.Add(1)
	l.written += int64(len(p))
	pos := l.tail.size - int64(len(p))
	// Journaled first: a failed write fails the log, whose entries are
	// then never committed.
	direct := l.journalWriteLocked(p, pos)
	if b, ok := l.tail.file.(*bufferedFile); ok {
		write := b.appendAt
		if direct {
			write = b.writeThrough // its own sync makes it durable: no use holding it
		}
		if err := write(p, pos); err != nil {
			return err
		}
	} else if _, err := l.tail.file.WriteAt(p, pos); err != nil {
		return err
	}
	return nil
}

// preallocateLocked extends the tail file with zeros when tail.size has
// passed its end, by a step of half what the log wrote since it opened
// (between minPreallocate and Options.Preallocate). A write of more than
// maxPreallocatedWrite bytes (n) gets no zeros: the sync after it moves
// that much data that a journal commit more costs little, while zeros
// would double the bytes it puts through the page cache.
func (l *Log) preallocateLocked(n int) error {
	if l.opts.Preallocate == 0 || l.tail.size <= l.tail.alloc || n > maxPreallocatedWrite {
		return nil
	}
	step := int64(min(max(int(l.written/2), minPreallocate), l.opts.Preallocate))
	// SizeBytes, read meanwhile, leaves the zeros out before they are in
	// the file (it may count too little for a moment, never too much).
	l.preallocated.Store(step)
	// The zeros go after the bytes about to be written, which reach past
	// the old end.
	for at := l.tail.size; at < l.tail.size+step; {
		n := min(int64(len(zeros)), l.tail.size+step-at)
		if _, err := l.tail.file.WriteAt(zeros[:n], at); err != nil {
			return err
		}
		at += n
	}
	l.tail.alloc = l.tail.size + step
	return nil
}

// maxPreallocatedWrite is the largest write that preallocation serves.
const maxPreallocatedWrite = 128 << 10

// zeros is what preallocation writes; never written to.
var zeros [DefaultPreallocate]byte
