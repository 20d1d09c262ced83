package wal

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// A file is named by the 20-digit offset of its first record (of the record
// it would hold first, if it is empty). Two suffixes mark the replacement
// file of a truncation that has not finished; Open finishes it:
// "<first>.START" (TruncateHead) and "<first>.END" (TruncateTail). Both are
// written as "<name>.TEMP", fsynced, then renamed.
const (
	offsetNameLen = 20
	startSuffix   = ".START"
	endSuffix     = ".END"
	headSuffix    = ".HEAD"
	tempSuffix    = ".TEMP"
)

type fileKind uint8

const (
	plainFile fileKind = iota
	startFile
	endFile
	headFile // the record of a trimmed head (see TrimHead), not a data file
)

// segmentFile is one directory entry that is part of the log.
type segmentFile struct {
	name  string
	first uint64 // offset of the file's first record
	kind  fileKind
}

func segmentName(first uint64) string {
	return fmt.Sprintf("%0*d", offsetNameLen, first)
}

func parseSegmentName(name string) (segmentFile, bool) {
	if len(name) < offsetNameLen {
		return segmentFile{}, false
	}
	digits := name[:offsetNameLen]
	if strings.ContainsAny(digits, "+-") {
		return segmentFile{}, false
	}
	first, err := strconv.ParseUint(digits, 10, 64)
	if err != nil {
		return segmentFile{}, false
	}
	f := segmentFile{name: name, first: first}
	switch name[offsetNameLen:] {
	case "":
		f.kind = plainFile
	case startSuffix:
		f.kind = startFile
	case endSuffix:
		f.kind = endFile
	case headSuffix:
		f.kind = headFile
	default:
		return segmentFile{}, false
	}
	return f, true
}

// listSegmentFiles returns the data files of dir that are part of the log,
// in name order: by first offset, a plain file before its ".END" and
// ".START".
// HasLog says whether dir holds a log's files (a directory that does not
// exist, or holds only other directories, holds none).
func HasLog(fsys FS, dir string) (bool, error) {
	if fsys == nil {
		fsys = OSFS
	}
	files, err := listSegmentFiles(fsys, dir)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return len(files) > 0, err
}

func listSegmentFiles(fsys FS, dir string) ([]segmentFile, error) {
	entries, err := fsys.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var files []segmentFile
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		if f, ok := parseSegmentName(e.Name()); ok && f.kind != headFile {
			files = append(files, f)
		}
	}
	return files, nil
}

// finishTruncation completes a truncation that a crash interrupted after
// its replacement file was in place (see TruncateHead and TruncateTail): a
// ".START" file replaces every file before it, an ".END" file replaces its
// plain namesake and every file after it. It returns the plain files that
// remain, in offset order.
func finishTruncation(fsys FS, dir string) ([]segmentFile, error) {
	files, err := listSegmentFiles(fsys, dir)
	if err != nil {
		return nil, err
	}
	start, end := -1, -1
	for i, f := range files {
		switch {
		case f.kind == startFile:
			start = i // the last one: it supersedes any earlier one
		case f.kind == endFile && end < 0:
			end = i // the first one: it supersedes any later one
		}
	}
	if start >= 0 && end >= 0 {
		return nil, fmt.Errorf("%w: both %s and %s in %s", ErrCorrupt, files[start].name, files[end].name, dir)
	}
	var keep []segmentFile
	switch {
	case start >= 0:
		if err := removeFiles(fsys, dir, files[:start]); err != nil {
			return nil, err
		}
		keep = append(keep, files[start+1:]...)
		if err := promote(fsys, dir, files[start]); err != nil {
			return nil, err
		}
		keep = append([]segmentFile{{name: segmentName(files[start].first), first: files[start].first}}, keep...)
	case end >= 0:
		if err := removeFiles(fsys, dir, files[end+1:]); err != nil {
			return nil, err
		}
		keep = slices.DeleteFunc(slices.Clone(files[:end]), func(f segmentFile) bool { return f.first == files[end].first })
		if err := promote(fsys, dir, files[end]); err != nil {
			return nil, err
		}
		keep = append(keep, segmentFile{name: segmentName(files[end].first), first: files[end].first})
	default:
		return files, nil
	}
	if err := syncDir(fsys, dir); err != nil {
		return nil, err
	}
	return keep, nil
}

// promote renames a ".START" or ".END" file to its plain name, replacing
// the file of that name if there is one.
func promote(fsys FS, dir string, f segmentFile) error {
	return fsys.Rename(filepath.Join(dir, f.name), filepath.Join(dir, segmentName(f.first)))
}

func removeFiles(fsys FS, dir string, files []segmentFile) error {
	for _, f := range files {
		if err := fsys.Remove(filepath.Join(dir, f.name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// writeReplacement writes the replacement file of a truncation durably:
// through a fsynced ".TEMP" file renamed to name, and an fsync of dir.
func writeReplacement(fsys FS, dir, name string, data []byte) error {
	path := filepath.Join(dir, name)
	temp := path + tempSuffix
	f, err := fsys.OpenFile(temp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o640)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = fsys.Rename(temp, path)
	}
	if err != nil {
		fsys.Remove(temp)
		return err
	}
	return syncDir(fsys, dir)
}

// removeStaleTemps deletes the temporary files of a truncation that
// crashed before its rename.
func removeStaleTemps(fsys FS, dir string) error {
	entries, err := fsys.ReadDir(dir)
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
		if err := fsys.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// mkdirDurable creates dir and its missing parents, and fsyncs the parent
// of every directory it created, so that the new entries survive a crash.
func mkdirDurable(fsys FS, dir string) error {
	var missing []string
	for p := dir; ; p = filepath.Dir(p) {
		if _, err := fsys.Stat(p); err == nil {
			break
		} else if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		missing = append(missing, p)
		if filepath.Dir(p) == p {
			break
		}
	}
	if err := fsys.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	for _, p := range missing {
		if err := syncDir(fsys, filepath.Dir(p)); err != nil {
			return err
		}
	}
	return nil
}

// syncDir makes creations, renames and removals in dir durable.
func syncDir(fsys FS, dir string) error { return fsys.SyncDir(dir) }

// ReplaceFile writes data to path durably, replacing what is there: a
// crash leaves the old contents or the new, never a mix (a fsynced
// temporary file renamed over path, and an fsync of its directory). A
// temporary file a crash left is overwritten by the next ReplaceFile.
func ReplaceFile(fsys FS, path string, data []byte) error {
	if fsys == nil {
		fsys = OSFS
	}
	return writeReplacement(fsys, filepath.Dir(path), filepath.Base(path), data)
}

// ReadFile reads the whole file at path through fsys (OSFS if nil).
func ReadFile(fsys FS, path string) ([]byte, error) {
	if fsys == nil {
		fsys = OSFS
	}
	return readWholeFile(fsys, path)
}

// MkdirDurable creates dir and its missing parents (through fsys, OSFS if
// nil) and fsyncs the parent of every directory it created.
func MkdirDurable(fsys FS, dir string) error {
	if fsys == nil {
		fsys = OSFS
	}
	return mkdirDurable(fsys, dir)
}
