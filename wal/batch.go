package wal

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"slices"
)

// batchVersion is the version byte of the frames a log stores: one frame
// holds the records of one Append, or of a part of it (see
// maxBatchRecordBytes). Version 1 is the record frame of EncodeRecord, which
// earlier releases stored one per entry.
const batchVersion = 2

// entryVersion is the version byte of a frame that is one raft entry of a
// replicated log (AppendEntry): a batch frame whose header goes on with the
// entry's term and index.
const entryVersion = 3

// batchHeaderLen is the version, the CRC32C, the first offset and the record
// count: the header of a version 2 frame, and the start of a version 3
// one.
const batchHeaderLen = 1 + 4 + 8 + 4

// entryFrameHeaderLen is the header of a version 3 frame: a version 2 header,
// then the raft term and index (8 bytes each, little-endian).
const entryFrameHeaderLen = batchHeaderLen + 8 + 8

// maxFrameHeaderLen is the longest frame header of any version read.
const maxFrameHeaderLen = entryFrameHeaderLen

// frameHeaderLenOf returns the header length of a frame of version v, one
// checkBatchVersion accepts.
func frameHeaderLenOf(v byte) int {
	if v == entryVersion {
		return entryFrameHeaderLen
	}
	return batchHeaderLen
}

// isBatchVersion reports whether v is the version of a frame a log stores.
func isBatchVersion(v byte) bool { return v == batchVersion || v == entryVersion }

// frameMeta is what a frame's header says beside its offsets: its version,
// and for version 3 the raft entry it is.
type frameMeta struct {
	version byte
	id      EntryID
}

// plainFrame is the meta of a version 2 frame.
var plainFrame = frameMeta{version: batchVersion}

// maxBatchRecordBytes bounds the records of one stored frame: an Append is
// cut into frames of at most this many bytes of records (a larger record gets
// a frame of its own). A read checks the CRC of a whole frame, so this bounds
// the work of reading one record.
const maxBatchRecordBytes = 64 << 10

// minStoredRecordLen is the fewest bytes a record takes in a frame: a size
// byte and a body of at least a timestamp, a key length and a header count.
// It bounds the record count a frame of a given size can claim.
const minStoredRecordLen = 1 + 3

// maxEntrySize is a bound on a frame's size far above any real one, so that
// a garbage size prefix cannot overflow the arithmetic on it.
const maxEntrySize = 1 << 48

// batch is a frame whose version, CRC and record bounds checked out. Its
// record bodies are not decoded yet.
type batch struct {
	first uint64 // offset of the first record
	meta  frameMeta
	frame []byte
	// bounds[2i] and bounds[2i+1] delimit the body of record i in frame.
	bounds []int
	// entry is the buffer frame was read into, kept for reuse.
	entry []byte
}

func (b *batch) count() int { return len(b.bounds) / 2 }

// last returns the offset after the batch's last record.
func (b *batch) last() uint64 { return b.first + uint64(b.count()) }

// body returns the body of the record at offset off, capped so that an
// append to it cannot reach the next one.
func (b *batch) body(off uint64) []byte {
	i := int(off - b.first)
	start, end := b.bounds[2*i], b.bounds[2*i+1]
	return b.frame[start:end:end]
}

// parseBatch checks a stored frame: version, CRC, header and the sizes of
// its records. Errors wrap ErrCorrupt or ErrUnsupportedVersion; it never
// panics. The batch aliases frame.
func parseBatch(frame []byte) (*batch, error) {
	b := new(batch)
	if err := b.parse(frame); err != nil {
		return nil, err
	}
	return b, nil
}

// parse is parseBatch into b, reusing its bounds.
func (b *batch) parse(frame []byte) error {
	b.first, b.frame, b.bounds, b.meta = 0, nil, b.bounds[:0], frameMeta{}
	if len(frame) == 0 {
		return fmt.Errorf("%w: empty frame", ErrCorrupt)
	}
	if err := checkBatchVersion(frame[0]); err != nil {
		return err
	}
	headerLen := frameHeaderLenOf(frame[0])
	if len(frame) < headerLen {
		return fmt.Errorf("%w: frame of %d bytes is shorter than its header", ErrCorrupt, len(frame))
	}
	want := binary.LittleEndian.Uint32(frame[1:frameHeaderLen])
	if got := crc32.Checksum(frame[frameHeaderLen:], castagnoli); got != want {
		return fmt.Errorf("%w: crc32c %08x, want %08x", ErrCorrupt, got, want)
	}
	first := binary.LittleEndian.Uint64(frame[5:13])
	count := binary.LittleEndian.Uint32(frame[13:batchHeaderLen])
	if count == 0 || uint64(count) > uint64(len(frame)-headerLen)/minStoredRecordLen {
		return fmt.Errorf("%w: record count %d in a frame of %d bytes", ErrCorrupt, count, len(frame))
	}
	meta := frameMeta{version: frame[0]}
	if meta.version == entryVersion {
		meta.id = EntryID{Term: binary.LittleEndian.Uint64(frame[batchHeaderLen:]), Index: binary.LittleEndian.Uint64(frame[batchHeaderLen+8:])}
		if meta.id.Term == 0 || meta.id.Index == 0 {
			return fmt.Errorf("%w: raft entry %d at term %d", ErrCorrupt, meta.id.Index, meta.id.Term)
		}
	}
	b.bounds = slices.Grow(b.bounds, 2*int(count))
	pos := headerLen
	for i := range count {
		size, n := binary.Uvarint(frame[pos:])
		if n <= 0 || size > uint64(len(frame)-pos-n) {
			return fmt.Errorf("%w: bad size of record %d of %d", ErrCorrupt, i, count)
		}
		pos += n
		b.bounds = append(b.bounds, pos, pos+int(size))
		pos += int(size)
	}
	if pos != len(frame) {
		return fmt.Errorf("%w: %d bytes after the last record", ErrCorrupt, len(frame)-pos)
	}
	b.first, b.frame, b.meta = first, frame, meta
	return nil
}

// checkBatchVersion refuses the version bytes this release cannot read.
func checkBatchVersion(v byte) error {
	switch v {
	case batchVersion, entryVersion:
		return nil
	case frameVersion:
		return fmt.Errorf("%w: version 1, a log in the one-record-per-entry format of earlier releases", ErrUnsupportedVersion)
	}
	return fmt.Errorf("%w: version %d", ErrUnsupportedVersion, v)
}

// decodeBodies decodes every record of b; repair uses it to tell a whole
// frame from one that only has a good CRC.
func (b *batch) decodeBodies() error {
	for off := b.first; off < b.last(); off++ {
		if _, err := decodeBody(b.body(off)); err != nil {
			return err
		}
	}
	return nil
}

// beginBatch appends the entry size, the header of a frame of meta (CRC
// left zero) and returns the extended slice and where the frame starts.
// recordBytes is the size of the records that follow.
func beginBatch(dst []byte, meta frameMeta, first uint64, count, recordBytes int) ([]byte, int) {
	frameLen := frameHeaderLenOf(meta.version) + recordBytes
	dst = binary.AppendUvarint(dst, uint64(frameLen))
	start := len(dst)
	dst = append(dst, meta.version, 0, 0, 0, 0)
	dst = binary.LittleEndian.AppendUint64(dst, first)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(count))
	if meta.version == entryVersion {
		dst = binary.LittleEndian.AppendUint64(dst, meta.id.Term)
		dst = binary.LittleEndian.AppendUint64(dst, meta.id.Index)
	}
	return dst, start
}

// sealBatch sets the CRC of the frame that starts at start and runs to the
// end of buf.
func sealBatch(buf []byte, start int) {
	frame := buf[start:]
	binary.LittleEndian.PutUint32(frame[1:frameHeaderLen], crc32.Checksum(frame[frameHeaderLen:], castagnoli))
}

// storedLen is how many bytes a record body of size n takes in a frame.
func storedLen(n int) int { return uvarintLen(uint64(n)) + n }

// appendBatchEntry appends one entry (size prefix and frame of meta)
// holding bodies at offsets from first. It does not cut: the caller keeps
// the frame within bounds.
func appendBatchEntry(dst []byte, meta frameMeta, first uint64, bodies [][]byte) []byte {
	recordBytes := 0
	for _, body := range bodies {
		recordBytes += storedLen(len(body))
	}
	dst, start := beginBatch(dst, meta, first, len(bodies), recordBytes)
	for _, body := range bodies {
		dst = binary.AppendUvarint(dst, uint64(len(body)))
		dst = append(dst, body...)
	}
	sealBatch(dst, start)
	return dst
}
