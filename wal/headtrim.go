package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
)

// Progressive head trim: retention of the log's first file a part at a
// time, for a file too big to wait until all of it has expired (a legacy
// single-file log adopted into the rolling layout, or a burst that made one
// oversized file). TrimHead moves the log's first offset to a frame inside
// its first closed file without rewriting it: it records the new start in
// "<name>.HEAD" (written through a ".TEMP" file, fsynced and renamed, so a
// crash leaves the old record or the new one), then frees the bytes before
// it by punching a hole in the file where the file system can (Linux); the
// file keeps its name, inode and size. Reads, Open and the truncations
// start the file at the recorded frame; a whole-file removal removes the
// record with the file.

// headRecordLen is the size of a ".HEAD" record: a magic, the new first
// offset, the byte its frame starts at, and a CRC32C of the three.
const headRecordLen = 8 + 8 + 8 + 4

var headMagic = [8]byte{'b', 'r', 'a', 'i', 'd', 'h', 'd', '1'}

// fileHead is what a ".HEAD" record says of its file.
type fileHead struct {
	first uint64 // the offset the file starts at now
	pos   int64  // where that offset's frame starts in the file
}

func (h fileHead) encode() []byte {
	b := make([]byte, 0, headRecordLen)
	b = append(b, headMagic[:]...)
	b = binary.LittleEndian.AppendUint64(b, h.first)
	b = binary.LittleEndian.AppendUint64(b, uint64(h.pos))
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

func decodeHead(b []byte) (fileHead, error) {
	if len(b) != headRecordLen || [8]byte(b[:8]) != headMagic {
		return fileHead{}, fmt.Errorf("%w: not a head record (%d bytes)", ErrCorrupt, len(b))
	}
	if crc32.Checksum(b[:headRecordLen-4], castagnoli) != binary.LittleEndian.Uint32(b[headRecordLen-4:]) {
		return fileHead{}, fmt.Errorf("%w: head record CRC mismatch", ErrCorrupt)
	}
	h := fileHead{first: binary.LittleEndian.Uint64(b[8:16]), pos: int64(binary.LittleEndian.Uint64(b[16:24]))}
	if h.pos <= 0 {
		return fileHead{}, fmt.Errorf("%w: head record at byte %d", ErrCorrupt, h.pos)
	}
	return h, nil
}

// fileName returns the name of the file that holds files[i] of v.
func (v *view) fileName(i int) string {
	if i == 0 && v.headPos > 0 {
		return segmentName(v.headName)
	}
	return segmentName(v.files[i])
}

// fileStart returns where the frames of files[i] of v start.
func (v *view) fileStart(i int) int64 {
	if i == 0 {
		return v.headPos
	}
	return 0
}

// loadHead applies the head record of the first of files (the data files
// Open found) and removes head records of no use: of files that are gone
// or no longer first (a removal a crash cut short), or damaged (the
// file's frames are then read from its start, where its punched bytes read
// as a hole of lost records, reported as any damage is). A head record on
// the open file cannot be made by TrimHead and is refused.
func loadHead(fsys FS, dir string, files []segmentFile) (fileHead, error) {
	entries, err := fsys.ReadDir(dir)
	if err != nil {
		return fileHead{}, err
	}
	var head fileHead
	for _, e := range entries {
		f, ok := parseSegmentName(e.Name())
		if !ok || f.kind != headFile || e.IsDir() {
			continue
		}
		path := filepath.Join(dir, e.Name())
		if len(files) > 0 && f.first == files[0].first && files[0].kind == plainFile {
			data, err := readWholeFile(fsys, path)
			if err != nil {
				return fileHead{}, err
			}
			h, err := decodeHead(data)
			if err == nil && h.first >= f.first {
				if len(files) == 1 {
					return fileHead{}, fmt.Errorf("%w: %s trims the head of the open file", ErrCorrupt, e.Name())
				}
				if h.first >= files[1].first {
					return fileHead{}, fmt.Errorf("%w: %s starts its file at offset %d, at or past the next file", ErrCorrupt, e.Name(), h.first)
				}
				head = h
				continue
			}
		}
		if err := fsys.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fileHead{}, err
		}
	}
	return head, nil
}

// TrimHead drops the offsets below before from the log's first file,
// which must be closed (not the open file), without rewriting it: before
// is taken down to the first offset of the frame that holds it (or up to
// the frame after a hole it falls in), so the first offset becomes the
// start of a frame. It does nothing, and returns 0, when the file's head
// would move by fewer than minBytes bytes. It returns how many bytes of
// the file are no longer the log's; where the file system punches holes
// (Linux), their space is free. before at or past the next file is an
// error (remove whole files with DropFilesBefore).
func (l *Log) TrimHead(before uint64, minBytes int64) (int64, error) {
	l.trimMu.Lock()
	defer l.trimMu.Unlock()
	l.mu.RLock()
	v := l.view
	l.mu.RUnlock()
	if err := v.firstClosed(l.dir); err != nil {
		return 0, err // an open first file is TruncateHead's
	}
	if before >= v.files[1] {
		return 0, fmt.Errorf("%w: offset %d is past the first file of %s, which ends before %d", ErrNotFound, before, l.dir, v.files[1])
	}
	if before <= v.first {
		return 0, nil
	}
	// The first file is closed and trimMu holds off every change to it:
	// its frames are found outside the write lock.
	l.readMu.Lock()
	o, err := l.olderFileLocked(&v, 0)
	var ref frameRef
	if err == nil {
		ref, err = frameStarting(&o.index, before)
	}
	l.readMu.Unlock()
	if err != nil {
		return 0, fmt.Errorf("braid/wal: trim head to %d in %s: %w", before, l.dir, err)
	}
	if ref.first <= v.first || ref.pos-v.headPos < minBytes {
		return 0, nil
	}
	name := v.files[0]
	if v.headPos > 0 {
		name = v.headName
	}
	head := fileHead{first: ref.first, pos: ref.pos}
	if err := writeReplacement(l.fs, l.dir, segmentName(name)+headSuffix, head.encode()); err != nil {
		return 0, fmt.Errorf("braid/wal: trim head to %d in %s: %w", before, l.dir, err)
	}

	l.writeMu.Lock()
	l.readMu.Lock()
	files := slices.Clone(l.files)
	files[0] = head.first
	l.files = files
	l.mu.Lock()
	l.view.first = head.first
	l.view.files = files
	l.view.headName, l.view.headPos = name, head.pos
	l.mu.Unlock()
	l.clipHolesLocked(head.first, ^uint64(0))
	l.dropReadCachesLocked()
	l.readMu.Unlock()
	l.writeMu.Unlock()
	l.newestMu.Lock()
	delete(l.newest, v.files[0])
	l.newestMu.Unlock()

	// No reader reads below the new start any more: free the bytes.
	if err := punchHead(l.fs, filepath.Join(l.dir, segmentName(name)), head.pos); err != nil {
		return 0, fmt.Errorf("braid/wal: trim head to %d in %s: freeing the trimmed bytes: %w", before, l.dir, err)
	}
	return head.pos - v.headPos, nil
}

// frameStarting returns the frame of index whose first offset is the
// greatest at or below off, or the first frame after the hole off is in.
func frameStarting(index *frameIndex, off uint64) (frameRef, error) {
	if h := index.holeAt(off); h != nil {
		off = h.To
	}
	i, found := slices.BinarySearchFunc(index.frames, off, func(f frameRef, off uint64) int {
		switch {
		case f.first < off:
			return -1
		case f.first > off:
			return 1
		}
		return 0
	})
	if !found {
		i--
	}
	if i < 0 || i >= len(index.frames) {
		return frameRef{}, fmt.Errorf("%w: no frame holds offset %d", ErrNotFound, off)
	}
	return index.frames[i], nil
}

// HeadOffsetPast returns the first offset of the first file's first frame
// that starts at least n bytes past the file's current start, or the
// first offset of the next file if there is none: the offset to trim the
// head to (TrimHead) or drop files before (DropFilesBefore) to give back
// about n bytes. The first file must be closed.
func (l *Log) HeadOffsetPast(n int64) (uint64, error) {
	l.readMu.Lock()
	defer l.readMu.Unlock()
	v := l.viewLocked()
	if err := v.firstClosed(l.dir); err != nil {
		return 0, err
	}
	o, err := l.olderFileLocked(&v, 0)
	if err != nil {
		return 0, err
	}
	want := v.headPos + n
	i, _ := slices.BinarySearchFunc(o.index.frames, want, func(f frameRef, pos int64) int {
		switch {
		case f.pos < pos:
			return -1
		case f.pos > pos:
			return 1
		}
		return 0
	})
	if i < len(o.index.frames) {
		return o.index.frames[i].first, nil
	}
	return v.files[1], nil
}

// ExpiredBefore returns the offset of the first record of the log's first
// closed file whose time is at or after cutoff (unix ms): every record
// below it is older (the file's first offset if the first record is not).
// It reads the records from the file's start up to the first such record,
// and stops at the next file. The first file must be closed.
func (l *Log) ExpiredBefore(cutoff int64) (uint64, error) {
	l.mu.RLock()
	v := l.view
	l.mu.RUnlock()
	if err := v.firstClosed(l.dir); err != nil {
		return 0, err
	}
	off := v.first
	for off < v.files[1] {
		recs, err := l.ReadRange(off, 1024, 1<<20)
		var hole *HoleError
		switch {
		case errors.As(err, &hole):
			off = hole.To // lost records are no reason to keep what follows
			continue
		case errors.Is(err, ErrNotFound) && off < l.FirstOffset():
			off = l.FirstOffset() // trimmed meanwhile
			continue
		case err != nil:
			return 0, err
		}
		for _, r := range recs {
			if r.Timestamp >= cutoff || off >= v.files[1] {
				return off, nil
			}
			off++
		}
	}
	return v.files[1], nil
}

// materializeHeadLocked rewrites a trimmed first file as a plain file that
// starts at its first offset (as TruncateHead rewrites one), so that it
// may become the open file again. The caller holds trimMu and writeMu.
func (l *Log) materializeHeadLocked() error {
	if l.view.headPos == 0 {
		return nil
	}
	return l.truncateHeadLocked(l.view.first, true)
}

// removeHeadRecord removes the ".HEAD" record of the file named name.
func removeHeadRecord(fsys FS, dir string, name uint64) error {
	err := fsys.Remove(filepath.Join(dir, segmentName(name)+headSuffix))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// fdFile is a File of the operating system's file system.
type fdFile interface{ Fd() uintptr }

// punchHead frees the bytes [0, pos) of the file at path, rounded down to
// the file system's block, where the file system can; elsewhere the bytes
// stay until the file is removed.
func punchHead(fsys FS, path string, pos int64) error {
	n := pos &^ (punchBlock - 1)
	if n <= 0 {
		return nil
	}
	f, err := fsys.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if of, ok := f.(fdFile); ok {
		return punchHole(of.Fd(), n)
	}
	return nil
}

// punchBlock is the unit punchHead frees in.
const punchBlock = 4096

// firstClosed reports why the first file of the log in dir, as v shows it,
// cannot be worked on as a closed file: the log is closed, or the file is
// the open one (ErrNotFound).
func (v *view) firstClosed(dir string) error {
	switch {
	case v.closed:
		return ErrClosed
	case len(v.files) < 2:
		return fmt.Errorf("%w: the first file of %s is open", ErrNotFound, dir)
	}
	return nil
}
