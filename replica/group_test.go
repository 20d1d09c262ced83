package replica_test

import (
	"bytes"
	"fmt"
	"hash/crc32"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/braidmq/braid/internal/poll"
	"github.com/braidmq/braid/replica"
	"github.com/braidmq/braid/wal"
)

// cluster is three (or more) replicas of one group in one process, each
// over a log and a state file of its own in a temporary directory; their
// messages go through proto.Marshal, as between nodes, and can be cut per
// replica.
type cluster struct {
	t      *testing.T
	root   string
	ids    []uint64
	peers  map[uint64]replica.Peer
	mu     sync.Mutex
	hosts  map[uint64]*replica.Host
	groups map[uint64]*replica.Group
	logs   map[uint64]*wal.Log
	cut    map[uint64]bool
	// drop, when set, says which messages the network loses.
	drop func(from, to uint64, m *pb.Message) bool
	// ticks is each host's clock, which a goroutine ticks every 2 ms
	// unless paused (then the test ticks them itself).
	ticks  map[uint64]chan time.Time
	paused atomic.Bool
	// sealed counts the OnSealed calls of each replica's groups.
	sealed [8]atomic.Int32
	// failed counts the OnFailed calls of each replica's groups.
	failed [8]atomic.Int32
	// faulty replicas write their logs through a wal.FaultFS whose syncs
	// fail EIO while failingSync of theirs holds.
	faulty      bool
	failingSync [8]atomic.Bool
	// journaled replicas journal their logs' writes and commit them in
	// rounds of a commit group (as a node's do), each replica its own.
	journaled bool
	// firstLeader is the groups' Config.FirstLeader.
	firstLeader uint64
	commits     map[uint64]*wal.CommitGroup
	journals    map[uint64]*wal.Journal
}

const groupName = "topic://t/n/x/1/0"

func newCluster(t *testing.T, n int) *cluster { return newClusterOf(t, n, false) }

func newClusterOf(t *testing.T, n int, journaled bool) *cluster {
	return newClusterWith(t, n, clusterOptions{journaled: journaled})
}

// testPeerTimeout is the test hosts' failure detector: far longer than
// their 2 ms ticks (10 ticks, the default, took a node for down under a
// loaded machine's pauses and woke every quiet group, which
// TestHostQuiescesIdleGroups reads as a group waking with nothing to do),
// far shorter than the tests' deadlines.
const testPeerTimeout = 500 * time.Millisecond

// clusterOptions are a test cluster's: journaled replicas, the groups'
// first leader, replicas not started at first.
type clusterOptions struct {
	journaled   bool
	firstLeader uint64
	down        []uint64
	faulty      bool
}

func newClusterWith(t *testing.T, n int, o clusterOptions) *cluster {
	journaled := o.journaled
	c := &cluster{firstLeader: o.firstLeader, faulty: o.faulty, t: t, root: t.TempDir(), peers: map[uint64]replica.Peer{}, hosts: map[uint64]*replica.Host{}, groups: map[uint64]*replica.Group{}, logs: map[uint64]*wal.Log{}, cut: map[uint64]bool{},
		ticks: map[uint64]chan time.Time{}, journaled: journaled, commits: map[uint64]*wal.CommitGroup{}, journals: map[uint64]*wal.Journal{}}
	for i := range n {
		id := uint64(i + 1)
		c.ids = append(c.ids, id)
		c.peers[id] = replica.Peer{Node: fmt.Sprintf("n%d", id), Incarnation: "i1"}
		c.ticks[id] = make(chan time.Time, 1)
	}
	stop := make(chan struct{})
	ticked := make(chan struct{})
	go func() {
		defer close(ticked)
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case now := <-tick.C:
				if c.paused.Load() {
					continue
				}
				for _, ch := range c.ticks {
					select {
					case ch <- now:
					default: // the host has not taken the last one: it is busy, or stopped
					}
				}
			}
		}
	}()
	t.Cleanup(func() {
		close(stop)
		<-ticked
	})
	for _, id := range c.ids {
		if err := replica.Bootstrap(nil, c.statePath(id), c.ids); err != nil {
			t.Fatal(err)
		}
		if !contains(o.down, id) {
			c.start(id)
		}
	}
	t.Cleanup(func() {
		for _, id := range c.ids {
			c.halt(id)
		}
	})
	return c
}

func (c *cluster) statePath(id uint64) string {
	return filepath.Join(c.root, fmt.Sprintf("r%d.state", id))
}

func (c *cluster) logDir(id uint64) string { return filepath.Join(c.root, fmt.Sprintf("r%d", id)) }

// start opens replica id from its directory and starts it on a host of
// its own, ticking every 2 ms.
func (c *cluster) start(id uint64) {
	c.t.Helper()
	opts := wal.Options{Durability: wal.DurabilityAlways}
	if c.faulty {
		opts.FS = wal.NewFaultFS(wal.OSFS, func(op, _ string) error {
			if op == "sync" && c.failingSync[id].Load() {
				return syscall.EIO
			}
			return nil
		})
	}
	var commits *wal.CommitGroup
	if c.journaled {
		jdir := filepath.Join(c.root, fmt.Sprintf("j%d", id))
		if _, err := wal.ReplayJournal(jdir, c.root, nil); err != nil {
			c.t.Fatal(err)
		}
		j, err := wal.OpenJournal(jdir, c.root, nil, 1<<20)
		if err != nil {
			c.t.Fatal(err)
		}
		if commits, err = wal.NewCommitGroup(c.root, wal.SyncEach, j); err != nil {
			c.t.Fatal(err)
		}
		opts.Journal = j
		c.mu.Lock()
		c.commits[id], c.journals[id] = commits, j
		c.mu.Unlock()
	}
	l, err := wal.Open(c.logDir(id), opts)
	if err != nil {
		c.t.Fatal(err)
	}
	// Journaled replicas keep their state changes in a state journal of
	// their own too (as nodes do); the host closes it.
	var states *replica.StateJournal
	if c.journaled {
		var err error
		if states, err = replica.OpenStateJournal(filepath.Join(c.root, fmt.Sprintf("s%d", id)), c.root, nil, 0); err != nil {
			c.t.Fatal(err)
		}
	}
	st, err := replica.OpenStorageIn(states, l, nil, c.statePath(id))
	if err != nil {
		c.t.Fatal(err)
	}
	self := c.peers[id]
	h := replica.NewHost(replica.HostConfig{Self: self, TickInterval: 2 * time.Millisecond, Ticks: c.ticks[id], PeerTimeout: testPeerTimeout, Workers: 2, StateJournal: states,
		Send: func(to replica.Peer, batch []replica.Envelope) { c.send(self, to, batch) }})
	if commits != nil {
		h.SetCommits(commits)
	}
	g, err := h.Start(replica.Config{Group: groupName, ID: id, Peers: c.peers, Storage: st, ElectionTick: 10, HeartbeatTick: 1, FirstLeader: c.firstLeader,
		OnSealed: func() { c.sealed[id].Add(1) }, OnFailed: func(error) { c.failed[id].Add(1) }})
	if err != nil {
		c.t.Fatal(err)
	}
	c.mu.Lock()
	c.hosts[id], c.groups[id], c.logs[id] = h, g, l
	c.mu.Unlock()
}

// halt stops replica id and closes its log, as a killed process would
// leave it (everything it acknowledged is durable).
func (c *cluster) halt(id uint64) { c.haltExpecting(id, false) }

// haltExpecting is halt of a replica that may have failed (failed: it
// must have).
func (c *cluster) haltExpecting(id uint64, failed bool) {
	c.mu.Lock()
	h, g, l := c.hosts[id], c.groups[id], c.logs[id]
	delete(c.hosts, id)
	delete(c.groups, id)
	delete(c.logs, id)
	c.mu.Unlock()
	if h == nil {
		return
	}
	h.Close()
	if err := g.Err(); err != nil && !failed {
		c.t.Errorf("replica %d failed: %v", id, err)
	} else if err == nil && failed {
		c.t.Errorf("replica %d did not fail", id)
	}
	l.Close()
	c.mu.Lock()
	commits, j := c.commits[id], c.journals[id]
	delete(c.commits, id)
	delete(c.journals, id)
	c.mu.Unlock()
	if commits != nil {
		_ = commits.Close()
		_ = j.Close()
	}
	// The others learn of it, as a node's membership lease lapses.
	c.mu.Lock()
	for _, other := range c.hosts {
		other.PeerDown(c.peers[id].Node)
	}
	c.mu.Unlock()
}

func (c *cluster) idOf(p replica.Peer) uint64 {
	for id, q := range c.peers {
		if q == p {
			return id
		}
	}
	return 0
}

// send carries a batch as the network would: marshalled and unmarshalled,
// dropped if either end is cut or down.
func (c *cluster) send(from, to replica.Peer, batch []replica.Envelope) {
	c.mu.Lock()
	h := c.hosts[c.idOf(to)]
	cut := c.cut[c.idOf(from)] || c.cut[c.idOf(to)]
	drop := c.drop
	c.mu.Unlock()
	if h == nil || cut {
		return
	}
	out := make([]replica.Envelope, 0, len(batch))
	for _, e := range batch {
		if e.Message != nil && drop != nil && drop(c.idOf(from), c.idOf(to), e.Message) {
			continue
		}
		out = append(out, e)
		i := len(out) - 1
		if e.Message == nil {
			continue
		}
		b, err := proto.Marshal(e.Message)
		if err != nil {
			c.t.Errorf("marshal: %v", err)
			return
		}
		var m pb.Message
		if err := proto.Unmarshal(b, &m); err != nil {
			c.t.Errorf("unmarshal: %v", err)
			return
		}
		out[i].Message = &m
	}
	h.Deliver(from, to, out)
}

func (c *cluster) setCut(id uint64, cut bool) {
	c.mu.Lock()
	c.cut[id] = cut
	c.mu.Unlock()
}

func (c *cluster) group(id uint64) *replica.Group {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.groups[id]
}

// leader waits for a leader that the running replicas, but the ones in
// except, agree on and returns it.
func (c *cluster) leader(except ...uint64) uint64 {
	c.t.Helper()
	var lead uint64
	poll.EventuallyNil(c.t, 10*time.Second, "the replicas", func() error {
		lead = 0
		for _, id := range c.ids {
			g := c.group(id)
			if g == nil || contains(except, id) {
				continue
			}
			l, _, _ := g.Status()
			if l == 0 || lead != 0 && l != lead || contains(except, l) || c.group(l) == nil {
				return fmt.Errorf("replica %d sees leader %d", id, l)
			}
			lead = l
		}
		return nil
	})
	return lead
}

// stillLeader stops the clocks with every replica agreeing on one
// leader, which no election can move then, and returns it.
func (c *cluster) stillLeader() uint64 {
	c.t.Helper()
	var lead uint64
	poll.EventuallyNil(c.t, 10*time.Second, "a leader with the clocks stopped", func() error {
		c.paused.Store(false)
		lead = c.leader()
		c.paused.Store(true)
		for _, id := range c.ids {
			if l, _, _ := c.group(id).Status(); l != lead {
				return fmt.Errorf("replica %d sees leader %d, not %d", id, l, lead)
			}
		}
		return nil
	})
	return lead
}

// followers lists the replicas but lead, in order.
func (c *cluster) followers(lead uint64) []uint64 {
	var out []uint64
	for _, id := range c.ids {
		if id != lead {
			out = append(out, id)
		}
	}
	return out
}

func contains(ids []uint64, id uint64) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

func rec(i int) wal.Record {
	return wal.Record{Timestamp: int64(1_700_000_000_000 + i), Key: []byte(fmt.Sprintf("k%d", i%5)), Payload: []byte(fmt.Sprintf("record %d %s", i, bytes.Repeat([]byte{'x'}, i%50)))}
}

// acked is what the tests were answered: records by offset.
type acked map[uint64]wal.Record

// propose proposes batches through replica id (which should lead) and
// waits for every answer; it returns the records that were committed.
func (c *cluster) propose(id uint64, from, batches int, into acked) (lost int) {
	c.t.Helper()
	var props []*replica.Proposal
	var sent [][]wal.Record
	n := from
	for b := range batches {
		recs := make([]wal.Record, 1+b%3)
		for k := range recs {
			recs[k] = rec(n)
			n++
		}
		props = append(props, c.group(id).Propose(recs))
		sent = append(sent, recs)
	}
	for i, p := range props {
		select {
		case <-p.Done():
		case <-time.After(10 * time.Second):
			c.t.Fatalf("proposal %d not answered in 10 s (replica %d: %v)", i, id, c.group(id).Err())
		}
		if p.Err != nil {
			lost++
			continue
		}
		if p.Next-p.First != uint64(len(sent[i])) {
			c.t.Fatalf("proposal %d of %d records got offsets [%d, %d)", i, len(sent[i]), p.First, p.Next)
		}
		for k, r := range sent[i] {
			if _, dup := into[p.First+uint64(k)]; dup {
				c.t.Fatalf("offset %d answered twice", p.First+uint64(k))
			}
			into[p.First+uint64(k)] = r
		}
	}
	return lost
}

// agree waits until every running replica has committed next records and
// checks that their logs hold the same bytes, and every acknowledged record
// at its offset.
func (c *cluster) agree(want acked) {
	c.t.Helper()
	next := uint64(len(want))
	poll.EventuallyNil(c.t, 10*time.Second, "the replicas", func() error {
		for _, id := range c.ids {
			if g := c.group(id); g != nil && g.Committed() < next {
				return fmt.Errorf("replica %d committed %d of %d", id, g.Committed(), next)
			}
		}
		return nil
	})
	sums := map[uint64]uint32{}
	for _, id := range c.ids {
		c.mu.Lock()
		l := c.logs[id]
		c.mu.Unlock()
		if l == nil {
			continue
		}
		recs, err := l.ReadRange(0, int(next), 1<<30)
		if err != nil || uint64(len(recs)) != next {
			c.t.Fatalf("replica %d: read %d of %d: %v", id, len(recs), next, err)
		}
		h := crc32.NewIEEE()
		for off, r := range recs {
			if w, ok := want[uint64(off)]; ok && !sameRecord(r, w) {
				c.t.Fatalf("replica %d: offset %d holds %q, acknowledged %q", id, off, r.Payload, w.Payload)
			}
			h.Write(wal.EncodeRecord(nil, r))
		}
		sums[id] = h.Sum32()
	}
	var first uint32
	for id, s := range sums {
		if first == 0 {
			first = s
		} else if s != first {
			c.t.Fatalf("the replicas' committed prefixes differ: %v (replica %d)", sums, id)
		}
	}
}

func sameRecord(a, b wal.Record) bool {
	return a.Timestamp == b.Timestamp && bytes.Equal(a.Key, b.Key) && bytes.Equal(a.Payload, b.Payload)
}

func TestGroupReplicates(t *testing.T) {
	c := newCluster(t, 3)
	lead := c.leader()
	got := acked{}
	if lost := c.propose(lead, 0, 200, got); lost != 0 {
		t.Fatalf("%d proposals lost with a steady leader", lost)
	}
	if len(got) != 399 {
		t.Fatalf("%d records acknowledged, want 399", len(got))
	}
	for off := range uint64(len(got)) {
		if _, ok := got[off]; !ok {
			t.Fatalf("offset %d was never acknowledged: offsets are not dense", off)
		}
	}
	c.agree(got)
	// A follower refuses proposals. The clocks stop first: under load an
	// election can move the lead between the writes above and this check.
	lead = c.stillLeader()
	defer c.paused.Store(false)
	for _, id := range c.ids {
		if id != lead {
			if err := c.group(id).Propose([]wal.Record{rec(1)}).Wait(); err == nil {
				t.Fatalf("follower %d accepted a proposal", id)
			}
		}
	}
}

func TestGroupLeaderLossAndReturn(t *testing.T) {
	c := newCluster(t, 3)
	got := acked{}
	lead := c.leader()
	c.propose(lead, 0, 50, got)
	c.halt(lead)
	next := c.leader(lead)
	if next == lead {
		t.Fatal("the stopped replica still leads")
	}
	if lost := c.propose(next, 1000, 50, got); lost != 0 {
		t.Fatalf("%d proposals lost under the new leader", lost)
	}
	c.agree(got)
	// The old leader comes back from its disk, catches up, and the three
	// agree.
	c.start(lead)
	c.agree(got)
	// And again, with all three stopped and started from their disks.
	for _, id := range c.ids {
		c.halt(id)
	}
	for _, id := range c.ids {
		c.start(id)
	}
	lead = c.leader()
	c.propose(lead, 2000, 10, got)
	c.agree(got)
}

// A leader cut off from the others keeps writing entries that never
// commit; the others elect a leader of their own and go on. When the link
// comes back, the old leader's suffix is cut and replaced, and none of its
// proposals was answered as committed.
func TestGroupConflictingSuffixIsCut(t *testing.T) {
	c := newCluster(t, 3)
	got := acked{}
	old := c.leader()
	c.propose(old, 0, 20, got)
	c.agree(got)
	c.setCut(old, true)
	var stale []*replica.Proposal
	for i := range 5 {
		stale = append(stale, c.group(old).Propose([]wal.Record{rec(500 + i), rec(600 + i)}))
	}
	// The stale leader writes them to its own log.
	c.waitDurable(old, uint64(len(got))+10)
	next := c.leader(old)
	c.propose(next, 1000, 10, got)
	c.setCut(old, false)
	c.agree(got)
	allLost(t, stale)
}

// Readers of a replica's log see what is committed, never an entry a
// cut-off leader wrote alone.
func TestGroupReadersSeeCommittedOnly(t *testing.T) {
	c := newCluster(t, 3)
	got := acked{}
	old := c.leader()
	c.propose(old, 0, 5, got)
	c.agree(got)
	c.setCut(old, true)
	c.group(old).Propose([]wal.Record{rec(900), rec(901)})
	c.mu.Lock()
	l := c.logs[old]
	c.mu.Unlock()
	poll.EventuallyNil(t, 10*time.Second, "the cut-off leader's write", func() error {
		if d := l.DurableOffset(); d < uint64(len(got))+2 {
			return fmt.Errorf("durable to %d", d)
		}
		return nil
	})
	if n := l.NextOffset(); n != uint64(len(got)) {
		t.Fatalf("readers of the cut-off leader see up to %d; committed is %d", n, len(got))
	}
	if recs, _ := l.ReadRange(uint64(len(got)), 10, 0); len(recs) != 0 {
		t.Fatalf("a reader read %d uncommitted records", len(recs))
	}
}

// TestGroupLeadCommitted: a follower that takes the lead with
// LeadCommitted (a consumer group's new home, before it replays its state)
// sees, once it returns, every record the old leader had acknowledged
// (one follower was cut off while they were written). The window it
// closes (a follower that holds entries but has not heard they were
// committed) is seldom open here: etcd raft tells the followers of a
// commit at once; this checks the outcome, not the window.
func TestGroupLeadCommitted(t *testing.T) {
	c := newCluster(t, 3)
	got := acked{}
	lead := c.leader()
	fs := c.followers(lead)
	c.setCut(fs[1], true)
	c.propose(lead, 0, 40, got)
	c.halt(lead)
	c.setCut(fs[1], false)
	next := fs[0]
	// The new leader hears no append acknowledgement until it has led a
	// while: it leads, and nothing of its term commits. LeadCommitted
	// returns only once that is let through and its log is committed.
	var holding atomic.Bool
	holding.Store(true)
	c.mu.Lock()
	c.drop = func(_, to uint64, m *pb.Message) bool {
		return holding.Load() && to == next && m.GetType() == pb.MsgAppResp
	}
	c.mu.Unlock()
	done := make(chan error, 1)
	go func() { done <- c.group(next).LeadCommitted(10 * time.Second) }()
	poll.EventuallyNil(t, 10*time.Second, "the new leader", func() error {
		if l, _, _ := c.group(next).Status(); l != next {
			return fmt.Errorf("replica %d sees leader %d", next, l)
		}
		return nil
	})
	// Leading with nothing of its term committed: many of LeadCommitted's
	// looks go by (it looks every 5 ms; Lead every 20) without it returning.
	for range 50 {
		last, _ := c.group(next).Storage().LastIndex()
		if _, _, commit := c.group(next).Status(); commit >= last {
			t.Fatalf("replica %d committed its log to entry %d with no acknowledgement of its term", next, commit)
		}
		select {
		case err := <-done:
			t.Fatalf("LeadCommitted returned (%v) before the leader's log was committed", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	holding.Store(false)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if lead, _, _ := c.group(next).Status(); lead != next {
		t.Fatalf("replica %d returned from LeadCommitted, and %d leads", next, lead)
	}
	if got, want := c.group(next).Committed(), uint64(len(got)); got != want {
		t.Fatalf("replica %d leads with %d records committed, want the %d acknowledged", next, got, want)
	}
	// A stopped replica does not take the lead.
	g := c.group(fs[1])
	c.halt(fs[1])
	if err := g.LeadCommitted(time.Second); err == nil {
		t.Fatal("a stopped replica took the lead")
	}
}
