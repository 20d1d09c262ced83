package wal

import (
	"sync"
	"sync/atomic"
)

// SharedSync makes the commits of many logs durable together
// (Options.SharedSync). A node with many logs written at once, a few
// records each (load spread over many topics), would otherwise pay one
// fdatasync per log per commit: each flushes the device's cache on its
// own, and group commit, which needs many records in one log, finds none
// to group. Through a SharedSync the commits that are waiting when a round
// starts are made durable by that round: one fdatasync when it holds one
// log, one syncfs (every dirty file of the file system, with one cache
// flush) when it holds more. Commits that arrive during a round go into
// the next, which starts as soon as it ends. On this project's machine
// (`go run ./benchmarks/syncfs -dir /work`, 9 alternating rounds), parallel
// fdatasyncs took 1.97x [0.01x, 2.69x] (median [min, max]) the time of one
// syncfs over 4 dirty files, 3.31x [2.70x, 4.78x] over 64 and 8.37x
// [6.39x, 11.22x] over 500.
//
// A failed round fails every commit in it (the failure of a syncfs is the
// file system's, not one file's): their logs fail (ErrFailed), as after a
// failed fdatasync. Only files of OSFS share rounds; others sync alone.
type SharedSync struct {
	mu      sync.Mutex
	running bool
	next    *syncRound // the commits waiting for the next round
	rounds  atomic.Uint64
	files   atomic.Uint64
}

// syncRound is one round: the files it covers, and its outcome once done
// is closed.
type syncRound struct {
	files []osFile
	done  chan struct{}
	err   error
}

// NewSharedSync returns a SharedSync with no round running.
func NewSharedSync() *SharedSync { return &SharedSync{} }

// SharedSyncCounts are what a SharedSync did: its rounds and the log
// commits they covered.
type SharedSyncCounts struct{ Rounds, Commits uint64 }

// Counts returns the rounds run and the commits they covered.
func (s *SharedSync) Counts() SharedSyncCounts {
	return SharedSyncCounts{Rounds: s.rounds.Load(), Commits: s.files.Load()}
}

// start returns the wait for what was written to f before the call to be
// durable. The caller keeps f open until the wait has returned.
func (s *SharedSync) start(f File) func() error {
	of, ok := f.(osFile)
	if !ok {
		return startSync(f)
	}
	s.mu.Lock()
	r := s.next
	if r == nil {
		r = &syncRound{done: make(chan struct{})}
		s.next = r
	}
	r.files = append(r.files, of)
	if !s.running {
		s.running = true
		go s.run()
	}
	s.mu.Unlock()
	return func() error {
		<-r.done
		return r.err
	}
}

// run runs rounds while commits wait for one.
func (s *SharedSync) run() {
	for {
		s.mu.Lock()
		r := s.next
		s.next = nil
		if r == nil {
			s.running = false
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		s.rounds.Add(1)
		s.files.Add(uint64(len(r.files)))
		if len(r.files) == 1 {
			r.err = fsyncFile(r.files[0].File)
		} else {
			r.err = syncFiles(r.files)
		}
		close(r.done)
	}
}
