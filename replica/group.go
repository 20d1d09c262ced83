package replica

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log"
	"sync"
	"sync/atomic"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/braidmq/braid/wal"
)

// Config configures one replica of a group.
type Config struct {
	// ID is this replica's raft id, one of the group's voters.
	ID uint64
	// Storage is the replica's storage (OpenStorage).
	Storage *Storage
	// ElectionTick and HeartbeatTick are in ticks (Group.Tick); 10 and 1
	// if 0.
	ElectionTick, HeartbeatTick int
	// Send carries messages to the other replicas. It is called from the
	// group's goroutines and must not block for long; a message it cannot
	// deliver is dropped (raft sends again).
	Send func(msgs []*pb.Message)
	// OnCommitted hears of every move of the committed frontier: the offset
	// after the last committed record (what readers of this replica may
	// see). Called from the group's goroutine.
	OnCommitted func(next uint64)
	// Logger is raft's logger; none if nil.
	Logger raft.Logger
}

// Group drives one replica of a raft group: etcd raft's RawNode with
// AsyncStorageWrites, an append goroutine that writes the log, commits
// it and only then lets raft's responses out, and the committed frontier.
// Ticks, messages and proposals are queued to the group's goroutine.
type Group struct {
	cfg      Config
	rn       *raft.RawNode
	inbox    chan func()
	appendQ  chan *pb.Message
	stop     chan struct{}
	done     sync.WaitGroup
	stopOnce sync.Once

	// Read by any goroutine.
	committed atomic.Uint64 // the offset after the last committed record
	commitIdx atomic.Uint64 // the last committed raft index
	leader    atomic.Uint64
	term      atomic.Uint64
	failed    atomic.Pointer[error]
	dropped   atomic.Uint64

	// Owned by the group's goroutine.
	unindexed []*Proposal          // proposed since the last Ready, in order
	byIndex   map[uint64]*Proposal // appended, by raft index
}

// Proposal is a batch of records proposed to a group: answered once it is
// committed (durable on a majority) or lost.
type Proposal struct {
	data []byte
	id   wal.EntryID // the entry raft appended it as
	done chan struct{}
	// First and Next are the offsets of its records, once done without Err.
	First, Next uint64
	Err         error
}

// Wait blocks until the proposal is committed or lost.
func (p *Proposal) Wait() error {
	<-p.done
	return p.Err
}

// Done is closed when the proposal is answered.
func (p *Proposal) Done() <-chan struct{} { return p.done }

// ErrLost answers a proposal whose entry was replaced by another leader's
// before it was committed: its records were not stored.
var ErrLost = errors.New("braid/replica: the proposal was lost to a change of leader")

// ErrStopped answers what a stopped group did not finish.
var ErrStopped = errors.New("braid/replica: the group stopped")

var discardLogger = &raft.DefaultLogger{Logger: log.New(io.Discard, "", 0)}

// Start starts a replica of a group over cfg.Storage.
func Start(cfg Config) (*Group, error) {
	if cfg.ElectionTick == 0 {
		cfg.ElectionTick = 10
	}
	if cfg.HeartbeatTick == 0 {
		cfg.HeartbeatTick = 1
	}
	if cfg.Logger == nil {
		cfg.Logger = discardLogger
	}
	hs, _, _ := cfg.Storage.InitialState()
	rn, err := raft.NewRawNode(&raft.Config{
		ID:              cfg.ID,
		ElectionTick:    cfg.ElectionTick,
		HeartbeatTick:   cfg.HeartbeatTick,
		Storage:         cfg.Storage,
		Applied:         hs.GetCommit(),
		MaxSizePerMsg:   1 << 20,
		MaxInflightMsgs: 256,
		// A follower answers a proposal itself (the caller goes to the
		// leader): it knows what became of it.
		DisableProposalForwarding: true,
		CheckQuorum:               true,
		PreVote:                   true,
		AsyncStorageWrites:        true,
		Logger:                    cfg.Logger,
	})
	if err != nil {
		return nil, fmt.Errorf("braid/replica: starting replica %d: %w", cfg.ID, err)
	}
	g := &Group{
		cfg:     cfg,
		rn:      rn,
		inbox:   make(chan func(), 1024),
		appendQ: make(chan *pb.Message, 1024),
		stop:    make(chan struct{}),
		byIndex: map[uint64]*Proposal{},
	}
	g.commitIdx.Store(hs.GetCommit())
	g.committed.Store(cfg.Storage.Offsets(hs.GetCommit()))
	g.done.Add(2)
	go g.run()
	go g.appendLoop()
	return g, nil
}

// Committed returns the offset after the last committed record this
// replica holds: readers of it may see [first, Committed()).
func (g *Group) Committed() uint64 { return g.committed.Load() }

// Status returns the leader this replica knows (0 if none), its term and
// its commit index.
func (g *Group) Status() (leader, term, commit uint64) {
	return g.leader.Load(), g.term.Load(), g.commitIdx.Load()
}

// Err returns why the group failed (its log or state file could not be
// written), or nil.
func (g *Group) Err() error {
	if p := g.failed.Load(); p != nil {
		return *p
	}
	return nil
}

// Tick advances the group's clock by one tick.
func (g *Group) Tick() { g.post(func() { g.rn.Tick() }) }

// Campaign makes this replica stand for election at once.
func (g *Group) Campaign() { g.post(func() { _ = g.rn.Campaign() }) }

// Step hands the group a message from another replica. It never blocks:
// when the group's queue is full the message is dropped and counted
// (Dropped), as a network would lose it; raft sends again.
func (g *Group) Step(m *pb.Message) {
	f := func() {
		if err := g.rn.Step(m); err != nil && !errors.Is(err, raft.ErrStepPeerNotFound) {
			g.cfg.Logger.Warningf("replica %d: step %s from %d: %v", g.cfg.ID, m.GetType(), m.GetFrom(), err)
		}
	}
	select {
	case g.inbox <- f:
	default:
		g.dropped.Add(1)
	}
}

// Dropped returns how many messages Step dropped because the group's
// queue was full.
func (g *Group) Dropped() uint64 { return g.dropped.Load() }

// Propose proposes recs (at least one) as one entry. The proposal is
// answered once they are committed, with their offsets, or with an error
// if this replica is not the leader or the entry is lost.
func (g *Group) Propose(recs []wal.Record) *Proposal {
	p := &Proposal{data: wal.EncodeEntryData(nil, recs), done: make(chan struct{})}
	if len(recs) == 0 {
		p.finish(fmt.Errorf("braid/replica: a proposal of no record"))
		return p
	}
	if !g.post(func() {
		if err := g.rn.Propose(p.data); err != nil {
			p.finish(fmt.Errorf("braid/replica: replica %d (leader %d): %w", g.cfg.ID, g.leader.Load(), err))
			return
		}
		p.id.Term = g.rn.BasicStatus().GetTerm()
		g.unindexed = append(g.unindexed, p)
	}) {
		p.finish(ErrStopped)
	}
	return p
}

func (p *Proposal) finish(err error) {
	p.Err = err
	close(p.done)
}

// post queues f to the group's goroutine; false if the group stopped.
func (g *Group) post(f func()) bool {
	select {
	case g.inbox <- f:
		return true
	case <-g.stop:
		return false
	}
}

// Stop stops the group; proposals not answered fail with ErrStopped.
func (g *Group) Stop() {
	g.stopOnce.Do(func() { close(g.stop) })
	g.done.Wait()
}

func (g *Group) run() {
	defer g.done.Done()
	defer func() {
		for _, p := range g.unindexed {
			p.finish(ErrStopped)
		}
		for _, p := range g.byIndex {
			p.finish(ErrStopped)
		}
	}()
	for {
		select {
		case f := <-g.inbox:
			f()
			// Take what else is queued before the Ready: one Ready, one
			// append and one send for all of it.
			for more := true; more; {
				select {
				case f := <-g.inbox:
					f()
				default:
					more = false
				}
			}
		case <-g.stop:
			return
		}
		for g.rn.HasReady() {
			if !g.handleReady(g.rn.Ready()) {
				return
			}
		}
		// A proposal raft took is in the Ready after it; one that is not
		// was cut by a message taken in the same turn.
		for _, p := range g.unindexed {
			p.finish(ErrLost)
		}
		g.unindexed = g.unindexed[:0]
	}
}

// handleReady sends what may go at once, queues the local append and
// applies what is committed. With AsyncStorageWrites, Ready needs no
// Advance.
func (g *Group) handleReady(rd raft.Ready) bool {
	if rd.SoftState != nil {
		g.leader.Store(rd.SoftState.Lead)
	}
	if rd.HardState != nil && rd.HardState.GetTerm() > 0 {
		g.term.Store(rd.HardState.GetTerm())
	}
	var out []*pb.Message
	for _, m := range rd.Messages {
		switch m.GetTo() {
		case raft.LocalAppendThread:
			g.noteIndexes(m.Entries)
			select {
			case g.appendQ <- m:
			case <-g.stop:
				return false
			}
		case raft.LocalApplyThread:
			g.apply(m.Entries)
			for _, r := range m.GetResponses() {
				_ = g.rn.Step(r)
			}
		default:
			out = append(out, m)
		}
	}
	if len(out) > 0 {
		g.cfg.Send(out)
	}
	return true
}

// noteIndexes gives this replica's own proposals their entries as raft
// appends them (raft copies the data, so they are matched by term and
// content, in order); a proposal whose index another entry takes was
// lost.
func (g *Group) noteIndexes(ents []*pb.Entry) {
	for _, e := range ents {
		if old, ok := g.byIndex[e.GetIndex()]; ok {
			delete(g.byIndex, e.GetIndex())
			old.finish(ErrLost)
		}
		if len(g.unindexed) == 0 || len(e.Data) == 0 {
			continue
		}
		if p := g.unindexed[0]; p.id.Term == e.GetTerm() && bytes.Equal(p.data, e.Data) {
			g.unindexed = g.unindexed[1:]
			p.id.Index = e.GetIndex()
			g.byIndex[p.id.Index] = p
		}
	}
}

// apply moves the committed frontier over ents and answers the proposals
// among them: committed if their entry is, lost if another entry was
// committed at their index.
func (g *Group) apply(ents []*pb.Entry) {
	if len(ents) == 0 {
		return
	}
	last := ents[len(ents)-1].GetIndex()
	for _, e := range ents {
		p, ok := g.byIndex[e.GetIndex()]
		if !ok {
			continue
		}
		delete(g.byIndex, e.GetIndex())
		if p.id.Term != e.GetTerm() {
			p.finish(ErrLost)
			continue
		}
		first, count, _ := g.cfg.Storage.EntryAt(e.GetIndex())
		p.First, p.Next = first, first+count
		p.finish(nil)
	}
	g.commitIdx.Store(last)
	next := g.cfg.Storage.Offsets(last)
	if next != g.committed.Swap(next) && g.cfg.OnCommitted != nil {
		g.cfg.OnCommitted(next)
	}
}

// appendLoop writes what raft asks to store, in order: the entries and the
// hard state of every queued MsgStorageAppend, then one commit of the log
// for them all; only then are their responses let out.
func (g *Group) appendLoop() {
	defer g.done.Done()
	for {
		var batch []*pb.Message
		select {
		case m := <-g.appendQ:
			batch = append(batch, m)
		case <-g.stop:
			return
		}
		for more := true; more; {
			select {
			case m := <-g.appendQ:
				batch = append(batch, m)
			default:
				more = false
			}
		}
		if err := g.store(batch); err != nil {
			g.failed.Store(&err)
			g.cfg.Logger.Errorf("replica %d: %v", g.cfg.ID, err)
			g.stopOnce.Do(func() { close(g.stop) })
			return
		}
		var self, peers []*pb.Message
		for _, m := range batch {
			for _, r := range m.GetResponses() {
				if r.GetTo() == g.cfg.ID {
					self = append(self, r)
				} else {
					peers = append(peers, r)
				}
			}
		}
		if len(peers) > 0 {
			g.cfg.Send(peers)
		}
		if len(self) > 0 && !g.post(func() {
			for _, r := range self {
				_ = g.rn.Step(r)
			}
		}) {
			return
		}
	}
}

func (g *Group) store(batch []*pb.Message) error {
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
	return st.Commit()
}
