package wal

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"path/filepath"
)

// RepairReport says what Open cut from the tail of the log. The zero value
// means nothing was cut.
type RepairReport struct {
	// DroppedBytes is how many bytes were cut from the end of File.
	DroppedBytes int64
	// DroppedRecords is a best-effort count of the records in the dropped
	// bytes: the record count in the header of every dropped frame, a torn
	// one included, or 1 for a frame whose header is cut or not plausible.
	// Zero fill counts as no record. 0 if unknown.
	DroppedRecords int
	// ZeroBytes is how many bytes were cut, instead, when they were all
	// zero: the space a log fills ahead of its end (Options.Preallocate)
	// that a crash left behind, or zero fill left by the file system. No
	// record was in them; DroppedBytes and DroppedRecords are then 0.
	ZeroBytes int64
	// File is the path of the file that was cut, or that holds Holes.
	File string
	// Holes is how many runs of lost records Open found in the file, with
	// whole frames after each (see Hole; Log.Holes lists them). They are
	// not cut.
	Holes int
}

// frameState classifies a stored frame during repair.
type frameState uint8

const (
	frameValid       frameState = iota
	frameCorrupt                // not a frame, or not the next one: cut here
	frameUnsupported            // a complete frame of another version: refuse to cut
)

// classifyBatch checks a frame as repair must: its CRC, then its version,
// header, records and offset (want). A frame with an unknown version but a
// good CRC is data written by another release (every version keeps the
// version byte and the CRC over the rest in place), which repair must not
// destroy; with a bad CRC it is garbage.
func classifyBatch(frame []byte, want uint64) (*batch, frameState) {
	if len(frame) < frameHeaderLen {
		return nil, frameCorrupt
	}
	if crc32.Checksum(frame[frameHeaderLen:], castagnoli) != binary.LittleEndian.Uint32(frame[1:frameHeaderLen]) {
		return nil, frameCorrupt
	}
	if !isBatchVersion(frame[0]) {
		return nil, frameUnsupported
	}
	b, err := parseBatch(frame)
	if err != nil || b.first != want || b.decodeBodies() != nil {
		return nil, frameCorrupt
	}
	return b, frameValid
}

// validPrefix returns the index of the longest prefix of data, a file whose
// first offset is first, made of whole entries whose frames are valid and
// in sequence, or follow a hole. At an entry that is not, it looks for the
// next whole frame after it (see resync): the offsets between are a hole,
// and the prefix goes on from that frame; if there is none, the prefix ends
// there. A zero size is such an entry: no frame is empty, and a crash can
// leave a zero-filled tail. unsupported reports that the prefix ends at a
// frame of another version.
func validPrefix(data []byte, first uint64) (x frameIndex, unsupported bool) {
	x.next = first
	for int(x.end) < len(data) {
		n := int(x.end)
		size, sizeLen := binary.Uvarint(data[n:])
		reason := ""
		switch {
		case sizeLen <= 0:
			reason = "bad size prefix"
		case size == 0:
			reason = "zero size"
		case size > uint64(len(data)-n-sizeLen):
			reason = fmt.Sprintf("frame of %d bytes runs past the end of the file", size)
		default:
			end := n + sizeLen + int(size)
			b, state := classifyBatch(data[n+sizeLen:end], x.next)
			switch state {
			case frameUnsupported:
				return x, true
			case frameValid:
				x.frames = append(x.frames, frameRef{first: x.next, pos: x.end})
				x.next = b.last()
				x.end = int64(end)
				continue
			}
			reason = describeBadFrame(data[n+sizeLen:end], x.next)
		}
		at, next, ok := resync(data[n:], x.next, math.MaxUint64)
		if !ok {
			return x, false
		}
		x.addHole(next, x.end+int64(at), fmt.Sprintf("entry at byte %d: %s", n, reason))
	}
	return x, false
}

// describeBadFrame says why a whole entry's frame failed classifyBatch.
func describeBadFrame(frame []byte, want uint64) string {
	b, err := parseBatch(frame)
	switch {
	case err != nil:
		return err.Error()
	case b.first != want:
		return fmt.Sprintf("first offset %d, want %d", b.first, want)
	}
	if err := b.decodeBodies(); err != nil {
		return err.Error()
	}
	return "not a frame"
}

// countDropped is the best-effort DroppedRecords of a dropped tail.
func countDropped(tail []byte) int {
	count := 0
	for len(tail) > 0 {
		size, sizeLen := binary.Uvarint(tail)
		if sizeLen <= 0 {
			return count + 1 // a torn or garbage size prefix
		}
		if size == 0 {
			tail = tail[sizeLen:] // zero fill
			continue
		}
		present := min(size, uint64(len(tail)-sizeLen))
		count += recordsClaimed(tail[sizeLen:sizeLen+int(present)], size)
		if present < size {
			return count
		}
		tail = tail[sizeLen+int(size):]
	}
	return count
}

// recordsClaimed is the record count in the header of a frame of size
// bytes, of which frame is what is there; 1 if the header is cut, of
// another version or claims more records than fit.
func recordsClaimed(frame []byte, size uint64) int {
	if len(frame) < batchHeaderLen || !isBatchVersion(frame[0]) || size < uint64(frameHeaderLenOf(frame[0])) {
		return 1
	}
	count := uint64(binary.LittleEndian.Uint32(frame[13:batchHeaderLen]))
	if count == 0 || count > (size-uint64(frameHeaderLenOf(frame[0])))/minStoredRecordLen {
		return 1
	}
	return int(count)
}

// repairTail cuts path, the last file of a log, which starts at offset
// first, after its last valid frame, makes the cut durable, and returns the
// index of what is left. Only the last file can be torn by a crash (see
// the package doc).
func repairTail(fsys FS, path string, first uint64) (RepairReport, frameIndex, error) {
	data, err := readWholeFile(fsys, path)
	if err != nil {
		return RepairReport{}, frameIndex{}, err
	}
	index, unsupported := validPrefix(data, first)
	index = index.withFile(path)
	valid := int(index.end)
	if valid == len(data) {
		if len(index.holes) > 0 {
			return RepairReport{File: path, Holes: len(index.holes)}, index, nil
		}
		return RepairReport{}, index, nil
	}
	if unsupported {
		head := data[valid:min(len(data), valid+12)]
		_, sizeLen := binary.Uvarint(data[valid:])
		return RepairReport{}, frameIndex{}, fmt.Errorf("%s at byte %d: %w (entry starts %s)",
			path, valid, checkBatchVersion(data[valid+sizeLen]), hex.EncodeToString(head))
	}
	if err := cutFile(fsys, path, int64(valid)); err != nil {
		return RepairReport{}, frameIndex{}, err
	}
	if err := syncDir(fsys, filepath.Dir(path)); err != nil {
		return RepairReport{}, frameIndex{}, err
	}
	report := RepairReport{File: path, Holes: len(index.holes)}
	if allZero(data[valid:]) {
		report.ZeroBytes = int64(len(data) - valid)
	} else {
		report.DroppedBytes = int64(len(data) - valid)
		report.DroppedRecords = countDropped(data[valid:])
	}
	return report, index, nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// refuseOldFormat fails with ErrUnsupportedVersion if the first entry of
// path is a whole frame of another version, such as a record of the
// one-record-per-entry format of earlier releases. Repair checks the last
// file; this checks the first, so that such a log is refused at Open
// rather than misread.
func refuseOldFormat(fsys FS, path string) error {
	f, err := fsys.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	var head [binary.MaxVarintLen64]byte
	n, err := f.ReadAt(head[:], 0)
	if err != nil && err != io.EOF {
		return err
	}
	size, sizeLen := binary.Uvarint(head[:n])
	if sizeLen <= 0 || size < frameHeaderLen || size > 64<<20 {
		return nil // not a whole entry of any version: reads report it
	}
	frame := make([]byte, size)
	if _, err := f.ReadAt(frame, int64(sizeLen)); err != nil {
		return nil
	}
	if _, state := classifyBatch(frame, 0); state == frameUnsupported {
		return fmt.Errorf("%s: %w", path, checkBatchVersion(frame[0]))
	}
	return nil
}

func cutFile(fsys FS, path string, size int64) error {
	f, err := fsys.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
