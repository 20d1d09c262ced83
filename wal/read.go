package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
)

// olderFilesCached is how many files besides the tail a Log keeps open for
// readers, each with the index of its frames.
const olderFilesCached = 2

// maxCachedFrameBytes bounds the frames a Log keeps in Log.recent.
const maxCachedFrameBytes = 1 << 20

// olderFile is a file before the tail, open for reading.
type olderFile struct {
	first uint64
	file  File
	index frameIndex
}

// Read returns the record at off. The error wraps ErrNotFound outside
// [FirstOffset, NextOffset), is a *HoleError (ErrHole) for an offset whose
// record was lost to damage (see Hole), wraps ErrUnsupportedVersion for a
// frame of another release and ErrClosed after Close.
func (l *Log) Read(off uint64) (Record, error) {
	l.readMu.Lock()
	v := l.viewLocked()
	v.next = min(v.next, l.readLimit.Load())
	var body []byte
	err := v.check(off, l.dir)
	if err == nil {
		var b *batch
		if b, err = l.batchAtLocked(&v, off); err == nil {
			body = slices.Clone(b.body(off))
		}
	}
	l.readMu.Unlock()
	if err != nil {
		return Record{}, err
	}
	rec, err := decodeBody(body)
	if err != nil {
		return Record{}, fmt.Errorf("%w (offset %d in %s)", err, off, l.dir)
	}
	return rec, nil
}

// ReadRange returns up to maxRecords records from offset from, stopping
// before the frames EncodeRecord would make of them exceed maxBytes, but
// returning at least one record when from < NextOffset. A limit <= 0 means
// no limit. From == NextOffset returns no record and no error (nothing new
// yet).
//
// It returns the good records before a lost or unreadable one; the error
// (a *HoleError for a hole, which the caller may skip) comes from the call
// that starts at that offset.
func (l *Log) ReadRange(from uint64, maxRecords int, maxBytes int) ([]Record, error) {
	return l.readRange(from, maxRecords, maxBytes, l.readLimit.Load())
}

// ReadRangeDurable is ReadRange past the read limit (SetReadLimit): every
// durable record. Replication reads with it the entries it has not
// committed yet, to send them to other replicas.
func (l *Log) ReadRangeDurable(from uint64, maxRecords int, maxBytes int) ([]Record, error) {
	return l.readRange(from, maxRecords, maxBytes, math.MaxUint64)
}

func (l *Log) readRange(from uint64, maxRecords int, maxBytes int, limit uint64) ([]Record, error) {
	l.readMu.Lock()
	v := l.viewLocked()
	v.next = min(v.next, limit)
	switch {
	case v.closed:
		l.readMu.Unlock()
		return nil, ErrClosed
	case from == v.next:
		l.readMu.Unlock()
		return nil, nil
	}
	if err := v.check(from, l.dir); err != nil {
		l.readMu.Unlock()
		return nil, err
	}
	end := v.next
	if maxRecords > 0 && uint64(maxRecords) < end-from {
		end = from + uint64(maxRecords)
	}
	// The bodies are copied out of the frames under readMu, which lets the
	// frame buffers be reused; they are decoded once readMu is released.
	var buf []byte // the bodies, back to back
	var endsArray [16]int
	ends := endsArray[:0] // ends[i] is where body i ends in buf
	total := 0
	var readErr error
collect:
	for off := from; off < end; {
		b, err := l.batchAtLocked(&v, off)
		if err != nil {
			readErr = err
			break
		}
		if buf == nil {
			// Sized by the first frame's records; append grows it if need be.
			avg := len(b.frame) / b.count()
			count := int(min(end-from, 1<<16))
			if maxBytes > 0 {
				count = min(count, maxBytes/(avg+frameHeaderLen)+1)
			} else {
				count = min(count, 1024)
			}
			buf = make([]byte, 0, count*avg)
			if count > len(endsArray) {
				ends = make([]int, 0, count)
			}
		}
		for ; off < end && off < b.last(); off++ {
			body := b.body(off)
			n := frameHeaderLen + len(body) // as EncodeRecord frames it
			if len(ends) > 0 && maxBytes > 0 && total+n > maxBytes {
				break collect
			}
			buf = append(buf, body...)
			ends = append(ends, len(buf))
			total += n
		}
	}
	l.readMu.Unlock()
	if len(ends) == 0 {
		return nil, readErr
	}

	// Each body is capped so that appending to a record's slices cannot
	// reach the next record.
	recs := make([]Record, 0, len(ends))
	start := 0
	var sc decodeScratch
	for i, end := range ends {
		rec, err := decodeBodyWith(buf[start:end:end], &sc)
		if err != nil {
			if i == 0 {
				return nil, fmt.Errorf("%w (offset %d in %s)", err, from, l.dir)
			}
			break
		}
		recs = append(recs, rec)
		start = end
	}
	return recs, nil
}

// viewLocked returns a copy of the view; the caller holds readMu, so no
// file the copy names goes away before the caller lets go of readMu.
func (l *Log) viewLocked() view {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.view
}

// check returns why off cannot be read, or nil.
func (v *view) check(off uint64, dir string) error {
	if v.closed {
		return ErrClosed
	}
	if off < v.first || off >= v.next {
		return fmt.Errorf("%w: offset %d outside [%d, %d) in %s", ErrNotFound, off, v.first, v.next, dir)
	}
	return nil
}

// batchAtLocked returns the checked frame that holds off, an offset of v;
// the caller holds readMu, and must be done with the frame before it lets
// go of readMu: the frame's buffer is reused for later reads.
func (l *Log) batchAtLocked(v *view, off uint64) (*batch, error) {
	for _, b := range l.recent {
		if b != nil && b.first <= off && off < b.last() {
			return b, nil
		}
	}
	if h := holeIn(l.holes, off); h != nil {
		return nil, &HoleError{Hole: *h}
	}
	// The last file whose first offset is at or below off.
	i, found := slices.BinarySearch(v.files, off)
	if !found {
		i--
	}
	if i < 0 {
		return nil, fmt.Errorf("%w: offset %d before the first file in %s", ErrNotFound, off, l.dir)
	}
	index, file := &v.tail, v.tailFile
	if i < len(v.files)-1 {
		o, err := l.olderFileLocked(v, i)
		if err != nil {
			return nil, fmt.Errorf("braid/wal: reading offset %d: %w", off, err)
		}
		index, file = &o.index, o.file
	}
	name := func() string { return filepath.Join(l.dir, v.fileName(i)) } // for errors
	if h := index.holeAt(off); h != nil {
		return nil, &HoleError{Hole: *h}
	}
	ref, end, count, ok := index.find(off)
	if !ok {
		if index.stopped != nil {
			return nil, fmt.Errorf("braid/wal: offset %d is missing from %s, whose frames end before offset %d: %w",
				off, name(), index.next, index.stopped)
		}
		return nil, fmt.Errorf("%w: offset %d is missing from %s, whose frames end before offset %d",
			ErrCorrupt, off, name(), index.next)
	}
	// Read into the buffer of the frame cached longest, which goes.
	b := l.recent[1]
	l.recent[1] = nil
	if need := end - ref.pos; b == nil || int64(cap(b.entry)) < need {
		// Room to spare (up to the largest frame an append makes, where
		// frames stay small), so that the buffer serves again.
		b = &batch{entry: make([]byte, max(need, min(2*need, maxBatchRecordBytes+entryHeaderLen)))}
	}
	entry := b.entry[:end-ref.pos]
	// A frame that does not check out is lost, as the index says where it
	// starts and ends (whole frames bound it, or the file's name and the
	// next one's): a hole of its records, found on read.
	lost := func(reason string) (*batch, error) {
		h := Hole{From: ref.first, To: ref.first + count, File: name(), Pos: ref.pos, Bytes: end - ref.pos, Reason: reason}
		l.addHolesLocked([]Hole{h})
		return nil, &HoleError{Hole: h}
	}
	if _, err := file.ReadAt(entry, ref.pos); err != nil {
		if errors.Is(err, io.EOF) {
			return lost("the file ends inside the frame")
		}
		return nil, fmt.Errorf("braid/wal: reading offset %d from %s: %w", off, name(), err)
	}
	size, n := binary.Uvarint(entry)
	if n <= 0 || size != uint64(len(entry)-n) {
		return lost("bad size prefix")
	}
	if err := b.parse(entry[n:]); err != nil {
		if errors.Is(err, ErrUnsupportedVersion) {
			return nil, fmt.Errorf("%w (offset %d in %s)", err, off, name())
		}
		return lost(err.Error())
	}
	if b.first != ref.first || uint64(b.count()) != count {
		return lost(fmt.Sprintf("the frame holds [%d, %d), want [%d, %d)", b.first, b.last(), ref.first, ref.first+count))
	}
	if len(entry) <= maxCachedFrameBytes {
		l.recent[1], l.recent[0] = l.recent[0], b
	}
	return b, nil
}

// olderFileLocked returns files[i] of v, a file before the tail, opening
// and indexing it if it is not cached. The caller holds readMu.
func (l *Log) olderFileLocked(v *view, i int) (*olderFile, error) {
	first, limit := v.files[i], v.files[i+1]
	for i, o := range l.older {
		if o.first == first {
			copy(l.older[1:i+1], l.older[:i])
			l.older[0] = o
			return o, nil
		}
	}
	f, err := openLogFile(l.opts, filepath.Join(l.dir, v.fileName(i)), os.O_RDONLY, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	info, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	o := &olderFile{first: first, file: f, index: scanFrameIndexFrom(f, info.Size(), v.fileStart(i), first, limit).withFile(f.Name())}
	l.addHolesLocked(o.index.holes)
	if len(l.older) == olderFilesCached {
		l.older[len(l.older)-1].file.Close()
		l.older = l.older[:len(l.older)-1]
	}
	l.older = slices.Insert(l.older, 0, o)
	return o, nil
}

// dropReadCachesLocked forgets every cached frame and closes the cached
// files, after files were replaced or removed; the caller holds readMu.
func (l *Log) dropReadCachesLocked() {
	for _, o := range l.older {
		o.file.Close()
	}
	l.older = nil
	l.recent = [2]*batch{}
}
