package wal

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
)

// A CommitGroup makes the commits of many logs durable together, in
// rounds. A node with many logs written at once, a few records each (load
// spread over many topics), would otherwise pay one fdatasync per log per
// commit: each flushes the device's cache on its own, and group commit
// within one log finds nothing to group. The writer of a round (one
// goroutine for many logs) writes to each log, adds each log's commit to
// the round (Log.StartCommitIn), starts the round, and waits for each
// commit; the round syncs every file in it at once:
//
//   - SyncFS (the default): one syncfs of the group's file system covers
//     every file of the round that is on it (one journal commit, one cache
//     flush); a round of one file is one fdatasync. On this project's
//     machine (`go run ./benchmarks/syncfs`), 256 parallel fdatasyncs took
//     6.4x [1.8x, 13.4x] (median [min, max] over 7 alternating rounds) the
//     time of one syncfs over the same 256 dirty files. The price: a syncfs
//     also writes back whatever else is dirty on that file system, so put
//     the data directory on a file system of its own when other programs
//     write much to it.
//   - SyncEach: one fdatasync per file, submitted together (one io_uring
//     submission on Linux), for a file system shared with heavy writers.
//
// A round's files on another file system than the group's, and files of
// other FS implementations than OSFS, are synced one by one in the round.
//
// A failed syncfs fails every commit it covered (a syncfs reports the file
// system's write-back errors, not one file's): their logs fail (ErrFailed)
// as after a failed fdatasync.
type CommitGroup struct {
	mode SyncMode
	// journal, when set, makes the commits of the logs it journals
	// durable instead (see Journal): one write and one sync of its own
	// file per round.
	journal *Journal
	// root is open for the group's life: syncfs runs on it, so that every
	// write-back error on the file system since the group was made is
	// reported to the group exactly once. dev is its file system's device
	// (0 when unknown: every file then syncs alone).
	root *os.File
	dev  uint64

	rounds, commits atomic.Uint64

	// journalBufs holds the journal buffers of finished rounds, for the
	// next ones: a round's entries hold every byte its logs wrote, and a
	// buffer grown anew each round was a fifth of what a node under
	// single-message produce allocated.
	journalBufs sync.Pool
}

// SyncMode says how a Round makes its files durable; see CommitGroup.
type SyncMode uint8

const (
	SyncFS SyncMode = iota
	SyncEach
)

var syncModeNames = [...]string{SyncFS: "syncfs", SyncEach: "fdatasync"}

func (m SyncMode) String() string {
	if int(m) < len(syncModeNames) {
		return syncModeNames[m]
	}
	return fmt.Sprintf("SyncMode(%d)", uint8(m))
}

// ParseSyncMode parses "syncfs" or "fdatasync".
func ParseSyncMode(s string) (SyncMode, error) {
	for m, name := range syncModeNames {
		if s == name {
			return SyncMode(m), nil
		}
	}
	return 0, fmt.Errorf("braid/wal: unknown sync mode %q (want syncfs or fdatasync)", s)
}

// NewCommitGroup returns a group whose rounds sync with mode; root is a
// directory on the file system the logs are on (SyncFS syncs that one).
// With a journal, the commits of the logs it journals go through it, and
// mode applies to the others.
func NewCommitGroup(root string, mode SyncMode, journal *Journal) (*CommitGroup, error) {
	if int(mode) >= len(syncModeNames) {
		return nil, fmt.Errorf("braid/wal: invalid sync mode %d", uint8(mode))
	}
	g := &CommitGroup{mode: mode, journal: journal}
	if mode == SyncFS {
		f, err := os.Open(root)
		if err != nil {
			return nil, fmt.Errorf("braid/wal: commit group: %w", err)
		}
		g.root, g.dev = f, deviceOf(f)
	}
	return g, nil
}

// Close lets go of the group's directory. Rounds must not start after it.
func (g *CommitGroup) Close() error {
	if g.root == nil {
		return nil
	}
	return g.root.Close()
}

// Mode returns how the group's rounds sync.
func (g *CommitGroup) Mode() SyncMode { return g.mode }

// CommitGroupCounts are what a CommitGroup did: its rounds and the log
// commits they covered.
type CommitGroupCounts struct{ Rounds, Commits uint64 }

// Counts returns the rounds run and the commits they covered.
func (g *CommitGroup) Counts() CommitGroupCounts {
	return CommitGroupCounts{Rounds: g.rounds.Load(), Commits: g.commits.Load()}
}

// A Round is one sync of a CommitGroup. Its writer adds commits to it
// (Log.StartCommitIn), then calls Start once, then waits for each commit
// (PendingCommit.Wait). A Round is used by one goroutine.
type Round struct {
	g *CommitGroup
	// journal holds the journal entries of the round's journaled logs
	// (entries of them), and jerr the journal write's outcome.
	journal []byte
	jlogs   []*Log
	entries int
	jerr    error
	// shared are the files the group's syncfs covers; alone the others,
	// synced one by one. errs holds each alone file's outcome.
	shared  []File
	alone   []File
	errs    []error
	err     error // the syncfs's outcome
	done    chan struct{}
	started bool
}

// NewRound starts collecting a round.
func (g *CommitGroup) NewRound() *Round {
	r := &Round{g: g, done: make(chan struct{})}
	if b, ok := g.journalBufs.Get().(*[]byte); ok {
		r.journal = (*b)[:0]
	}
	return r
}

// keepJournalBuf gives the journal buffer of a finished round to the next
// ones, unless it grew past maxKeptBatchBytes.
func (g *CommitGroup) keepJournalBuf(b []byte) {
	if cap(b) == 0 || cap(b) > maxKeptBatchBytes {
		return
	}
	g.journalBufs.Put(&b)
}

// Len returns the number of commits added so far.
func (r *Round) Len() int { return len(r.shared) + len(r.alone) + len(r.jlogs) }

// addJournaled puts the journal entries of l (count of them) in the round
// and returns the wait for them to be durable.
func (r *Round) addJournaled(l *Log, entries []byte, count int) func() error {
	if r.started {
		panic("braid/wal: commit added to a round already started")
	}
	r.journal = append(r.journal, entries...)
	r.jlogs = append(r.jlogs, l)
	r.entries += count
	return func() error {
		<-r.done
		return r.jerr
	}
}

// add puts f in the round and returns the wait for it to be durable. The
// caller keeps f open until the wait has returned.
func (r *Round) add(f File) func() error {
	if r.started {
		panic("braid/wal: commit added to a round already started")
	}
	if d, ok := f.(deviceFile); ok && r.g.mode == SyncFS && r.g.dev != 0 && d.device() == r.g.dev {
		r.shared = append(r.shared, f)
		return func() error {
			<-r.done
			return r.err
		}
	}
	i := len(r.alone)
	r.alone = append(r.alone, f)
	return func() error {
		<-r.done
		return r.errs[i]
	}
}

// Start syncs the round's files in the background. A round with no
// commits is done at once.
func (r *Round) Start() {
	if r.started {
		panic("braid/wal: round started twice")
	}
	r.started = true
	r.errs = make([]error, len(r.alone))
	n := r.Len()
	if n == 0 {
		close(r.done)
		return
	}
	r.g.rounds.Add(1)
	r.g.commits.Add(uint64(n))
	go r.run()
}

func (r *Round) run() {
	defer close(r.done)
	if len(r.jlogs) > 0 {
		r.jerr = r.g.journal.writeRound(r.journal, r.entries, r.jlogs)
	}
	// The journal's write is done with the entries (and addJournaled
	// cannot run after Start).
	r.g.keepJournalBuf(r.journal)
	r.journal = nil
	alone := r.alone
	switch len(r.shared) {
	case 0:
	case 1:
		// One file: its fdatasync flushes no more than a syncfs would.
		alone = append(alone[:len(alone):len(alone)], r.shared[0])
	default:
		ioSyncs.Add(1)
		r.err = syncFS(r.g.root)
	}
	ioSyncs.Add(uint64(len(alone)))
	for i, wait := range startSyncs(alone) {
		if err := wait(); i < len(r.alone) {
			r.errs[i] = err
		} else {
			r.err = err
		}
	}
}

// deviceFile is a file that knows its file system's device (0 when
// unknown): the operating system's, directly or through a FileCache.
type deviceFile interface{ device() uint64 }

// startSyncs starts a Sync of each file, those of OSFS together (one
// io_uring submission on Linux), and returns the waits for them.
func startSyncs(files []File) []func() error {
	waits := make([]func() error, len(files))
	var osFiles []*os.File
	var at []int
	for i, f := range files {
		if of, ok := f.(osFile); ok {
			osFiles = append(osFiles, of.File)
			at = append(at, i)
			continue
		}
		waits[i] = startSync(f)
	}
	for k, wait := range startFsyncs(osFiles) {
		waits[at[k]] = wait
	}
	return waits
}
