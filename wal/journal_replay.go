package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
)

// JournalReplay is what ReplayJournal did.
type JournalReplay struct {
	Files   int   // journal files read
	Entries int   // entries written back to their logs
	Bytes   int64 // bytes written back
	// Skipped counts the entries of logs or files that are gone, or of
	// an older journal generation than their log's (see Journal).
	Skipped int
	// Damaged names the journal files whose reading stopped at a damaged
	// entry with more bytes after it (a torn last round is not damage:
	// it was never acknowledged).
	Damaged []string
}

// replayOpenFiles bounds the log files a replay keeps open.
const replayOpenFiles = 256

// ReplayJournal writes what the journal files in dir hold back to the
// files of the logs under root, in order, syncs every file it wrote to,
// and removes the journal files. Call it before any log under root is
// opened (and before OpenJournal). A dir that does not exist holds
// nothing. fsys nil is OSFS.
func ReplayJournal(dir, root string, fsys FS) (JournalReplay, error) {
	var rep JournalReplay
	if fsys == nil {
		fsys = OSFS
	}
	numbers, err := journalFiles(fsys, dir)
	if errors.Is(err, fs.ErrNotExist) {
		return rep, nil
	}
	if err != nil {
		return rep, fmt.Errorf("braid/wal: journal replay: %w", err)
	}
	r := &replayer{fsys: fsys, root: filepath.Clean(root), gens: map[string]int64{}, open: map[string]File{}}
	for _, n := range numbers {
		name := filepath.Join(dir, journalName(n))
		data, err := readWholeFile(fsys, name)
		if err != nil {
			r.closeAll()
			return rep, fmt.Errorf("braid/wal: journal replay: %w", err)
		}
		rep.Files++
		damaged, err := r.replayFile(data, &rep)
		if err != nil {
			r.closeAll()
			return rep, fmt.Errorf("braid/wal: journal replay of %s: %w", name, err)
		}
		if damaged {
			rep.Damaged = append(rep.Damaged, name)
		}
	}
	if err := r.closeAll(); err != nil {
		return rep, fmt.Errorf("braid/wal: journal replay: %w", err)
	}
	// What the files held is in the logs' files now, synced.
	for _, n := range numbers {
		if err := fsys.Remove(filepath.Join(dir, journalName(n))); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return rep, fmt.Errorf("braid/wal: journal replay: %w", err)
		}
	}
	if len(numbers) > 0 {
		if err := syncDir(fsys, dir); err != nil {
			return rep, fmt.Errorf("braid/wal: journal replay: %w", err)
		}
	}
	return rep, nil
}

type replayer struct {
	fsys FS
	root string
	// gens caches each log's journal generation by its path under root
	// (-1: the log is gone); open the log files written to, by path.
	gens map[string]int64
	open map[string]File
}

// replayFile writes back the entries of one journal file. It reports
// whether it stopped at damage before the end.
func (r *replayer) replayFile(data []byte, rep *JournalReplay) (bool, error) {
	if len(data) < journalHeaderLen || string(data[:len(journalMagic)]) != journalMagic {
		return len(data) > 0, nil // a file cut short as it was started holds nothing
	}
	at := journalHeaderLen
	for at < len(data) {
		if len(data)-at < 8 {
			return !allZero(data[at:]), nil
		}
		sum := binary.LittleEndian.Uint32(data[at:])
		size := int(binary.LittleEndian.Uint32(data[at+4:]))
		if size < journalFixedLen || size > len(data)-at-8 {
			return !allZero(data[at:]), nil
		}
		body := data[at+8 : at+8+size]
		if crc32.Checksum(body, castagnoli) != sum {
			return at+8+size < len(data), nil
		}
		at += 8 + size
		gen := binary.LittleEndian.Uint64(body)
		first := binary.LittleEndian.Uint64(body[8:])
		pos := int64(binary.LittleEndian.Uint64(body[16:]))
		pathLen := int(binary.LittleEndian.Uint16(body[24:]))
		if journalFixedLen+pathLen > len(body) || pos < 0 {
			return true, nil
		}
		rel := string(body[journalFixedLen : journalFixedLen+pathLen])
		payload := body[journalFixedLen+pathLen:]
		written, err := r.writeBack(rel, gen, first, pos, payload)
		if err != nil {
			return false, err
		}
		if written {
			rep.Entries++
			rep.Bytes += int64(len(payload))
		} else {
			rep.Skipped++
		}
	}
	return false, nil
}

// writeBack writes one entry's bytes where they went, unless its log or
// file is gone or its generation is older than the log's.
func (r *replayer) writeBack(rel string, gen, first uint64, pos int64, payload []byte) (bool, error) {
	dir := filepath.Join(r.root, rel)
	if !filepath.IsLocal(rel) {
		return false, nil
	}
	logGen, ok := r.gens[rel]
	if !ok {
		if _, err := r.fsys.Stat(dir); err != nil {
			logGen = -1
		} else if g, err := readJournalGeneration(r.fsys, dir); err != nil {
			return false, err
		} else {
			logGen = int64(g)
		}
		r.gens[rel] = logGen
	}
	if logGen < 0 || gen < uint64(logGen) {
		return false, nil
	}
	path := filepath.Join(dir, segmentName(first))
	f, ok := r.open[path]
	if !ok {
		var err error
		f, err = r.fsys.OpenFile(path, os.O_RDWR, 0)
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		if len(r.open) >= replayOpenFiles {
			if err := r.closeAll(); err != nil {
				f.Close()
				return false, err
			}
		}
		r.open[path] = f
	}
	if _, err := f.WriteAt(payload, pos); err != nil {
		return false, fmt.Errorf("write back to %s: %w", path, err)
	}
	return true, nil
}

// closeAll syncs and closes the files written to.
func (r *replayer) closeAll() error {
	var errs []error
	for path, f := range r.open {
		if err := f.Sync(); err != nil {
			errs = append(errs, fmt.Errorf("sync %s: %w", path, err))
		}
		if err := f.Close(); err != nil {
			errs = append(errs, err)
		}
		delete(r.open, path)
	}
	return errors.Join(errs...)
}
