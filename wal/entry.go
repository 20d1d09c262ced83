package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
)

// A replicated log is a raft log: every append is one raft entry, stored
// as one frame of version 3, whose header carries the entry's term and
// index beside the offsets of its records (see the package doc). The log
// does not check that indexes follow one another: the raft storage over it
// (package replica) does, and cuts conflicting suffixes with TruncateTail.

// EntryID is the raft position of an entry: its term and index, both
// above 0.
type EntryID struct {
	Term, Index uint64
}

// EntryRef is an entry as a log holds it: its raft position and the
// offsets [First, First+Count) of its records.
type EntryRef struct {
	EntryID
	First uint64
	Count uint64
}

// Next returns the offset after the entry's records.
func (e EntryRef) Next() uint64 { return e.First + e.Count }

// AppendEntry writes recs as the raft entry id: one frame of version 3, of
// any size (raft bounds what it proposes), fsynced as Append is. recs must
// hold at least one record.
func (l *Log) AppendEntry(id EntryID, recs ...Record) (first uint64, err error) {
	if err := checkEntry(id, len(recs)); err != nil {
		return 0, err
	}
	return appendBodies(l, recordBodies(recs), frameMeta{version: entryVersion, id: id}, true)
}

// WriteEntry is AppendEntry as Write is Append: durable and visible with
// the next Commit (or a commit round).
func (l *Log) WriteEntry(id EntryID, recs ...Record) (first uint64, err error) {
	if err := checkEntry(id, len(recs)); err != nil {
		return 0, err
	}
	return appendBodies(l, recordBodies(recs), frameMeta{version: entryVersion, id: id}, false)
}

// AppendEntryData is AppendEntry for the records in data, made by
// EncodeEntryData (the form an entry travels in). It checks every record
// first and writes nothing if one fails.
func (l *Log) AppendEntryData(id EntryID, data []byte) (first uint64, err error) {
	bodies, err := entryBodies(id, data)
	if err != nil {
		return 0, err
	}
	return appendBodies(l, bodies, frameMeta{version: entryVersion, id: id}, true)
}

// WriteEntryData is AppendEntryData as Write is Append.
func (l *Log) WriteEntryData(id EntryID, data []byte) (first uint64, err error) {
	bodies, err := entryBodies(id, data)
	if err != nil {
		return 0, err
	}
	return appendBodies(l, bodies, frameMeta{version: entryVersion, id: id}, false)
}

func checkEntry(id EntryID, records int) error {
	switch {
	case id.Term == 0 || id.Index == 0:
		return fmt.Errorf("braid/wal: raft entry %d at term %d: both must be above 0", id.Index, id.Term)
	case records == 0:
		return fmt.Errorf("braid/wal: raft entry %d holds no record", id.Index)
	}
	return nil
}

// entryBodies checks data (EncodeEntryData) and returns its record bodies.
func entryBodies(id EntryID, data []byte) (rawBodies, error) {
	bodies, err := splitEntryData(data)
	if err == nil {
		err = checkEntry(id, len(bodies))
	}
	if err != nil {
		return nil, fmt.Errorf("braid/wal: raft entry %d: %w", id.Index, err)
	}
	for i, body := range bodies {
		if _, err := decodeBody(body); err != nil {
			return nil, fmt.Errorf("braid/wal: raft entry %d, record %d: %w", id.Index, i, err)
		}
	}
	return bodies, nil
}

// rawBodies are record bodies, as a frame stores them.
type rawBodies [][]byte

func (r rawBodies) len() int                            { return len(r) }
func (r rawBodies) bodyLen(i int) int                   { return len(r[i]) }
func (r rawBodies) appendBody(dst []byte, i int) []byte { return append(dst, r[i]...) }

// EncodeEntryData appends recs to dst in the form an entry's records
// travel in (a raft entry's data): each record's body after its size, as
// a frame stores them, so that a follower writes them as they came.
func EncodeEntryData(dst []byte, recs []Record) []byte {
	for _, r := range recs {
		dst = binary.AppendUvarint(dst, uint64(bodyLen(r)))
		dst = appendBody(dst, r)
	}
	return dst
}

// DecodeEntryData decodes data made by EncodeEntryData. The records alias
// data. Errors wrap ErrCorrupt.
func DecodeEntryData(data []byte) ([]Record, error) {
	bodies, err := splitEntryData(data)
	if err != nil {
		return nil, err
	}
	recs := make([]Record, len(bodies))
	for i, body := range bodies {
		if recs[i], err = decodeBody(body); err != nil {
			return nil, err
		}
	}
	return recs, nil
}

// splitEntryData cuts data into its record bodies, checking the sizes.
func splitEntryData(data []byte) (rawBodies, error) {
	var bodies rawBodies
	for pos := 0; pos < len(data); {
		size, n := binary.Uvarint(data[pos:])
		if n <= 0 || size > uint64(len(data)-pos-n) {
			return nil, fmt.Errorf("%w: bad size of record %d of an entry", ErrCorrupt, len(bodies))
		}
		pos += n
		bodies = append(bodies, data[pos:pos+int(size):pos+int(size)])
		pos += int(size)
	}
	return bodies, nil
}

// Entries returns the raft entries whose records start at or after offset
// from (FirstOffset at the least), in order, reading the frame headers of
// the files that hold them. Frames of version 2 (a log written before it
// was replicated) and holes are passed over. It reads no record.
func (l *Log) Entries(from uint64) ([]EntryRef, error) {
	l.readMu.Lock()
	defer l.readMu.Unlock()
	v := l.viewLocked()
	if v.closed {
		return nil, ErrClosed
	}
	from = max(from, v.first)
	i, found := slices.BinarySearch(v.files, from)
	if !found {
		i--
	}
	i = max(i, 0)
	var out []EntryRef
	header := make([]byte, entryHeaderLen)
	for ; i < len(v.files); i++ {
		index, file := &v.tail, v.tailFile
		if i < len(v.files)-1 {
			o, err := l.olderFileLocked(&v, i)
			if err != nil {
				return nil, fmt.Errorf("braid/wal: reading the entries of %s: %w", l.dir, err)
			}
			index, file = &o.index, o.file
		}
		for k, ref := range index.frames {
			if ref.first < from || ref.first >= v.next {
				continue
			}
			end := index.end
			if k+1 < len(index.frames) {
				end = index.frames[k+1].pos
			}
			h := header[:min(int64(len(header)), end-ref.pos)]
			if _, err := file.ReadAt(h, ref.pos); err != nil && !errors.Is(err, io.EOF) {
				return nil, fmt.Errorf("braid/wal: reading the entry at offset %d of %s: %w", ref.first, l.dir, err)
			}
			e, ok := parseEntryHeader(h)
			if !ok {
				continue
			}
			if e.First != ref.first {
				return nil, fmt.Errorf("%w: the frame at offset %d of %s says it starts at %d", ErrCorrupt, ref.first, l.dir, e.First)
			}
			out = append(out, e)
		}
	}
	return out, nil
}

// parseEntryHeader reads the raft entry of a stored entry's header (size
// prefix and frame header); false if it is no version 3 frame.
func parseEntryHeader(h []byte) (EntryRef, bool) {
	size, n := binary.Uvarint(h)
	if n <= 0 || size < entryFrameHeaderLen || len(h) < n+entryFrameHeaderLen || h[n] != entryVersion {
		return EntryRef{}, false
	}
	f := h[n:]
	return EntryRef{
		First: binary.LittleEndian.Uint64(f[5:13]),
		Count: uint64(binary.LittleEndian.Uint32(f[13:batchHeaderLen])),
		EntryID: EntryID{
			Term:  binary.LittleEndian.Uint64(f[batchHeaderLen:]),
			Index: binary.LittleEndian.Uint64(f[batchHeaderLen+8:]),
		},
	}, true
}
