package replica

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/braidmq/braid/wal"
)

// Peer names a replica's node: its id and its data directory's
// incarnation. The same id with another incarnation is another member (a
// node back with an empty directory must never vote or acknowledge as
// the replica it replaces).
type Peer struct {
	Node, Incarnation string
}

func (p Peer) String() string { return p.Node + "/" + p.Incarnation }

// Envelope is what travels between hosts: a raft message of one group, or
// a leader's notice that the group goes quiet (Quiesce: the leader's term
// and commit index, Message nil).
type Envelope struct {
	Group   string
	Message *pb.Message
	Quiesce *Quiet
}

// Quiet is a leader's notice to a follower that the group is idle: every
// replica holds everything up to Commit at Term.
type Quiet struct {
	From, Term, Commit uint64
}

// HostConfig configures a node's host of raft groups.
type HostConfig struct {
	// Self is this node.
	Self Peer
	// Send carries one batch of envelopes to a node. It is called from the
	// host's goroutines, a batch per peer per round, and must not block
	// for long: a batch it cannot deliver is dropped (raft sends again).
	Send func(to Peer, batch []Envelope)
	// TickInterval is raft's tick (100 ms if 0): ElectionTick ticks
	// without a leader start an election.
	TickInterval time.Duration
	// Ticks, when set, is the host's clock instead: a tick each time it
	// receives (tests drive it).
	Ticks <-chan time.Time
	// Workers run the groups' raft state machines (GOMAXPROCS if 0).
	Workers int
	// AppendWorkers write a round's appends to the groups' logs and state
	// files (DefaultAppendWorkers if 0; rounds.go): more than the CPUs,
	// so that state files, each written durably, wait for the disk
	// together rather than one after another.
	AppendWorkers int
	// QuiesceAfter is how many idle ticks a leader waits before it
	// quiets its group (3 if 0; -1 never).
	QuiesceAfter int
	// PeerTimeout is how long a peer node may be silent before the host
	// takes it for down (PeerDown) and wakes the groups it shares with it
	// (10 ticks if 0). Hosts send each peer a beacon (an empty batch)
	// every tick: the heartbeat of every group they share, coalesced, so
	// that quiet groups notice a lost leader.
	PeerTimeout time.Duration
	// OnUnknown, when set, hears of a message for a group this node does
	// not run (it may start it: a replica whose node restarted, or a new
	// group's follower). It runs on a goroutine of its own, once at a
	// time per group and at most once a second per group; messages that
	// come meanwhile are dropped (raft sends again).
	OnUnknown func(group string, from Peer)
	// OnPeerDown, when set, hears that a peer node was taken for down
	// (silent for PeerTimeout), with when it last sent anything.
	OnPeerDown func(node string, since time.Time)
	// Logger is raft's logger (NewLogger); if nil, raft's lines are
	// dropped.
	Logger raft.Logger
	// StateJournal, when set, takes the groups' state changes (their
	// storages opened with OpenStorageIn over it), synced in the host's
	// rounds; the host closes it.
	StateJournal *StateJournal
}

// Host runs a node's replicas of many raft groups on a few goroutines: a
// group is scheduled on a worker when it has something to do (a message,
// a proposal, a tick, its appends done), and messages to a peer node go
// out in one batch per round. Idle groups are quiet: a leader whose
// followers hold everything stops ticking and tells them to stop too; any
// message, proposal or the loss of a peer (PeerDown) wakes a group.
type Host struct {
	cfg HostConfig

	mu     sync.Mutex
	groups map[string]*Group
	// peers counts the groups that have a replica on each other node;
	// heard is when each last sent anything, down which are taken for
	// down.
	peers map[Peer]int
	heard map[string]time.Time
	down  map[string]bool
	// unknown is when OnUnknown was last called for each group it was
	// called for, and whether it runs.
	unknown map[string]unknownCall

	sched   scheduler // groups with work for the raft state machine
	appends scheduler // groups with appends to write
	// commits, when set, is the commit group the rounds of appends sync
	// through (SetCommits).
	commits atomic.Pointer[wal.CommitGroup]

	outMu sync.Mutex
	// flushMu orders flushes (flush).
	flushMu sync.Mutex
	out     map[Peer][]Envelope

	stop     chan struct{}
	stopOnce sync.Once
	done     sync.WaitGroup

	counters HostCounters
}

// HostCounters count what a host dropped and did; read with Counters.
type HostCounters struct {
	// StaleIncarnation counts batches for another incarnation of this
	// node (sent to the replica it replaced), dropped.
	StaleIncarnation atomic.Uint64
	// UnknownGroup counts messages for a group this node does not run.
	UnknownGroup atomic.Uint64
	// NotMember counts messages whose sender is not the member the group
	// knows by its raft id (an old incarnation, or another node).
	NotMember atomic.Uint64
	// Ticks counts the ticks given to groups; Quiesced the times a group
	// went quiet.
	Ticks, Quiesced atomic.Uint64
	// Batches and Messages count what Send was given.
	Batches, Messages atomic.Uint64
	// LeadAsks counts the campaigns and leadership transfers Lead asked
	// raft for.
	LeadAsks atomic.Uint64
	// AppendRounds counts the rounds of appends made durable (rounds.go).
	AppendRounds atomic.Uint64
	// Failed counts the replicas that failed: their storage could not be
	// written, or raft stopped on what it read (Group.Err says why).
	Failed atomic.Uint64
}

// NewHost starts a host.
func NewHost(cfg HostConfig) *Host {
	if cfg.TickInterval == 0 {
		cfg.TickInterval = 100 * time.Millisecond
	}
	if cfg.Workers == 0 {
		cfg.Workers = runtime.GOMAXPROCS(0)
	}
	if cfg.QuiesceAfter == 0 {
		cfg.QuiesceAfter = 3
	}
	if cfg.PeerTimeout == 0 {
		cfg.PeerTimeout = 10 * cfg.TickInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = NewLogger(nil)
	}
	h := &Host{cfg: cfg, groups: map[string]*Group{}, peers: map[Peer]int{}, heard: map[string]time.Time{}, down: map[string]bool{}, unknown: map[string]unknownCall{},
		out: map[Peer][]Envelope{}, stop: make(chan struct{})}
	h.sched.init()
	h.appends.init()
	if cfg.AppendWorkers == 0 {
		cfg.AppendWorkers = DefaultAppendWorkers
	}
	for range cfg.Workers {
		h.done.Add(1)
		go h.work(&h.sched, (*Group).process)
	}
	h.done.Add(1)
	go h.appendRounds()
	h.done.Add(1)
	go h.tickLoop()
	return h
}

// DefaultAppendWorkers is the default HostConfig.AppendWorkers.
const DefaultAppendWorkers = 16

// Counters returns the host's counters.
func (h *Host) Counters() *HostCounters { return &h.counters }

// Self returns the node the host runs on.
func (h *Host) Self() Peer { return h.cfg.Self }

// Group returns the running group id, or nil.
func (h *Host) Group(id string) *Group {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.groups[id]
}

// Groups returns the running groups whose names start with prefix.
func (h *Host) Groups(prefix string) []*Group {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []*Group
	for name, g := range h.groups {
		if strings.HasPrefix(name, prefix) {
			out = append(out, g)
		}
	}
	return out
}

// Name returns the group's name.
func (g *Group) Name() string { return g.cfg.Group }

// HasPeerOn says whether one of the group's other replicas is on node.
// KnowsOther says whether a group of the host has a replica on node under
// another incarnation than inc (a node back with a new data directory).
// It looks at the host's peers, not its groups.
func (h *Host) KnowsOther(node, inc string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for p := range h.peers {
		if p.Node == node && p.Incarnation != inc {
			return true
		}
	}
	return false
}

// PeerOn returns the group's other replica on node, if it has one.
func (g *Group) PeerOn(node string) (Peer, bool) {
	for id, p := range g.cfg.Peers {
		if id != g.cfg.ID && p.Node == node {
			return p, true
		}
	}
	return Peer{}, false
}

func (g *Group) HasPeerOn(node string) bool {
	for id, p := range g.cfg.Peers {
		if id != g.cfg.ID && p.Node == node {
			return true
		}
	}
	return false
}

// Len returns how many groups run.
func (h *Host) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.groups)
}

// Close stops every group and the host.
func (h *Host) Close() {
	h.mu.Lock()
	groups := make([]*Group, 0, len(h.groups))
	for _, g := range h.groups {
		groups = append(groups, g)
	}
	h.mu.Unlock()
	for _, g := range groups {
		g.Stop()
	}
	h.stopOnce.Do(func() {
		close(h.stop)
		h.sched.close()
		h.appends.close()
	})
	h.done.Wait()
	if j := h.cfg.StateJournal; j != nil {
		if err := j.Close(); err != nil {
			h.cfg.Logger.Errorf("braid/replica: closing the state journal: %v", err)
		}
	}
}

// StateJournal returns the host's state journal (nil if none): storages of
// its groups open over it (OpenStorageIn).
func (h *Host) StateJournal() *StateJournal { return h.cfg.StateJournal }

// Deliver hands the host a batch a peer sent to to. A batch for another
// incarnation of this node, a message for a group it does not run, and one
// whose sender is not the member the group knows are dropped and counted.
func (h *Host) Deliver(from, to Peer, batch []Envelope) {
	if to != h.cfg.Self {
		h.counters.StaleIncarnation.Add(1)
		h.cfg.Logger.Warningf("braid/replica: dropped a batch of %d from %s for %s: this node is %s", len(batch), from, to, h.cfg.Self)
		return
	}
	h.mu.Lock()
	h.heard[from.Node] = time.Now()
	delete(h.down, from.Node)
	_, watched := h.peers[from]
	h.mu.Unlock()
	if !watched && len(batch) == 0 {
		// A beacon from a node this one shares no group with (it
		// restarted, and opens its replicas as messages come): answer it
		// with one of its own at the next round, so that the sender knows
		// this node is up without waiting for a group to speak.
		h.send(from)
	}
	for _, e := range batch {
		g := h.Group(e.Group)
		if g == nil {
			h.counters.UnknownGroup.Add(1)
			h.callUnknown(e, from)
			continue
		}
		h.deliverTo(g, e, from)
	}
}

// deliverTo hands e from peer from to g, unless from is not the member
// the group knows by the sender's id.
func (h *Host) deliverTo(g *Group, e Envelope, from Peer) {
	sender := uint64(0)
	switch {
	case e.Message != nil:
		sender = e.Message.GetFrom()
	case e.Quiesce != nil:
		sender = e.Quiesce.From
	}
	if p, ok := g.cfg.Peers[sender]; !ok || p != from {
		h.counters.NotMember.Add(1)
		return
	}
	if e.Message != nil {
		g.Step(e.Message)
	} else if e.Quiesce != nil {
		g.quiet(*e.Quiesce)
	}
}

type unknownCall struct {
	at      time.Time
	running bool
	// held are the messages that came while OnUnknown ran (the first of
	// them the one that called it), delivered once it has started the
	// group: a new group's first vote request is answered at once rather
	// than sent again a campaign later.
	held []heldEnvelope
}

type heldEnvelope struct {
	e    Envelope
	from Peer
}

// maxHeld bounds the messages held for a group OnUnknown is opening.
const maxHeld = 16

// callUnknown calls OnUnknown for e's group, unless it runs or ran within
// the last second; while it runs, e is held for the group.
func (h *Host) callUnknown(e Envelope, from Peer) {
	if h.cfg.OnUnknown == nil {
		return
	}
	group := e.Group
	now := time.Now()
	h.mu.Lock()
	c := h.unknown[group]
	if c.running {
		if len(c.held) < maxHeld {
			c.held = append(c.held, heldEnvelope{e: e, from: from})
			h.unknown[group] = c
		}
		h.mu.Unlock()
		return
	}
	if now.Sub(c.at) < time.Second {
		h.mu.Unlock()
		return
	}
	h.unknown[group] = unknownCall{at: now, running: true, held: []heldEnvelope{{e: e, from: from}}}
	if len(h.unknown) > 4096 {
		for k, v := range h.unknown {
			if !v.running && now.Sub(v.at) > time.Second {
				delete(h.unknown, k)
			}
		}
	}
	h.mu.Unlock()
	go func() {
		h.cfg.OnUnknown(group, from)
		h.mu.Lock()
		held := h.unknown[group].held
		h.unknown[group] = unknownCall{at: time.Now()}
		h.mu.Unlock()
		if g := h.Group(group); g != nil {
			for _, he := range held {
				h.deliverTo(g, he.e, he.from)
			}
		}
	}()
}

// PeerDown wakes every quiet group that has a replica on node: if it led
// them, its followers must tick to elect another leader. A follower whose
// leader is on node forgets it (raft's ForgetLeader): with CheckQuorum and
// PreVote on, a follower grants no vote for an election timeout after it
// last heard from a leader, so that the replicas that took the node for
// down can elect another at once instead of waiting that out.
func (h *Host) PeerDown(node string) {
	h.mu.Lock()
	var wake []*Group
	for _, g := range h.groups {
		for _, p := range g.cfg.Peers {
			if p.Node == node {
				wake = append(wake, g)
				break
			}
		}
	}
	h.mu.Unlock()
	for _, g := range wake {
		g.forgetLeaderOn(node)
	}
}

// Silent says whether node is taken for down: none of its batches came
// for PeerTimeout, and none since; since is when the last came. (A node
// this host shares no group with is not watched: never down. A node that
// restarted is down here until it sends a batch again: callers that know
// it restarted overrule this.)
func (h *Host) Silent(node string) (since time.Time, down bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.down[node] {
		return time.Time{}, false
	}
	for p := range h.peers {
		if p.Node == node {
			return h.heard[node], true
		}
	}
	return time.Time{}, false // not watched any more: no word either way
}

// send queues envelopes for a peer; they go out at the end of the round
// (none: a beacon, an empty batch).
func (h *Host) send(to Peer, envs ...Envelope) {
	h.outMu.Lock()
	if envs == nil {
		if _, ok := h.out[to]; !ok {
			h.out[to] = []Envelope{}
		}
	} else {
		h.out[to] = append(h.out[to], envs...)
	}
	h.outMu.Unlock()
}

// flush sends what is queued, one batch per peer. Flushes go one at a
// time (the workers and the tick loop all flush), so that a peer gets
// batches in the order they were made: a follower told to go quiet has
// had every append its leader sent before.
func (h *Host) flush() {
	h.flushMu.Lock()
	defer h.flushMu.Unlock()
	h.outMu.Lock()
	if len(h.out) == 0 {
		h.outMu.Unlock()
		return
	}
	out := h.out
	h.out = map[Peer][]Envelope{}
	h.outMu.Unlock()
	for to, batch := range out {
		h.counters.Batches.Add(1)
		h.counters.Messages.Add(uint64(len(batch)))
		h.cfg.Send(to, batch)
	}
}

// work runs groups off s until the host stops, and sends the messages
// they made whenever no group waits: a round.
func (h *Host) work(s *scheduler, run func(*Group)) {
	defer h.done.Done()
	for runs := 1; ; runs++ {
		g, ok := s.next()
		if !ok {
			return
		}
		run(g)
		if s.empty() || runs%32 == 0 {
			h.flush()
		}
	}
}

func (h *Host) tickLoop() {
	defer h.done.Done()
	ticks := h.cfg.Ticks
	if ticks == nil {
		t := time.NewTicker(h.cfg.TickInterval)
		defer t.Stop()
		ticks = t.C
	}
	for {
		select {
		case <-h.stop:
			return
		case <-ticks:
		}
		now := time.Now()
		h.mu.Lock()
		groups := make([]*Group, 0, len(h.groups))
		for _, g := range h.groups {
			groups = append(groups, g)
		}
		var beacons []Peer
		var silent []string
		for p := range h.peers {
			beacons = append(beacons, p)
			heard, ok := h.heard[p.Node]
			if !ok {
				h.heard[p.Node] = now // a new peer: its timeout starts now
			} else if now.Sub(heard) > h.cfg.PeerTimeout && !h.down[p.Node] {
				h.down[p.Node] = true
				silent = append(silent, p.Node)
			}
		}
		h.mu.Unlock()
		for _, g := range groups {
			g.tick()
		}
		for _, node := range silent {
			h.PeerDown(node)
			if h.cfg.OnPeerDown != nil {
				h.mu.Lock()
				since := h.heard[node]
				h.mu.Unlock()
				h.cfg.OnPeerDown(node, since)
			}
		}
		for _, p := range beacons {
			h.send(p)
		}
		h.flush()
	}
}

func (h *Host) add(g *Group) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.groups[g.cfg.Group]; ok {
		return fmt.Errorf("braid/replica: group %s runs here already", g.cfg.Group)
	}
	h.groups[g.cfg.Group] = g
	for _, p := range g.cfg.Peers {
		if p != h.cfg.Self {
			h.peers[p]++
		}
	}
	return nil
}

func (h *Host) remove(g *Group) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.groups[g.cfg.Group] != g {
		return
	}
	delete(h.groups, g.cfg.Group)
	for _, p := range g.cfg.Peers {
		if p == h.cfg.Self {
			continue
		}
		if h.peers[p]--; h.peers[p] <= 0 {
			delete(h.peers, p)
		}
	}
}

// scheduler is a queue of groups with work; a group is in it at most once
// and run by one worker at a time.
type scheduler struct {
	mu     sync.Mutex
	cond   *sync.Cond
	queue  []*Group
	closed bool
}

func (s *scheduler) init() { s.cond = sync.NewCond(&s.mu) }

// add queues g; the caller has seen that it was not queued.
func (s *scheduler) add(g *Group) {
	s.mu.Lock()
	s.queue = append(s.queue, g)
	s.mu.Unlock()
	s.cond.Signal()
}

// next waits for a group.
func (s *scheduler) next() (g *Group, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.queue) == 0 && !s.closed {
		s.cond.Wait()
	}
	if s.closed {
		return nil, false
	}
	g = s.queue[0]
	s.queue[0] = nil
	s.queue = s.queue[1:]
	return g, true
}

func (s *scheduler) empty() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue) == 0
}

func (s *scheduler) close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.cond.Broadcast()
}
