package wal

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"sort"
)

// frameRef locates one stored frame in its file.
type frameRef struct {
	first uint64 // offset of the frame's first record
	pos   int64  // where the frame's entry (its size prefix) starts
}

// frameIndex locates the frames of one file, and the holes between them.
//
// Invariant: frames and holes are in file order, and together they tile
// the file's offsets: each frame's records end where the next frame or hole
// begins (frames[i+1].first, or holes[j].From), each hole ends where the
// next frame begins (or at next), and next is the offset after the last
// record or hole (or the file's first offset).
type frameIndex struct {
	frames []frameRef
	holes  []Hole // sorted by From; see Hole
	end    int64  // where the entry after the last indexed frame or hole starts
	next   uint64 // offset after the last indexed record or hole
	// stopped says why indexing stopped before the end of the file; nil if
	// it did not.
	stopped error
}

// find returns the frame holding off, where its entry ends and its record
// count, or false if off is not in a frame: outside [first, next) of the
// index, or in a hole (see holeAt).
func (x *frameIndex) find(off uint64) (ref frameRef, end int64, count uint64, ok bool) {
	if len(x.frames) == 0 || off < x.frames[0].first || off >= x.next {
		return frameRef{}, 0, 0, false
	}
	// The last frame whose first offset is at or below off.
	lo, hi := 0, len(x.frames)
	for hi-lo > 1 {
		mid := int(uint(lo+hi) >> 1)
		if x.frames[mid].first <= off {
			lo = mid
		} else {
			hi = mid
		}
	}
	ref, end, next := x.frames[lo], x.end, x.next
	if lo+1 < len(x.frames) {
		end, next = x.frames[lo+1].pos, x.frames[lo+1].first
	}
	// A hole right after the frame ends it (a hole of damaged bytes that
	// lost no record, too).
	if j := sort.Search(len(x.holes), func(j int) bool { return x.holes[j].From > ref.first }); j < len(x.holes) && x.holes[j].From <= next {
		end, next = x.holes[j].Pos, x.holes[j].From
	}
	if off >= next {
		return frameRef{}, 0, 0, false
	}
	return ref, end, next - ref.first, true
}

// holeAt returns the hole of the index that holds off, or nil.
func (x *frameIndex) holeAt(off uint64) *Hole {
	return holeIn(x.holes, off)
}

// withFile names the file of the index's holes.
func (x frameIndex) withFile(path string) frameIndex {
	for i := range x.holes {
		x.holes[i].File = path
	}
	return x
}

// addHole records that [x.next, to) is lost, damaged from byte x.end to at,
// and moves the index past it.
func (x *frameIndex) addHole(to uint64, at int64, reason string) {
	x.holes = append(x.holes, Hole{From: x.next, To: to, Pos: x.end, Bytes: at - x.end, Reason: reason})
	x.next, x.end = to, at
}

// scanWindow is how much scanFrameIndex reads at a time among small frames.
const scanWindow = 64 << 10

// entryHeaderLen is enough bytes for an entry's size prefix and frame
// header.
const entryHeaderLen = binary.MaxVarintLen64 + maxFrameHeaderLen

// scanFrameIndex indexes the frames of a file of size bytes that starts at
// offset first by reading their headers only (no CRC check: reads check
// each frame). Among small frames it reads the file a window at a time;
// past a large frame it reads just the next header.
//
// At an entry that is torn, out of sequence or runs past limit (the next
// file's first offset), it looks for the next whole frame after it (see
// resync) and records the offsets between as a hole. If there is none, the
// rest of the file is a hole up to limit; for the tail (limit is
// math.MaxUint64) it stops there instead, and says why in stopped, as it
// does at a frame of an unknown version. A file whose frames end before
// limit has a hole at its end.
func scanFrameIndex(r io.ReaderAt, size int64, first, limit uint64) frameIndex {
	return scanFrameIndexFrom(r, size, 0, first, limit)
}

// scanFrameIndexFrom is scanFrameIndex of a file whose first frame starts at
// byte start (a file with a trimmed head, see TrimHead): the bytes before
// it are not the log's.
func scanFrameIndexFrom(r io.ReaderAt, size, start int64, first, limit uint64) frameIndex {
	x := frameIndex{next: first, end: start}
	var window []byte
	var buf []byte // the file's bytes [bufPos, bufPos+len(buf))
	var bufPos int64
	readLen := scanWindow
	for x.end < size {
		// damaged resyncs after the entry at x.end, or stops.
		damaged := func(format string, args ...any) bool {
			reason := fmt.Sprintf("entry at byte %d: %s", x.end, fmt.Sprintf(format, args...))
			rest := make([]byte, size-x.end)
			if n, err := r.ReadAt(rest, x.end); n < len(rest) {
				x.stopped = fmt.Errorf("%w: %s; reading on: %v", ErrCorrupt, reason, err)
				return false
			}
			if at, first, ok := resync(rest, x.next, limit); ok {
				x.addHole(first, x.end+int64(at), reason)
				buf = nil
				return true
			}
			if limit == math.MaxUint64 {
				x.stopped = fmt.Errorf("%w: %s", ErrCorrupt, reason)
				return false
			}
			x.addHole(limit, size, reason+"; no whole frame after it")
			return false
		}
		if bufEnd := bufPos + int64(len(buf)); buf == nil || x.end < bufPos || x.end+entryHeaderLen > bufEnd && bufEnd < size {
			n := int(min(int64(readLen), size-x.end))
			if cap(window) < n {
				window = make([]byte, n)
			}
			buf, bufPos = window[:n], x.end
			if got, err := r.ReadAt(buf, bufPos); got < n {
				x.stopped = fmt.Errorf("%w: entry at byte %d: reading: %v", ErrCorrupt, x.end, err)
				return x
			}
		}
		b := buf[x.end-bufPos:]
		entrySize, n := binary.Uvarint(b)
		var ok bool
		switch {
		case n <= 0:
			ok = damaged("bad size prefix")
		case entrySize < batchHeaderLen || entrySize > maxEntrySize:
			ok = damaged("size %d", entrySize)
		case entrySize > uint64(size-x.end)-uint64(n):
			ok = damaged("torn frame")
		case len(b) < n+batchHeaderLen:
			ok = damaged("torn header")
		case isBatchVersion(b[n]) && (entrySize < uint64(frameHeaderLenOf(b[n])) || len(b) < n+frameHeaderLenOf(b[n])):
			ok = damaged("torn header")
		default:
			header := b[n : n+batchHeaderLen]
			headerLen := uint64(frameHeaderLenOf(header[0]))
			if err := checkBatchVersion(header[0]); err != nil {
				// A whole frame of another release (its CRC checks out) is
				// not this release's to read; anything else is damage.
				frame := make([]byte, entrySize)
				if _, rerr := r.ReadAt(frame, x.end+int64(n)); rerr == nil && crcMatches(frame) {
					x.stopped = fmt.Errorf("entry at byte %d: %w", x.end, err)
					return x
				}
				if !damaged("%v, and a bad CRC", err) {
					return x
				}
				continue
			}
			frameFirst := binary.LittleEndian.Uint64(header[5:13])
			count := uint64(binary.LittleEndian.Uint32(header[13:]))
			switch {
			case frameFirst != x.next:
				ok = damaged("first offset %d, want %d", frameFirst, x.next)
			case count == 0 || count > (entrySize-headerLen)/minStoredRecordLen:
				ok = damaged("record count %d in %d bytes", count, entrySize)
			case count > limit-x.next:
				ok = damaged("records [%d, %d) run past %d, where the next file starts", x.next, x.next+count, limit)
			default:
				x.frames = append(x.frames, frameRef{first: frameFirst, pos: x.end})
				x.end += int64(n) + int64(entrySize)
				x.next += count
				readLen = scanWindow
				if entrySize >= scanWindow/2 {
					readLen = entryHeaderLen
				}
				continue
			}
		}
		if !ok {
			return x
		}
	}
	if x.next < limit && limit != math.MaxUint64 {
		x.addHole(limit, size, fmt.Sprintf("the file ends at offset %d; the next file starts at %d", x.next, limit))
	}
	return x
}

// crcMatches reports whether frame's CRC, which every version keeps in
// bytes [1, 5), checks out.
func crcMatches(frame []byte) bool {
	return len(frame) >= frameHeaderLen && crc32.Checksum(frame[frameHeaderLen:], castagnoli) == binary.LittleEndian.Uint32(frame[1:frameHeaderLen])
}

// resync returns where in data, the bytes of a file from a damaged entry on,
// the next whole frame starts that can follow the records before the
// damage (which end at offset next): a frame of this version whose CRC,
// records and sizes check out, with a first offset at or after next and
// records below limit. Unless it starts right at the damage, a frame whose
// first offset is further from next than the damaged bytes could have held
// records (minStoredRecordLen each) is passed over, so that a frame stored
// inside a record's payload is not taken for one of the log's.
func resync(data []byte, next, limit uint64) (at int, first uint64, ok bool) {
	for p := 0; p+1+batchHeaderLen <= len(data); p++ {
		size, n := binary.Uvarint(data[p:])
		if n <= 0 || size < batchHeaderLen || size > uint64(len(data)-p-n) {
			continue
		}
		frame := data[p+n : p+n+int(size)]
		if !isBatchVersion(frame[0]) || size < uint64(frameHeaderLenOf(frame[0])) {
			continue
		}
		first := binary.LittleEndian.Uint64(frame[5:13])
		count := uint64(binary.LittleEndian.Uint32(frame[13:batchHeaderLen]))
		switch {
		case first < next || first >= limit || count > limit-first:
			continue
		case p > 0 && first-next > uint64(p)/minStoredRecordLen:
			continue
		}
		if _, state := classifyBatch(frame, first); state == frameValid {
			return p, first, true
		}
	}
	return 0, 0, false
}
