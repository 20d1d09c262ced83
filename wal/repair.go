package wal

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
)

// RepairReport says what Open cut from the tail of the log. The zero value
// means nothing was cut.
type RepairReport struct {
	// DroppedBytes is how many bytes were cut from the end of File.
	DroppedBytes int64
	// DroppedRecords is a best-effort count of the entries in the dropped
	// bytes: every size-prefixed entry with a non-zero size, a torn one
	// included. Zero fill counts as no record. 0 if unknown.
	DroppedRecords int
	// File is the path of the file that was cut.
	File string
}

// frameState classifies a tidwall entry's data during repair.
type frameState uint8

const (
	frameValid   frameState = iota
	frameCorrupt            // not a frame: cut here
	frameFuture             // a complete frame of a newer version: refuse to cut
)

// classifyFrame checks a frame as repair must. A frame with an unknown
// version but a good CRC is data written by a newer release (every version
// keeps the version byte and the CRC over the rest in place), which repair
// must not destroy; with a bad CRC it is garbage.
func classifyFrame(frame []byte) frameState {
	if len(frame) < frameHeaderLen {
		return frameCorrupt
	}
	if crc32.Checksum(frame[frameHeaderLen:], castagnoli) != binary.LittleEndian.Uint32(frame[1:frameHeaderLen]) {
		return frameCorrupt
	}
	if frame[0] != frameVersion {
		return frameFuture
	}
	if _, err := decodeBody(frame[frameHeaderLen:]); err != nil {
		return frameCorrupt
	}
	return frameValid
}

// validPrefix returns the length of the longest prefix of data made of
// whole tidwall entries (uvarint size | frame) whose frames are valid. A
// zero size ends the prefix: tidwall would read a zero-filled tail as a run
// of empty entries, and no frame is empty. future reports that the prefix
// ends at a frame of a newer version.
func validPrefix(data []byte) (n int, future bool) {
	for n < len(data) {
		size, sizeLen := binary.Uvarint(data[n:])
		if sizeLen <= 0 || size == 0 || size > uint64(len(data)-n-sizeLen) {
			return n, false
		}
		end := n + sizeLen + int(size)
		switch classifyFrame(data[n+sizeLen : end]) {
		case frameCorrupt:
			return n, false
		case frameFuture:
			return n, true
		}
		n = end
	}
	return n, false
}

// countEntries is the best-effort DroppedRecords of a dropped tail.
func countEntries(tail []byte) int {
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
		count++
		if size > uint64(len(tail)-sizeLen) {
			return count
		}
		tail = tail[sizeLen+int(size):]
	}
	return count
}

// repairTail cuts the file tidwall will load as the tail of the log in dir
// after its last valid entry, and makes the cut durable. Only that file can
// be torn by a crash (see the package doc), and tidwall fails to load a
// torn one or serves a zero-filled one as empty entries.
func repairTail(dir string) (RepairReport, error) {
	files, err := listSegmentFiles(dir)
	if err != nil || len(files) == 0 {
		return RepairReport{}, err
	}
	path := filepath.Join(dir, lastLoadedFile(files).name)
	data, err := os.ReadFile(path)
	if err != nil {
		return RepairReport{}, err
	}
	valid, future := validPrefix(data)
	if valid == len(data) {
		return RepairReport{}, nil
	}
	if future {
		head := data[valid:min(len(data), valid+12)]
		return RepairReport{}, fmt.Errorf("%w: %s at byte %d holds a record of a newer release (entry starts %s)",
			ErrUnsupportedVersion, path, valid, hex.EncodeToString(head))
	}
	if err := cutFile(path, int64(valid)); err != nil {
		return RepairReport{}, err
	}
	if err := syncDir(dir); err != nil {
		return RepairReport{}, err
	}
	return RepairReport{
		DroppedBytes:   int64(len(data) - valid),
		DroppedRecords: countEntries(data[valid:]),
		File:           path,
	}, nil
}

func cutFile(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
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
