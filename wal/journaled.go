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

// A journaled log (Options.Journal) journals every write to its tail file
// and, in a round of its journal's CommitGroup, commits by the journal's
// sync instead of its own. Its own files are synced as they roll, at a
// checkpoint, by Sync and at Close. See Journal.

// journalState is a journaled log's part, guarded by writeMu.
type journalState struct {
	journal *Journal
	rel     string // the log's path under the journal's root
	gen     uint64 // entries of older generations are not replayed
	// pending holds the entries of the writes since the last commit,
	// and count how many.
	pending []byte
	count   int
	// direct says the log wrote at least its journal's directBytes since
	// its last commit (Journal.SyncDirectlyFrom): that commit syncs the
	// log's own file instead, and the writes until then are not
	// journaled (nor held in memory: they go to the file at once).
	direct bool
}

// openJournaled sets up the journal part of a log opened in dir: nil when
// opts has no journal or the journal cannot cover dir (not under its
// root, or on another file system than the root's).
func openJournaled(dir string, opts Options) (*journalState, error) {
	j := opts.Journal
	if j == nil || opts.Durability != DurabilityAlways {
		return nil, nil
	}
	rel, ok := j.relPath(dir)
	if !ok || !j.sameDevice(dir) {
		return nil, nil
	}
	gen, err := readJournalGeneration(opts.FS, dir)
	if err != nil {
		return nil, err
	}
	return &journalState{journal: j, rel: rel, gen: gen}, nil
}

// readJournalGeneration reads the journal generation of the log in dir (0
// when it has none).
func readJournalGeneration(fsys FS, dir string) (uint64, error) {
	data, err := readWholeFile(fsys, filepath.Join(dir, genFileName))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	gen, err := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %s: %q is not a journal generation", ErrCorrupt, filepath.Join(dir, genFileName), data)
	}
	return gen, nil
}

// journalWriteLocked journals the write of p at pos of the tail file, to
// be made, and reports whether the log commits by a sync of its own file
// instead (journalState.direct): then nothing is journaled, and p goes to
// the file at once.
func (l *Log) journalWriteLocked(p []byte, pos int64) (direct bool) {
	js := l.journaled
	if js == nil {
		return false
	}
	if js.direct {
		return true
	}
	if d := js.journal.directBytes; d > 0 && len(js.pending)+len(p) >= d {
		// What was journaled so far is in the file, or held for it and
		// flushed by the sync: the entries are not needed.
		js.direct = true
		js.journal.directCommits.Add(1)
		js.pending, js.count = js.pending[:0], 0
		return true
	}
	js.pending = appendJournalEntry(js.pending, js.rel, js.gen, l.tail.first, pos, p)
	js.count++
	return false
}

// dropJournaledLocked forgets the pending entries once the tail file
// itself was synced; the log journals its writes again.
func (l *Log) dropJournaledLocked() {
	if js := l.journaled; js != nil {
		js.pending, js.count, js.direct = js.pending[:0], 0, false
		if cap(js.pending) > maxKeptBatchBytes {
			js.pending = nil
		}
	}
}

// startJournaledCommitLocked is StartCommitIn for a journaled log in a
// round of its journal: the round's journal write covers what was written
// since the last commit; the tail file stays unsynced. The caller holds
// writeMu; it returns holding syncMu (released by Wait), as startCommit.
func (l *Log) startJournaledCommitLocked(r *Round) *PendingCommit {
	js := l.journaled
	p := &PendingCommit{l: l, target: l.tail.index(), file: l.tail.file}
	p.job.fs = l.fs
	if l.dirUnsynced {
		// A file came or went: the directory is synced at Wait, before
		// the round is acknowledged.
		p.job.dir = l.dir
		l.dirUnsynced = false
	}
	l.syncMu.Lock()
	if l.syncErr == nil && js.count > 0 {
		p.wait = r.addJournaled(l, js.pending, js.count)
	}
	js.pending, js.count = js.pending[:0], 0
	l.writeMu.Unlock()
	return p
}

// raiseJournalGenerationLocked syncs the log's tail file and raises its
// journal generation durably, so that replay writes none of the entries
// journaled so far: a truncation that cuts records calls it first.
func (l *Log) raiseJournalGenerationLocked() error {
	js := l.journaled
	if js == nil {
		return nil
	}
	l.unsynced = true // whatever was journaled must be in the file itself
	if err := l.syncLocked(); err != nil {
		return err
	}
	next := js.gen + 1
	if err := writeReplacement(l.fs, l.dir, genFileName, []byte(strconv.FormatUint(next, 10)+"\n")); err != nil {
		return l.failLocked(fmt.Errorf("raise the journal generation: %w", err))
	}
	js.gen = next
	return nil
}

// syncTail syncs the log's tail file (a checkpoint of its journal).
func (l *Log) syncTail() error {
	l.writeMu.Lock()
	if err := l.writableLocked(); err != nil {
		l.writeMu.Unlock()
		return err
	}
	job := syncJob{fs: l.fs}
	if l.unsynced {
		job.file = l.tail.file
		l.unsynced = false
		l.dropJournaledLocked()
	}
	if err := l.syncOutsideWriteMu(job); err != nil {
		l.writeMu.Lock()
		err = l.failLocked(err)
		l.writeMu.Unlock()
		return err
	}
	return nil
}

// sameDevice reports whether dir is on the file system of the journal's
// root (always true on file systems other than the operating system's).
func (j *Journal) sameDevice(dir string) bool {
	if j.fsys != OSFS {
		return true
	}
	d, err := os.Open(dir)
	if err != nil {
		return false
	}
	defer d.Close()
	dev := deviceOf(d)
	return dev != 0 && dev == j.rootDev
}
