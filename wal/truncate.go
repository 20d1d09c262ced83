package wal

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
)

// TruncateHead drops every offset below before (retention). before may be
// NextOffset, which empties the log; FirstOffset becomes before either way.
// A before at or below FirstOffset does nothing; above NextOffset it is an
// error wrapping ErrNotFound.
//
// Files wholly below before are removed. The file that holds before is
// replaced by one that starts at before, its first frame cut to the records
// from before on: the replacement is written as "<before>.START" first, so
// that a crash leaves either the old files or a ".START" file that Open
// puts in their place.
func (l *Log) TruncateHead(before uint64) error {
	l.trimMu.Lock()
	defer l.trimMu.Unlock()
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	return l.truncateHeadLocked(before, false)
}

// truncateHeadLocked is TruncateHead; with rewriteHead, it rewrites a first
// file with a trimmed head (see TrimHead) even where before is its first
// offset. The caller holds trimMu and writeMu.
func (l *Log) truncateHeadLocked(before uint64, rewriteHead bool) error {
	if err := l.writableLocked(); err != nil {
		return err
	}
	if err := l.commitWrittenLocked(); err != nil {
		return err
	}
	if before < l.view.first || before == l.view.first && !rewriteHead {
		return nil
	}
	if before > l.view.next {
		return fmt.Errorf("%w: truncate head to %d beyond next offset %d in %s", ErrNotFound, before, l.view.next, l.dir)
	}
	i := fileHolding(l.files, before)
	rewrite := l.files[i] != before || i == 0 && rewriteHead && l.view.headPos > 0
	keepFrom := i // the first file that stays as it is
	var content []byte
	if rewrite {
		data, index, err := l.readFileLocked(i)
		if err != nil {
			return fmt.Errorf("braid/wal: truncate head to %d: %w", before, err)
		}
		if content, err = cutFront(data, index, before); err != nil {
			return fmt.Errorf("braid/wal: truncate head to %d in %s: %w", before, l.dir, err)
		}
		if err := writeReplacement(l.fs, l.dir, segmentName(before)+startSuffix, content); err != nil {
			return l.failLocked(fmt.Errorf("truncate head to %d: %w", before, err))
		}
		keepFrom = i + 1
	}

	l.readMu.Lock()
	defer l.readMu.Unlock()
	// The old files must be gone for good before the replacement takes
	// their place: a crash in between leaves the ".START" file to finish.
	err := removeFiles(l.fs, l.dir, l.segmentFilesLocked(0, keepFrom))
	if rewrite && err == nil {
		if err = syncDir(l.fs, l.dir); err == nil {
			err = promote(l.fs, l.dir, segmentFile{name: segmentName(before) + startSuffix, first: before})
		}
	}
	if err == nil && l.view.headPos > 0 {
		// The trimmed file went (or was rewritten): its head record goes.
		err = removeHeadRecord(l.fs, l.dir, l.view.headName)
	}
	if err != nil {
		return l.failLocked(fmt.Errorf("truncate head to %d: %w", before, err))
	}
	l.dirUnsynced = true
	files := slices.Clone(l.files[keepFrom:])
	if rewrite {
		files = slices.Insert(files, 0, before)
	}
	if keepFrom == len(l.files) {
		// The tail itself was replaced.
		if err := l.replaceTailLocked(before, content); err != nil {
			return l.failLocked(fmt.Errorf("truncate head to %d: %w", before, err))
		}
	}
	l.files = files
	l.mu.Lock()
	l.view.first = before
	l.view.files = files
	l.view.headName, l.view.headPos = 0, 0
	l.publishTailViewLocked()
	l.mu.Unlock()
	l.clipHolesLocked(before, math.MaxUint64)
	l.dropReadCachesLocked()
	return l.afterTruncateLocked()
}

// TruncateTail drops every offset from from on; the next append gets from.
// A from at or beyond NextOffset does nothing; below FirstOffset it is an
// error wrapping ErrNotFound.
//
// The file that holds from becomes the tail, cut to the offsets below from
// (its last frame re-framed if from falls inside it), and the files after
// it are removed. The cut file is written as "<first>.END" first, so that a
// crash leaves either the old files or an ".END" file that Open puts in
// their place.
func (l *Log) TruncateTail(from uint64) error {
	l.trimMu.Lock()
	defer l.trimMu.Unlock()
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	if err := l.writableLocked(); err != nil {
		return err
	}
	if err := l.commitWrittenLocked(); err != nil {
		return err
	}
	if from >= l.view.next {
		return nil
	}
	// A closed file may become the tail again: what ClosedFiles remembers
	// of it would be stale.
	l.forgetClosed()
	if from < l.view.first {
		return fmt.Errorf("%w: truncate tail to %d below first offset %d in %s", ErrNotFound, from, l.view.first, l.dir)
	}
	// A replay after a crash must not write back what this cuts.
	if err := l.raiseJournalGenerationLocked(); err != nil {
		return err
	}
	i := fileHolding(l.files, from)
	if i == 0 {
		// The first file becomes the open one, which starts at byte 0.
		if err := l.materializeHeadLocked(); err != nil {
			return err
		}
	}
	data, index, err := l.readFileLocked(i)
	if err != nil {
		return fmt.Errorf("braid/wal: truncate tail to %d: %w", from, err)
	}
	content, err := cutBack(data, index, from)
	if err != nil {
		return fmt.Errorf("braid/wal: truncate tail to %d in %s: %w", from, l.dir, err)
	}
	first := l.files[i]
	if err := writeReplacement(l.fs, l.dir, segmentName(first)+endSuffix, content); err != nil {
		return l.failLocked(fmt.Errorf("truncate tail to %d: %w", from, err))
	}

	l.readMu.Lock()
	defer l.readMu.Unlock()
	err = removeFiles(l.fs, l.dir, l.segmentFilesLocked(i+1, len(l.files)))
	if err == nil {
		if err = syncDir(l.fs, l.dir); err == nil {
			err = promote(l.fs, l.dir, segmentFile{name: segmentName(first) + endSuffix, first: first})
		}
	}
	if err == nil {
		err = l.replaceTailLocked(first, content)
	}
	if err == nil && l.tail.next != from {
		err = fmt.Errorf("the cut file ends at offset %d", l.tail.next)
	}
	if err != nil {
		return l.failLocked(fmt.Errorf("truncate tail to %d: %w", from, err))
	}
	l.dirUnsynced = true
	l.files = slices.Clone(l.files[:i+1])
	l.mu.Lock()
	l.view.files = l.files
	l.view.next = from
	l.publishTailViewLocked()
	l.mu.Unlock()
	l.clipHolesLocked(0, from)
	l.dropReadCachesLocked()
	return l.afterTruncateLocked()
}

// afterTruncateLocked makes the removals and renames durable under
// DurabilityAlways; the replacement file itself was fsynced.
func (l *Log) afterTruncateLocked() error {
	if l.opts.Durability == DurabilityAlways {
		return l.syncLocked()
	}
	return nil
}

// publishTailViewLocked copies the tail into the view; the caller holds mu.
func (l *Log) publishTailViewLocked() {
	l.view.tail = l.tail.index()
	l.view.tailFile = l.tail.file
}

// replaceTailLocked makes the file that starts at first, which a truncation
// just put in place with content, the tail. The caller holds writeMu and
// readMu.
func (l *Log) replaceTailLocked(first uint64, content []byte) error {
	path := filepath.Join(l.dir, segmentName(first))
	index := scanFrameIndex(bytes.NewReader(content), int64(len(content)), first, math.MaxUint64).withFile(path)
	if index.stopped != nil || index.end != int64(len(content)) {
		return fmt.Errorf("the replacement file does not index: %v", index.stopped)
	}
	l.addHolesLocked(index.holes)
	f, err := l.openTailFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	l.syncMu.Lock()
	old := l.tail.file
	l.tail = tailFile{first: first, file: f, size: index.end, frames: index.frames, holes: index.holes, next: index.next, maxTime: math.MinInt64}
	l.newestMu.Lock()
	delete(l.maxTimes, first) // it is written to again
	l.newestMu.Unlock()
	l.preallocated.Store(0)
	// What was written to the old tail is either in the replacement, which
	// was fsynced, or dropped.
	l.unsynced = false
	l.syncMu.Unlock()
	old.Close()
	return nil
}

// fileHolding returns the index of the last file of files (first offsets,
// ascending) that starts at or below off.
func fileHolding(files []uint64, off uint64) int {
	i, found := slices.BinarySearch(files, off)
	if !found {
		i--
	}
	return max(i, 0)
}

// segmentFilesLocked returns the plain files files[from:to].
func (l *Log) segmentFilesLocked(from, to int) []segmentFile {
	var out []segmentFile
	for i := from; i < to; i++ {
		out = append(out, segmentFile{name: l.view.fileName(i), first: l.files[i]})
	}
	return out
}

// readFileLocked returns the contents of files[i], up to the end of its
// last indexed frame, and its index.
func (l *Log) readFileLocked(i int) ([]byte, frameIndex, error) {
	if i == len(l.files)-1 {
		data := make([]byte, l.tail.size)
		if _, err := l.tail.file.ReadAt(data, 0); err != nil {
			return nil, frameIndex{}, err
		}
		return data, l.tail.index(), nil
	}
	data, err := readWholeFile(l.fs, filepath.Join(l.dir, l.view.fileName(i)))
	if err != nil {
		return nil, frameIndex{}, err
	}
	index := scanFrameIndexFrom(bytes.NewReader(data), int64(len(data)), l.view.fileStart(i), l.files[i], l.files[i+1])
	return data[:index.end], index, nil
}

// cutFront returns the contents of a file (data, indexed by index) from
// offset before on: its frames from the one that holds before, that one cut
// to start at before.
func cutFront(data []byte, index frameIndex, before uint64) ([]byte, error) {
	if before == index.next {
		return nil, nil
	}
	if h := index.holeAt(before); h != nil {
		// The file starts after the hole, and reads [before, h.To) as a hole
		// of no bytes.
		if i := slices.IndexFunc(index.frames, func(f frameRef) bool { return f.first == h.To }); i >= 0 {
			return data[index.frames[i].pos:], nil
		}
		return nil, nil // the hole runs to the next file
	}
	ref, end, _, ok := index.find(before)
	if !ok {
		return nil, fmt.Errorf("%w: offset %d is not in the file's frames (they end before %d)", ErrCorrupt, before, index.next)
	}
	if before == ref.first {
		return data[ref.pos:], nil
	}
	b, err := entryBatch(data[ref.pos:end])
	if err != nil {
		return nil, err
	}
	var bodies [][]byte
	for off := before; off < b.last(); off++ {
		bodies = append(bodies, b.body(off))
	}
	out := appendBatchEntry(make([]byte, 0, len(data)-int(ref.pos)), b.meta, before, bodies)
	return append(out, data[end:]...), nil
}

// cutBack returns the contents of a file (data, indexed by index) before
// offset from: its frames before the one that holds from, and that one cut
// to end before from.
func cutBack(data []byte, index frameIndex, from uint64) ([]byte, error) {
	if h := index.holeAt(from); h != nil {
		return nil, fmt.Errorf("%w: cannot cut at offset %d, which is lost", &HoleError{Hole: *h}, from)
	}
	ref, end, _, ok := index.find(from)
	if !ok {
		return nil, fmt.Errorf("%w: offset %d is not in the file's frames (they end before %d)", ErrCorrupt, from, index.next)
	}
	out := slices.Clone(data[:ref.pos])
	if from == ref.first {
		return out, nil
	}
	b, err := entryBatch(data[ref.pos:end])
	if err != nil {
		return nil, err
	}
	var bodies [][]byte
	for off := b.first; off < from; off++ {
		bodies = append(bodies, b.body(off))
	}
	return appendBatchEntry(out, b.meta, b.first, bodies), nil
}

// entryBatch parses one stored entry: size prefix and frame.
func entryBatch(entry []byte) (*batch, error) {
	size, n := binary.Uvarint(entry)
	if n <= 0 || size != uint64(len(entry)-n) {
		return nil, fmt.Errorf("%w: bad size prefix", ErrCorrupt)
	}
	return parseBatch(entry[n:])
}
