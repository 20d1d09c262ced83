package wal

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// tidwall names a file by the 20-digit index of its first entry. Two
// suffixes mark files of an unfinished truncation, which tidwall resolves
// when it opens the directory: "<index>.START" (TruncateFront) and
// "<index>.END" (TruncateBack). Both are written through "<name>.TEMP",
// which is fsynced and then renamed.
const (
	indexNameLen = 20
	startSuffix  = ".START"
	endSuffix    = ".END"
	tempSuffix   = ".TEMP"
)

type fileKind uint8

const (
	plainFile fileKind = iota
	startFile
	endFile
)

// segmentFile is one directory entry tidwall treats as part of the log.
type segmentFile struct {
	name  string
	index uint64 // tidwall index of the file's first entry
	kind  fileKind
}

func segmentName(index uint64) string {
	return fmt.Sprintf("%0*d", indexNameLen, index)
}

// parseSegmentName accepts exactly the names tidwall's loader accepts.
func parseSegmentName(name string) (segmentFile, bool) {
	if len(name) < indexNameLen {
		return segmentFile{}, false
	}
	index, err := strconv.ParseUint(name[:indexNameLen], 10, 64)
	if err != nil || index == 0 {
		return segmentFile{}, false
	}
	f := segmentFile{name: name, index: index}
	switch name[indexNameLen:] {
	case "":
		f.kind = plainFile
	case startSuffix:
		f.kind = startFile
	case endSuffix:
		f.kind = endFile
	default:
		return segmentFile{}, false
	}
	return f, true
}

// listSegmentFiles returns the files of dir that tidwall loads, in name
// order (which is index order), as tidwall lists them.
func listSegmentFiles(dir string) ([]segmentFile, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var files []segmentFile
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		if f, ok := parseSegmentName(e.Name()); ok {
			files = append(files, f)
		}
	}
	return files, nil
}

// lastLoadedFile returns the file tidwall will load as the tail of the log:
// the first ".END" file if there is one (tidwall deletes every file after
// it, then renames it), otherwise the last file by name, which may be a
// ".START" file (tidwall deletes every file before it, then renames it).
func lastLoadedFile(files []segmentFile) segmentFile {
	for _, f := range files {
		if f.kind == endFile {
			return f
		}
	}
	return files[len(files)-1]
}

// removeStaleTemps deletes the temporary files of a tidwall truncation that
// crashed before its rename. tidwall ignores them but never removes them.
func removeStaleTemps(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), tempSuffix)
		if !ok || e.IsDir() {
			continue
		}
		if f, ok := parseSegmentName(name); !ok || f.kind == plainFile {
			continue
		}
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// mkdirDurable creates dir and its missing parents, and fsyncs the parent
// of every directory it created, so that the new entries survive a crash.
func mkdirDurable(dir string) error {
	var missing []string
	for p := dir; ; p = filepath.Dir(p) {
		if _, err := os.Stat(p); err == nil {
			break
		} else if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		missing = append(missing, p)
		if filepath.Dir(p) == p {
			break
		}
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	for _, p := range missing {
		if err := syncDir(filepath.Dir(p)); err != nil {
			return err
		}
	}
	return nil
}

// syncDir makes creations, renames and removals in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	if err := d.Sync(); err != nil {
		d.Close()
		return err
	}
	return d.Close()
}

// tailFile follows the file tidwall appends to, so that this package can
// fsync it through a descriptor of its own: tidwall's Sync holds its lock,
// which would block every reader for the length of an fsync.
//
// Invariant (checked before every fsync): size is the size of the file on
// disk, which is also the length of tidwall's in-memory copy of it, the
// number its roll decision reads.
type tailFile struct {
	index uint64 // tidwall index of the file's first entry (its name)
	size  int64
	file  *os.File // read-only; fsync works on any descriptor of the file
}

// openTail opens the last file of a directory tidwall has loaded (so no
// ".START" or ".END" file is left).
func openTail(dir string) (tailFile, error) {
	files, err := listSegmentFiles(dir)
	if err != nil {
		return tailFile{}, err
	}
	var last *segmentFile
	for i := range files {
		if files[i].kind == plainFile {
			last = &files[i]
		}
	}
	if last == nil {
		return tailFile{}, fmt.Errorf("braid/wal: no log file in %s", dir)
	}
	f, err := os.Open(filepath.Join(dir, last.name))
	if err != nil {
		return tailFile{}, err
	}
	info, err := f.Stat()
	if err != nil {
		f.Close()
		return tailFile{}, err
	}
	return tailFile{index: last.index, size: info.Size(), file: f}, nil
}

func (t *tailFile) close() error {
	if t.file == nil {
		return nil
	}
	err := t.file.Close()
	t.file = nil
	return err
}

// advance replays tidwall's roll decisions for a batch of frames written at
// firstIndex and reports whether tidwall rolled to a new file. It mirrors
// tidwall v1.2.1 (Log.writeBatch): roll before the batch when the tail is
// already over segmentBytes; roll after any entry that brings the tail to
// segmentBytes or more, the new file being named by the next index.
func (t *tailFile) advance(firstIndex uint64, frames [][]byte, segmentBytes int) (rolled bool) {
	limit := int64(segmentBytes)
	if t.size > limit {
		t.index, t.size, rolled = firstIndex, 0, true
	}
	for i, frame := range frames {
		t.size += int64(uvarintLen(uint64(len(frame))) + len(frame))
		if t.size >= limit {
			t.index, t.size, rolled = firstIndex+uint64(i)+1, 0, true
		}
	}
	return rolled
}
