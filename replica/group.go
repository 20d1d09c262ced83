package replica

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/braidmq/braid/wal"
)

// Config configures one replica of a group.
type Config struct {
	// Group names the group, the same on every replica.
	Group string
	// ID is this replica's raft id; Peers names the node of every replica
	// by its raft id, this one's included.
	ID    uint64
	Peers map[uint64]Peer
	// Storage is the replica's storage (OpenStorage).
	Storage *Storage
	// ElectionTick and HeartbeatTick are in the host's ticks; 10 and 1 if
	// 0.
	ElectionTick, HeartbeatTick int
	// OnCommitted hears of every move of the committed frontier: the offset
	// after the last committed record, what readers of this replica see
	// (the group sets it as its log's read limit). Called from a host
	// worker.
	OnCommitted func(next uint64)
	// OnSealed hears, once, that the group's seal is committed (this
	// replica's proposal or another's). Called from a host worker.
	OnSealed func()
	// OnFailed hears, once, that the replica failed (its log or state
	// could not be written, or raft stopped on an entry its log could not
	// give): its copy cannot be trusted and must be made again from its
	// peers. Called from a host worker or the group's writer.
	OnFailed func(error)
	// FirstLeader is the replica meant to lead a new group first (0: any).
	// Until it knows a leader, another replica whose log is empty runs no
	// election timer: it votes, and campaigns only when asked (Lead).
	// Many groups starting at once then elect their first leaders without
	// their followers' campaigns competing (each one a durable write on
	// every replica), which under load kept thousands from ever electing.
	FirstLeader uint64
}

// Group is one replica of a raft group on a host: etcd raft's RawNode with
// AsyncStorageWrites, whose appends are written, committed, and only then
// answered; and the committed frontier. Everything it does runs on the
// host's workers, one at a time per group.
type Group struct {
	cfg  Config
	host *Host
	rn   *raft.RawNode // used by the worker that runs the group

	mu              sync.Mutex
	inbox           []func()
	scheduled       bool
	appendQ         []*pb.Message
	appendScheduled bool
	stopped         bool
	broken          bool                   // raft failed (recoverRaft): the group takes no more work
	open            map[*Proposal]struct{} // proposals not answered yet
	quiesced        bool
	idleTicks       int
	// running counts the runs of the group under way or queued, for Stop.
	running sync.WaitGroup

	// Read by any goroutine.
	committed atomic.Uint64 // the offset after the last committed record
	commitIdx atomic.Uint64 // the last committed raft index
	sealIdx   atomic.Uint64 // the index of the seal entry, once committed
	leader    atomic.Uint64
	term      atomic.Uint64
	// awaitsLeader holds while the replica waits for its group's first
	// leader (Config.FirstLeader): it does not tick.
	awaitsLeader atomic.Bool
	// leadAsked is when Lead last asked raft for the lead (unix ns).
	leadAsked atomic.Int64
	failed    atomic.Pointer[error]
	// failReported holds once OnFailed was told.
	failReported atomic.Bool

	// Owned by the worker that runs the group.
	checkQuiet   bool                 // a tick ran: see whether the group may go quiet
	campaignedAt time.Time            // when Lead last began a campaign
	campaignWait int                  // ticks Lead lets a campaign under way run
	notice       *Quiet               // a leader's notice to go quiet, to check
	unindexed    []*Proposal          // proposed since the last Ready, in order
	byIndex      map[uint64]*Proposal // appended, by raft index
	topIndex     uint64               // the highest index a proposal was given
}

// Proposal is a batch of records proposed to a group: answered once it is
// committed (durable on a majority) or lost.
type Proposal struct {
	once sync.Once
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

func (p *Proposal) finish(err error) {
	p.once.Do(func() {
		p.Err = err
		close(p.done)
	})
}

// finish answers p and forgets it.
func (g *Group) finish(p *Proposal, err error) {
	g.mu.Lock()
	delete(g.open, p)
	g.mu.Unlock()
	p.finish(err)
}

// ErrLost answers a proposal whose entry was replaced by another leader's
// before it was committed: its records were not stored.
var ErrLost = errors.New("braid/replica: the proposal was lost to a change of leader")

// ErrStopped answers what a stopped group did not finish.
var ErrStopped = errors.New("braid/replica: the group stopped")

// Start starts a replica of a group on the host.
func (h *Host) Start(cfg Config) (*Group, error) {
	if cfg.ElectionTick == 0 {
		cfg.ElectionTick = 10
	}
	if cfg.HeartbeatTick == 0 {
		cfg.HeartbeatTick = 1
	}
	if _, ok := cfg.Peers[cfg.ID]; !ok {
		return nil, fmt.Errorf("braid/replica: group %s: replica %d is not among its peers", cfg.Group, cfg.ID)
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
		CheckQuorum:     true,
		PreVote:         true,
		// A follower answers a proposal itself (the caller goes to the
		// leader): it knows what became of it.
		DisableProposalForwarding: true,
		AsyncStorageWrites:        true,
		Logger:                    h.cfg.Logger,
	})
	if err != nil {
		return nil, fmt.Errorf("braid/replica: starting replica %d of %s: %w", cfg.ID, cfg.Group, err)
	}
	g := &Group{cfg: cfg, host: h, rn: rn, byIndex: map[uint64]*Proposal{}, open: map[*Proposal]struct{}{}}
	g.commitIdx.Store(hs.GetCommit())
	if last, err := cfg.Storage.LastIndex(); err == nil && last == 0 && cfg.FirstLeader != 0 && cfg.FirstLeader != cfg.ID {
		g.awaitsLeader.Store(true)
	}
	commit := hs.GetCommit()
	if idx := cfg.Storage.SealIndex(); idx > 0 && idx <= commit {
		g.sealIdx.Store(idx)
		commit = idx
	}
	g.committed.Store(cfg.Storage.Offsets(commit))
	// Readers of the log see what is committed, no more.
	cfg.Storage.Log().SetReadLimit(g.committed.Load())
	if err := h.add(g); err != nil {
		return nil, err
	}
	return g, nil
}

// Storage returns the replica's storage.
func (g *Group) Storage() *Storage { return g.cfg.Storage }

// ID returns this replica's raft id.
func (g *Group) ID() uint64 { return g.cfg.ID }

// Committed returns the offset after the last committed record this
// replica holds: readers of it may see [first, Committed()).
func (g *Group) Committed() uint64 { return g.committed.Load() }

// Status returns the leader this replica knows (0 if none), its term and
// its commit index.
func (g *Group) Status() (leader, term, commit uint64) {
	return g.leader.Load(), g.term.Load(), g.commitIdx.Load()
}

// Quiesced reports whether the group is quiet (not ticking).
func (g *Group) Quiesced() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.quiesced
}

// Err returns why the group failed (its log or state file could not be
// written), or nil.
func (g *Group) Err() error {
	if p := g.failed.Load(); p != nil {
		return *p
	}
	return nil
}

// ErrSealed answers a proposal that reached the group after its seal
// entry: its records were not stored.
var ErrSealed = errors.New("braid/replica: the group is sealed")

// Seal proposes the group's seal entry: once it is committed, the group
// takes no more records, and every replica's committed prefix ends where
// the seal is (Sealed). Proposals committed after it are answered
// ErrSealed. Only the leader can seal; sealing a sealed group is answered
// at once.
func (g *Group) Seal() *Proposal {
	p := &Proposal{data: sealData, done: make(chan struct{})}
	if _, ok := g.Sealed(); ok {
		p.finish(nil)
		return p
	}
	return g.propose(p)
}

// Lead makes this replica the group's leader if it is not: raft hands the
// leadership over (MsgTransferLeader, forwarded to the leader) once this
// replica holds the leader's log. Done is closed once this replica leads,
// or after timeout.
//
// However many callers wait, it asks raft at most once a tick, and begins
// a campaign while one is under way only after campaignRetryTicks, then
// twice as long each time, up to an election timeout:
// a campaign begun again before the last could finish only raises the
// term (a durable write on every replica) and starts over, which under
// load (many groups starting at once) kept groups from ever electing.
func (g *Group) Lead(timeout time.Duration) error { return g.LeadInstead(timeout, 0) }

// ErrLeaderAlive is returned by LeadInstead when the replica it is to
// take the lead from leads the group: it spoke since it was taken for
// down.
var ErrLeaderAlive = errors.New("braid/replica: the replica taken for down leads the group")

// LeadInstead is Lead instead of replica lost (a raft id; 0: none), which
// this node took for down: the lead is never handed over from lost, and
// if lost leads the group as this replica knows it (a message of its
// came since it was forgotten: it is not down), LeadInstead fails with
// ErrLeaderAlive. A campaign cannot take the lead from a live lost
// either: with CheckQuorum and PreVote, a follower that hears from its
// leader grants no vote.
func (g *Group) LeadInstead(timeout time.Duration, lost uint64) error {
	deadline := time.Now().Add(timeout)
	// forgot: lost was found leading and forgotten; alive: found leading
	// again after that (it spoke since).
	var forgot, alive atomic.Bool
	for {
		lead, _, _ := g.Status()
		if lead == g.cfg.ID {
			return nil
		}
		if alive.Load() {
			return fmt.Errorf("%w: replica %d of %s", ErrLeaderAlive, lost, g.cfg.Group)
		}
		if lost != 0 && !g.post(true, func() {
			if g.rn.BasicStatus().Lead != lost {
				return
			}
			if forgot.Load() {
				alive.Store(true)
				return
			}
			_ = g.rn.ForgetLeader()
			forgot.Store(true)
		}) {
			return ErrStopped
		}
		// Raft is asked once a tick at most: a leader elsewhere to hand
		// over (it ignores a transfer to the replica it is handing over
		// to already); without a leader, to begin a campaign, never while
		// one is under way.
		gap := g.host.cfg.TickInterval
		now := time.Now().UnixNano()
		last := g.leadAsked.Load()
		if now-last >= int64(gap) && g.leadAsked.CompareAndSwap(last, now) && !g.post(true, func() {
			st := g.rn.BasicStatus()
			g.awaitsLeader.Store(false)
			switch {
			case st.Lead == g.cfg.ID:
			case st.Lead == 0:
				// A campaign under way is given campaignRetryTicks to
				// finish, then twice as long each time it is begun again
				// (a new group's first one fails while its followers open
				// their replicas: it is begun again soon, not after raft's
				// own timer of 10 to 20 ticks; many groups starting at
				// once back off).
				campaigning := st.RaftState == raft.StatePreCandidate || st.RaftState == raft.StateCandidate
				switch {
				case !campaigning:
					g.campaignWait = campaignRetryTicks
				case time.Since(g.campaignedAt) < time.Duration(g.campaignWait)*g.host.cfg.TickInterval:
					return
				default:
					// Begun again: the next one waits twice as long, up to
					// an election timeout.
					g.campaignWait = min(2*g.campaignWait, g.cfg.ElectionTick)
				}
				g.host.counters.LeadAsks.Add(1)
				g.campaignedAt = time.Now()
				_ = g.rn.Campaign()
			case st.Lead == lost:
				// Never handed over by a replica taken for down: it is
				// forgotten above, and alive if it speaks again.
			default:
				g.host.counters.LeadAsks.Add(1)
				g.rn.TransferLeader(g.cfg.ID)
			}
		}) {
			return ErrStopped
		}
		if g.isStopped() {
			return ErrStopped
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("braid/replica: replica %d of %s could not take the lead (leader %d) within %v", g.cfg.ID, g.cfg.Group, lead, timeout)
		}
		// The lead moves in a few round trips: look again shortly.
		time.Sleep(20 * time.Millisecond)
	}
}

// LeadCommitted is Lead, then waits until the entries this replica held
// when it took the lead are committed (they are once an entry of its own
// term is): what it reads then is everything the group ever committed.
// It fails if the lead moves away meanwhile, or after timeout.
func (g *Group) LeadCommitted(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	if err := g.Lead(timeout); err != nil {
		return err
	}
	last, err := g.cfg.Storage.LastIndex()
	if err != nil {
		return err
	}
	for g.commitIdx.Load() < last {
		if lead, _, _ := g.Status(); lead != g.cfg.ID {
			return fmt.Errorf("braid/replica: replica %d of %s lost the lead (to %d) before its log was committed", g.cfg.ID, g.cfg.Group, lead)
		}
		if g.isStopped() {
			return ErrStopped
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("braid/replica: replica %d of %s led, but its log was not committed to index %d within %v", g.cfg.ID, g.cfg.Group, last, timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return nil
}

// isStopped says whether the group was stopped.
func (g *Group) isStopped() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.stopped
}

// campaignRetryTicks is how long Lead first lets a campaign under way run
// before it begins another, in ticks: rounds between replicas take
// milliseconds, but a loaded node (many groups starting) takes longer, so
// the wait doubles each time, up to an election timeout.
const campaignRetryTicks = 2

// Sealed returns the end of the group's records once its seal is
// committed: the offset after the last record it will ever hold.
func (g *Group) Sealed() (end uint64, ok bool) {
	if idx := g.sealIdx.Load(); idx > 0 && idx <= g.commitIdx.Load() {
		return g.committed.Load(), true
	}
	return 0, false
}

// Campaign makes this replica stand for election at once.
func (g *Group) Campaign() { g.post(true, func() { _ = g.rn.Campaign() }) }

// Step hands the group a message from another replica.
func (g *Group) Step(m *pb.Message) {
	answer := isAnswer(m)
	g.post(!answer, func() {
		if err := g.rn.Step(m); err != nil && !errors.Is(err, raft.ErrStepPeerNotFound) {
			g.host.cfg.Logger.Warningf("replica %d of %s: step %s from %d: %v", g.cfg.ID, g.cfg.Group, m.GetType(), m.GetFrom(), err)
		}
		if answer && g.rn.HasReady() {
			g.mu.Lock()
			g.quiesced = false
			g.idleTicks = 0
			g.mu.Unlock()
		}
	})
}

// isAnswer says whether m wakes a quiet replica only if it gives raft
// something to do: an answer to an append or a heartbeat. One that comes
// after its leader went quiet (a follower's answer to the last append,
// slower than the leader's idle ticks) changes nothing, and must not wake
// the group it finds quiet. Anything else wakes it at once (a heartbeat
// wakes a follower: its leader ticks).
func isAnswer(m *pb.Message) bool {
	t := m.GetType()
	return t == pb.MsgHeartbeatResp || t == pb.MsgAppResp
}

// Propose proposes recs (at least one) as one entry. The proposal is
// answered once they are committed, with their offsets, or with an error
// if this replica is not the leader or the entry is lost.
func (g *Group) Propose(recs []wal.Record) *Proposal {
	p := &Proposal{data: wal.EncodeEntryData(nil, recs), done: make(chan struct{})}
	if len(recs) == 0 {
		p.finish(fmt.Errorf("braid/replica: a proposal of no record"))
		return p
	}
	if _, ok := g.Sealed(); ok {
		p.finish(ErrSealed)
		return p
	}
	if err := g.Err(); err != nil {
		p.finish(fmt.Errorf("braid/replica: replica %d of %s failed: %w", g.cfg.ID, g.cfg.Group, err))
		return p
	}
	return g.propose(p)
}

// propose hands p's data to raft on the group's worker.
func (g *Group) propose(p *Proposal) *Proposal {
	g.mu.Lock()
	if !g.stopped {
		g.open[p] = struct{}{}
	}
	g.mu.Unlock()
	if !g.post(true, func() {
		if err := g.rn.Propose(p.data); err != nil {
			g.finish(p, fmt.Errorf("braid/replica: replica %d of %s (leader %d): %w", g.cfg.ID, g.cfg.Group, g.leader.Load(), err))
			return
		}
		p.id.Term = g.rn.BasicStatus().GetTerm()
		g.unindexed = append(g.unindexed, p)
	}) {
		p.finish(ErrStopped)
	}
	return p
}

// post queues f to the group's worker; active wakes a quiet group. False
// if the group stopped.
func (g *Group) post(active bool, f func()) bool {
	g.mu.Lock()
	if g.stopped || g.broken {
		g.mu.Unlock()
		return false
	}
	g.inbox = append(g.inbox, f)
	if active {
		g.quiesced = false
		g.idleTicks = 0
	}
	schedule := !g.scheduled
	if schedule {
		g.scheduled = true
		g.running.Add(1)
	}
	g.mu.Unlock()
	if schedule {
		g.host.sched.add(g)
	}
	return true
}

// Stop stops the replica and removes it from its host; proposals not
// answered fail with ErrStopped. The storage's log stays open (the
// caller's).
func (g *Group) Stop() {
	g.mu.Lock()
	if g.stopped {
		g.mu.Unlock()
		return
	}
	g.stopped = true
	g.mu.Unlock()
	g.host.remove(g)
	g.running.Wait()
	g.mu.Lock()
	open := g.open
	g.open = nil
	g.mu.Unlock()
	for p := range open {
		p.finish(ErrStopped)
	}
	if g.failed.Load() == nil {
		// A replica started again knows its committed prefix at once,
		// rather than serving nothing until it hears its leader (raft's
		// commit index alone is kept in memory: SetHardState).
		if err := g.cfg.Storage.NoteCommit(g.commitIdx.Load()); err != nil {
			g.host.cfg.Logger.Warningf("braid/replica: %s: recording its commit index at its stop: %v", g.cfg.Group, err)
		}
	}
}

// process runs what is queued for the group, then its Readys.
func (g *Group) process() {
	defer g.running.Done()
	defer g.recoverRaft()
	for {
		g.mu.Lock()
		fs := g.inbox
		g.inbox = nil
		if len(fs) == 0 || g.stopped {
			g.scheduled = false
			g.mu.Unlock()
			return
		}
		g.mu.Unlock()
		for _, f := range fs {
			f()
		}
		for g.rn.HasReady() {
			g.handleReady(g.rn.Ready())
		}
		// A proposal raft took is in the Ready after it; one that is not
		// was cut by a message taken in the same turn.
		for _, p := range g.unindexed {
			g.finish(p, ErrLost)
		}
		g.unindexed = g.unindexed[:0]
		if g.checkQuiet {
			g.checkQuiet = false
			g.maybeQuiesce()
		}
		if q := g.notice; q != nil {
			g.notice = nil
			g.takeNotice(*q)
		}
	}
}

// recoverRaft turns a panic of raft into the failure of this replica
// alone. Raft panics when its storage cannot give it an entry: a damaged
// frame of the log (a flipped bit, a bad sector), which it reads to send
// to a lagging follower or to apply. The replica takes no more work, says
// so (an error log, HostCounters.Failed, Err), answers its proposals, and
// the process and every other group go on; the group's other replicas
// elect a leader among themselves.
func (g *Group) recoverRaft() {
	r := recover()
	if r == nil {
		return
	}
	err := fmt.Errorf("raft stopped: %v", r)
	g.failAppends(err)
	g.leader.Store(0)
	g.mu.Lock()
	g.broken = true
	g.scheduled = false
	g.inbox = nil
	g.mu.Unlock()
	g.failOpen(err)
}

// failOpen answers every proposal not answered yet with the replica's
// failure: this replica will commit none of them (another replica may,
// if its entries reached a majority before: their outcome is unknown to
// their producers, who resend).
func (g *Group) failOpen(err error) {
	g.mu.Lock()
	open := g.open
	g.open = map[*Proposal]struct{}{}
	g.mu.Unlock()
	for p := range open {
		p.finish(fmt.Errorf("braid/replica: replica %d of %s failed: %w", g.cfg.ID, g.cfg.Group, err))
	}
}

// handleReady queues what may go at once, the local append, and applies
// what is committed. With AsyncStorageWrites, Ready needs no Advance.
func (g *Group) handleReady(rd raft.Ready) {
	if rd.SoftState != nil {
		g.leader.Store(rd.SoftState.Lead)
		if rd.SoftState.Lead != 0 {
			g.awaitsLeader.Store(false)
		}
	}
	if rd.HardState != nil && rd.HardState.GetTerm() > 0 {
		g.term.Store(rd.HardState.GetTerm())
	}
	for _, m := range rd.Messages {
		switch m.GetTo() {
		case raft.LocalAppendThread:
			g.noteIndexes(m.Entries)
			g.queueAppend(m)
		case raft.LocalApplyThread:
			g.apply(m.Entries)
			for _, r := range m.GetResponses() {
				_ = g.rn.Step(r)
			}
		default:
			g.sendTo(m)
		}
	}
}

func (g *Group) sendTo(m *pb.Message) {
	if p, ok := g.cfg.Peers[m.GetTo()]; ok {
		g.host.send(p, Envelope{Group: g.cfg.Group, Message: m})
	}
}

// noteIndexes gives this replica's own proposals their entries as raft
// appends them (raft copies the data, so they are matched by term and
// content, in order); a proposal whose index another entry takes was
// lost, and so was every proposal past it: an append cuts the log from
// its first entry (a new leader's log may end well before a deposed
// one's proposals, which would otherwise wait for entries at their
// indexes that an idle group never writes).
func (g *Group) noteIndexes(ents []*pb.Entry) {
	if len(ents) > 0 && ents[0].GetIndex() <= g.topIndex {
		cut := ents[0].GetIndex()
		for idx, p := range g.byIndex {
			if idx >= cut {
				delete(g.byIndex, idx)
				g.finish(p, ErrLost)
			}
		}
	}
	for _, e := range ents {
		if len(g.unindexed) == 0 || len(e.Data) == 0 {
			continue
		}
		if p := g.unindexed[0]; p.id.Term == e.GetTerm() && bytes.Equal(p.data, e.Data) {
			g.unindexed = g.unindexed[1:]
			p.id.Index = e.GetIndex()
			g.byIndex[p.id.Index] = p
			g.topIndex = max(g.topIndex, p.id.Index)
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
	seal := g.sealIdx.Load()
	wasSealed := seal != 0
	type outcome struct {
		p   *Proposal
		err error
	}
	var done []outcome
	for _, e := range ents {
		if seal == 0 && e.GetType() == pb.EntryNormal && isSeal(e.Data) {
			seal = e.GetIndex()
			// Known at the next start without waiting for a leader.
			if err := g.cfg.Storage.PersistCommit(seal); err != nil {
				g.host.cfg.Logger.Errorf("braid/replica: %s: recording its seal: %v", g.cfg.Group, err)
			}
		}
		p, ok := g.byIndex[e.GetIndex()]
		if !ok {
			continue
		}
		delete(g.byIndex, e.GetIndex())
		switch {
		case p.id.Term != e.GetTerm():
			done = append(done, outcome{p, ErrLost})
		case seal != 0 && e.GetIndex() > seal:
			done = append(done, outcome{p, ErrSealed})
		default:
			first, count, _ := g.cfg.Storage.EntryAt(e.GetIndex())
			p.First, p.Next = first, first+count
			done = append(done, outcome{p, nil})
		}
	}
	if seal != 0 {
		// Proposals appended after the seal (a leader cut off while the
		// others sealed the group) can never be committed as records:
		// answered now, not left waiting for an entry at their index
		// that a sealed group never commits.
		for idx, p := range g.byIndex {
			if idx > seal {
				delete(g.byIndex, idx)
				done = append(done, outcome{p, ErrSealed})
			}
		}
	}
	visible := last
	if seal != 0 {
		visible = min(last, seal)
	}
	// The frontier moves before anything is answered: a record answered
	// committed is one readers see; committed is stored before the commit
	// index, and the seal index before both, so that Sealed never pairs a
	// new commit index with an old frontier.
	next := g.cfg.Storage.Offsets(visible)
	g.cfg.Storage.Log().SetReadLimit(next)
	moved := next != g.committed.Swap(next)
	if seal != 0 {
		g.sealIdx.Store(seal)
	}
	g.commitIdx.Store(last)
	if moved && g.cfg.OnCommitted != nil {
		g.cfg.OnCommitted(next)
	}
	if seal != 0 && !wasSealed && g.cfg.OnSealed != nil {
		g.cfg.OnSealed()
	}
	for _, o := range done {
		g.finish(o.p, o.err)
	}
}

// queueAppend queues a MsgStorageAppend for the host's append workers.
func (g *Group) queueAppend(m *pb.Message) {
	g.mu.Lock()
	g.appendQ = append(g.appendQ, m)
	schedule := !g.appendScheduled
	if schedule {
		g.appendScheduled = true
		g.running.Add(1)
	}
	g.mu.Unlock()
	if schedule {
		g.host.appends.add(g)
	}
}
