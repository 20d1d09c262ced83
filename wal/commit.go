package wal

import (
	"fmt"
)

// Write writes recs as one batch, as Append does, without waiting for them
// to be durable. Under DurabilityAlways they become durable, and visible to
// Read and NextOffset, with the next Commit (or Sync, Close, a roll to a
// new file or a truncation); under the other modes Write is Append.
//
// Write and Commit let one writer overlap the fsync of a batch with the
// writing of the next: it writes, hands the Commit to another goroutine,
// and writes again while the fsync runs.
func (l *Log) Write(recs ...Record) (first uint64, err error) {
	return appendBodies(l, recordBodies(recs), plainFrame, false)
}

// Commit makes every record written before it durable and visible, and
// returns the offset after the last of them. Under DurabilityAlways it
// fsyncs without holding up Write meanwhile; commits run one after the
// other, and one that finds nothing new to sync waits for the pass in
// flight. Under the other modes it returns NextOffset at once. A failed
// fsync fails the log (see ErrFailed). It is StartCommit, then Wait.
func (l *Log) Commit() (next uint64, err error) { return l.StartCommit().Wait() }

// PendingCommit is a commit whose fsync is under way (StartCommit). Wait
// must be called, once, by the goroutine that started it; until then the
// log's next fsync pass, roll, truncation and Close wait for it, while
// Write and reads go on.
type PendingCommit struct {
	l      *Log
	err    error // set when the commit failed or had nothing to do
	next   uint64
	done   bool // the result is known without a pass
	job    syncJob
	wait   func() error // the tail file's fsync; nil when the job has no file
	target frameIndex
	file   File
}

// StartCommit begins a Commit: it submits the fsync of what was written
// before it (through io_uring on Linux) and returns without waiting, so
// that the caller can do other work, acknowledge the previous batch say,
// while the disk works.
func (l *Log) StartCommit() *PendingCommit { return l.startCommit(nil) }

// StartCommitIn begins a Commit whose fsync is part of round r (see
// CommitGroup): it adds the log's tail file to r, and the fsync starts
// with r.Start. Wait must be called after r.Start. A log with nothing to
// sync adds nothing.
func (l *Log) StartCommitIn(r *Round) *PendingCommit { return l.startCommit(r) }

func (l *Log) startCommit(round *Round) *PendingCommit {
	l.writeMu.Lock()
	if err := l.writableLocked(); err != nil {
		l.writeMu.Unlock()
		return &PendingCommit{err: err, done: true}
	}
	if l.opts.Durability != DurabilityAlways {
		next := l.view.next
		l.writeMu.Unlock()
		return &PendingCommit{next: next, done: true}
	}
	if round != nil && l.journaled != nil && l.journaled.journal == round.g.journal && !l.journaled.direct {
		return l.startJournaledCommitLocked(round)
	}
	// What the fsync will cover: a prefix of the tail's frames, which
	// later writes only append to.
	p := &PendingCommit{l: l, target: l.tail.index(), file: l.tail.file}
	p.job = l.prepareSyncLocked()
	// syncMu, taken before writeMu is released, keeps the descriptor open
	// until Wait, and makes a pass that comes next wait for this one.
	l.syncMu.Lock()
	l.writeMu.Unlock()
	if l.syncErr == nil && p.job.file != nil {
		if round != nil {
			p.wait = round.add(p.job.file) // counted by the round
		} else {
			ioSyncs.Add(1)
			p.wait = startSync(p.job.file)
		}
	}
	return p
}

// Wait waits for the fsync and returns what Commit returns.
func (p *PendingCommit) Wait() (next uint64, err error) {
	if p.done {
		return p.next, p.err
	}
	l := p.l
	err = l.finishSyncHeld(p.job, p.wait)
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	if err != nil {
		return 0, l.failLocked(err)
	}
	// A roll or a truncation since has published (or cut) the target
	// already: the view only moves forward here, and only in the same file.
	if l.tail.file == p.file && p.target.next > l.view.next {
		l.mu.Lock()
		l.view.tail = p.target
		l.view.next = p.target.next
		l.mu.Unlock()
	}
	return p.target.next, nil
}

// commitWrittenLocked syncs and publishes what Write left unpublished, so
// that a truncation works on what readers see. The caller holds writeMu.
func (l *Log) commitWrittenLocked() error {
	if l.opts.Durability != DurabilityAlways || l.tail.next == l.view.next {
		return nil
	}
	if err := l.syncLocked(); err != nil {
		return fmt.Errorf("braid/wal: commit before truncating: %w", err)
	}
	l.publishTailLocked()
	return nil
}

// WrittenOffset returns the offset after the last record written, durable
// or not (NextOffset counts only durable ones under DurabilityAlways).
func (l *Log) WrittenOffset() uint64 {
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	return l.tail.next
}
