package replica

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/braidmq/braid/wal"
)

// The appends raft asks groups to store are made durable in rounds, one
// at a time: the host takes every group with appends waiting, writes each
// one's entries and hard state to its log and state journal (from up to
// AppendWorkers goroutines: without a journal, state files are written
// durably one by one, and wait for the disk together), then commits all
// their logs at once
// — in one round of the node's wal.CommitGroup when it has one
// (SetCommits: one write and one fdatasync of the node's journal for the
// logs it journals, the others' fdatasyncs submitted together), else each
// log's own fdatasync, all submitted before any is waited for — and only
// then lets each group's responses out; the state journal's one write and
// sync runs beside the commit. What groups ask meanwhile is the
// next round. So a node pays about one sync a round for all its raft logs,
// leaders' and followers' alike, however many groups write at once.

// SetCommits makes the host's rounds commit through g (nil: each log
// syncs its own file). The node's commit group, shared with its other
// logs' rounds, once it has one.
func (h *Host) SetCommits(g *wal.CommitGroup) { h.commits.Store(g) }

// takeAll waits for groups and returns all that are queued.
func (s *scheduler) takeAll(into []*Group) ([]*Group, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.queue) == 0 && !s.closed {
		s.cond.Wait()
	}
	if s.closed {
		return into, false
	}
	into = append(into, s.queue...)
	clear(s.queue)
	s.queue = s.queue[:0]
	return into, true
}

// appendRounds runs the rounds until the host stops.
func (h *Host) appendRounds() {
	defer h.done.Done()
	var groups []*Group
	var work []roundWork
	for {
		var ok bool
		groups, ok = h.appends.takeAll(groups[:0])
		if !ok {
			return
		}
		work = work[:0]
		for _, g := range groups {
			if batch := g.takeAppends(); batch != nil {
				work = append(work, roundWork{g: g, batch: batch})
			}
		}
		clear(groups)
		if len(work) > 0 {
			h.appendRound(work)
			clear(work)
		}
	}
}

// roundWork is one group's part of a round.
type roundWork struct {
	g       *Group
	batch   []*pb.Message
	err     error
	pending *wal.PendingCommit
}

// appendRound stores, commits and answers the batches of work.
func (h *Host) appendRound(work []roundWork) {
	h.counters.AppendRounds.Add(1)
	// Write: every group's entries and hard state.
	writers := min(h.cfg.AppendWorkers, len(work))
	if writers <= 1 {
		for i := range work {
			work[i].err = work[i].g.write(work[i].batch)
		}
	} else {
		var next atomic.Int64
		var wg sync.WaitGroup
		for range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := int(next.Add(1) - 1); i < len(work); i = int(next.Add(1) - 1) {
					work[i].err = work[i].g.write(work[i].batch)
				}
			}()
		}
		wg.Wait()
	}
	// The state journal's sync (the groups' hard states and marks written
	// above) runs beside the logs' commit.
	var stateErr error
	var stateDone chan struct{}
	if j := h.cfg.StateJournal; j != nil {
		stateDone = make(chan struct{})
		go func() {
			defer close(stateDone)
			stateErr = j.Sync()
		}()
	}
	// Commit: all the logs written, in one round or their syncs submitted
	// together, then waited for.
	var round *wal.Round
	if c := h.commits.Load(); c != nil {
		round = c.NewRound()
	}
	for i := range work {
		if w := &work[i]; w.err == nil {
			log := w.g.cfg.Storage.Log()
			if round != nil {
				w.pending = log.StartCommitIn(round)
			} else {
				w.pending = log.StartCommit()
			}
		}
	}
	if round != nil {
		round.Start()
	}
	for i := range work {
		if w := &work[i]; w.pending != nil {
			_, w.err = w.pending.Wait()
			w.pending = nil
		}
	}
	if stateDone != nil {
		<-stateDone
		for i := range work {
			if stateErr != nil && work[i].err == nil {
				work[i].err = stateErr
			}
		}
	}
	// Answer: each group's responses out, and on to its next batch.
	for i := range work {
		w := &work[i]
		if w.err != nil {
			w.g.failAppends(w.err)
		} else {
			w.g.stored(w.batch)
		}
		w.g.nextAppends(h)
	}
	h.flush()
}

// takeAppends takes the group's queued appends for a round; with none
// (or the group stopped or failed) it ends the group's turn and returns
// nil.
func (g *Group) takeAppends() []*pb.Message {
	g.mu.Lock()
	defer g.mu.Unlock()
	batch := g.appendQ
	g.appendQ = nil
	if len(batch) == 0 || g.stopped || g.failed.Load() != nil {
		g.appendScheduled = false
		g.running.Done()
		return nil
	}
	return batch
}

// nextAppends queues the group for the next round when appends came
// while this one ran, else ends its turn.
func (g *Group) nextAppends(h *Host) {
	g.mu.Lock()
	more := len(g.appendQ) > 0 && !g.stopped && g.failed.Load() == nil
	if !more {
		g.appendScheduled = false
	}
	g.mu.Unlock()
	if more {
		h.appends.add(g)
	} else {
		g.running.Done()
	}
}

// failAppends records that the group's storage failed: it stops storing.
func (g *Group) failAppends(err error) {
	err = fmt.Errorf("replica %d of %s: %w", g.cfg.ID, g.cfg.Group, err)
	if g.failed.CompareAndSwap(nil, &err) {
		g.host.counters.Failed.Add(1)
		g.failOpen(err)
		g.reportFailed()
	}
	g.host.cfg.Logger.Errorf("braid/replica: %v", err)
}

// reportFailed tells Config.OnFailed, once, that the replica failed.
func (g *Group) reportFailed() {
	if f := g.cfg.OnFailed; f != nil && g.failReported.CompareAndSwap(false, true) {
		err := errors.New("failed")
		if e := g.failed.Load(); e != nil {
			err = *e
		}
		f(err)
	}
}

// write writes what raft asked to store, in order: the entries and the
// hard state of every queued MsgStorageAppend; the log's commit is the
// round's.
func (g *Group) write(batch []*pb.Message) error {
	st := g.cfg.Storage
	for _, m := range batch {
		if m.Snapshot != nil && m.Snapshot.GetMetadata().GetIndex() > 0 {
			return fmt.Errorf("a snapshot at entry %d: copying a log to a replica is not built", m.Snapshot.GetMetadata().GetIndex())
		}
		if err := st.Append(m.Entries); err != nil {
			return err
		}
		if m.Term != nil {
			if err := st.SetHardState(&pb.HardState{Term: m.Term, Vote: m.Vote, Commit: m.Commit}); err != nil {
				return err
			}
		}
	}
	return nil
}

// stored lets out the responses of a stored batch: to peers, and to this
// replica's own raft.
func (g *Group) stored(batch []*pb.Message) {
	var self []*pb.Message
	for _, m := range batch {
		for _, r := range m.GetResponses() {
			if r.GetTo() == g.cfg.ID {
				self = append(self, r)
			} else {
				g.sendTo(r)
			}
		}
	}
	if len(self) > 0 {
		g.post(false, func() {
			for _, r := range self {
				_ = g.rn.Step(r)
			}
		})
	}
}
