package replica_test

import (
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/braidmq/braid/internal/poll"
	"github.com/braidmq/braid/replica"
	"github.com/braidmq/braid/wal"
)

// An idle group goes quiet on every replica (no ticks, no messages); a
// proposal wakes it; the loss of its leader's node wakes the followers,
// which elect another.
func TestHostQuiescesIdleGroups(t *testing.T) {
	c := newCluster(t, 3)
	got := acked{}
	lead := c.leader()
	c.propose(lead, 0, 10, got)
	quiet := func() error {
		for _, id := range c.ids {
			if g := c.group(id); g != nil && !g.Quiesced() {
				return fmt.Errorf("replica %d is not quiet", id)
			}
		}
		return nil
	}
	poll.EventuallyNil(t, 10*time.Second, "the group going quiet", quiet)
	// Quiet: no tick is given over many tick intervals.
	ticks := func() (n uint64) {
		for _, id := range c.ids {
			n += c.hosts[id].Counters().Ticks.Load()
		}
		return n
	}
	// The test is the clock now: 50 ticks to every host (each taken
	// before the next is sent but one: a channel of one).
	c.paused.Store(true)
	before := ticks()
	for range 50 {
		for _, id := range c.ids {
			c.ticks[id] <- time.Now()
		}
		if err := quiet(); err != nil {
			t.Fatalf("woke with nothing to do: %v", err)
		}
	}
	if after := ticks(); after != before {
		t.Fatalf("a quiet group was ticked %d times over 50 ticks", after-before)
	}
	c.paused.Store(false)
	// A proposal wakes it and commits.
	c.propose(lead, 100, 5, got)
	c.agree(got)
	poll.EventuallyNil(t, 10*time.Second, "the group going quiet again", quiet)
	// The leader's node goes: the followers wake, elect, and take writes.
	c.halt(lead)
	next := c.leader(lead)
	if lost := c.propose(next, 200, 5, got); lost != 0 {
		t.Fatalf("%d proposals lost", lost)
	}
	c.agree(got)
}

// A message from a node that is not the member the group knows (another
// incarnation), and a batch for an old incarnation of this node, are
// dropped and counted.
func TestHostDropsStrangers(t *testing.T) {
	c := newCluster(t, 3)
	lead := c.leader()
	follower := c.followers(lead)[1]
	h := c.hosts[follower]
	_, term, _ := c.group(follower).Status()
	// A vote request at a far higher term, from the leader's node under a
	// new incarnation: it must not reach raft (it would depose the leader).
	m := &pb.Message{Type: pb.MsgVote.Enum(), From: proto.Uint64(lead), To: proto.Uint64(follower), Term: proto.Uint64(term + 10), LogTerm: proto.Uint64(term + 10), Index: proto.Uint64(1000)}
	stranger := replica.Peer{Node: c.peers[lead].Node, Incarnation: "i2"}
	h.Deliver(stranger, c.peers[follower], []replica.Envelope{{Group: groupName, Message: m}})
	if n := h.Counters().NotMember.Load(); n != 1 {
		t.Fatalf("not-member drops %d, want 1", n)
	}
	// The same batch to this node's old incarnation.
	h.Deliver(c.peers[lead], replica.Peer{Node: c.peers[follower].Node, Incarnation: "i0"}, []replica.Envelope{{Group: groupName, Message: m}})
	if n := h.Counters().StaleIncarnation.Load(); n != 1 {
		t.Fatalf("stale-incarnation drops %d, want 1", n)
	}
	h.Deliver(c.peers[lead], c.peers[follower], []replica.Envelope{{Group: "no such group", Message: m}})
	if n := h.Counters().UnknownGroup.Load(); n != 1 {
		t.Fatalf("unknown-group drops %d, want 1", n)
	}
	if _, now, _ := c.group(follower).Status(); now != term {
		t.Fatalf("the term moved from %d to %d", term, now)
	}
	got := acked{}
	if lost := c.propose(lead, 0, 3, got); lost != 0 {
		t.Fatalf("%d proposals lost", lost)
	}
}

// Many groups share three hosts: each elects, commits and goes quiet.
func TestHostManyGroups(t *testing.T) {
	const n = 200
	root := t.TempDir()
	peers := map[uint64]replica.Peer{1: {"n1", "a"}, 2: {"n2", "b"}, 3: {"n3", "c"}}
	hosts := map[replica.Peer]*replica.Host{}
	for _, p := range peers {
		hosts[p] = replica.NewHost(replica.HostConfig{Self: p, TickInterval: 20 * time.Millisecond, Workers: 2,
			Send: func(to replica.Peer, batch []replica.Envelope) { hosts[to].Deliver(p, to, batch) }})
	}
	// Every host exists before any sends (the map is only read after).
	var logs []*wal.Log
	t.Cleanup(func() {
		for _, h := range hosts {
			h.Close()
		}
		for _, l := range logs {
			l.Close()
		}
	})
	var leaders []*replica.Group
	for i := range n {
		name := fmt.Sprintf("g%d", i)
		for id, p := range peers {
			dir := fmt.Sprintf("%s/%s/%s", root, p.Node, name)
			if err := replica.Bootstrap(nil, dir+".state", []uint64{1, 2, 3}); err != nil {
				t.Fatal(err)
			}
			l, err := wal.Open(dir, wal.Options{Durability: wal.DurabilityNone})
			if err != nil {
				t.Fatal(err)
			}
			logs = append(logs, l)
			st, err := replica.OpenStorage(l, nil, dir+".state")
			if err != nil {
				t.Fatal(err)
			}
			g, err := hosts[p].Start(replica.Config{Group: name, ID: id, Peers: peers, Storage: st})
			if err != nil {
				t.Fatal(err)
			}
			if id == uint64(1+i%3) {
				g.Campaign()
				leaders = append(leaders, g)
			}
		}
	}
	for i, g := range leaders {
		poll.EventuallyNil(t, 20*time.Second, "a leader", func() error {
			if l, _, _ := g.Status(); l == 0 {
				return fmt.Errorf("group %d has no leader", i)
			}
			return nil
		})
	}
	for i, g := range leaders {
		lead, _, _ := g.Status()
		var leader *replica.Group
		for _, h := range hosts {
			if h.Self() == peers[lead] {
				leader = h.Group(fmt.Sprintf("g%d", i))
			}
		}
		if leader == nil {
			t.Fatalf("group %d: leader %d (%v) runs no replica of it", i, lead, peers[lead])
		}
		if err := leader.Propose([]wal.Record{rec(i)}).Wait(); err != nil {
			t.Fatalf("group %d: %v", i, err)
		}
	}
	poll.EventuallyNil(t, 20*time.Second, "every group quiet", func() error {
		for _, h := range hosts {
			for i := range n {
				if g := h.Group(fmt.Sprintf("g%d", i)); !g.Quiesced() {
					return fmt.Errorf("%s: group %d not quiet", h.Self(), i)
				}
			}
		}
		return nil
	})
}

// A replica can take the lead of its group; a host asks OnUnknown about a
// group it does not run, which may start it.
func TestHostLeadAndUnknownGroups(t *testing.T) {
	c := newCluster(t, 3)
	lead := c.leader()
	var other uint64
	for _, id := range c.ids {
		if id != lead {
			other = id
		}
	}
	if err := c.group(other).Lead(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if now := c.leader(); now != other {
		t.Fatalf("leader %d after replica %d took the lead", now, other)
	}
	got := acked{}
	if lost := c.propose(other, 0, 3, got); lost != 0 {
		t.Fatalf("%d lost", lost)
	}
	c.agree(got)
}

func TestHostCallsOnUnknownOncePerGroup(t *testing.T) {
	calls := make(chan string, 10)
	self := replica.Peer{Node: "n1", Incarnation: "a"}
	h := replica.NewHost(replica.HostConfig{Self: self, Send: func(replica.Peer, []replica.Envelope) {},
		OnUnknown: func(group string, from replica.Peer) { calls <- group + " from " + from.String() }})
	defer h.Close()
	m := &pb.Message{Type: pb.MsgHeartbeat.Enum(), From: proto.Uint64(2), To: proto.Uint64(1)}
	for range 5 {
		h.Deliver(replica.Peer{Node: "n2", Incarnation: "b"}, self, []replica.Envelope{{Group: "ghost", Message: m}})
	}
	select {
	case got := <-calls:
		if got != "ghost from n2/b" {
			t.Fatalf("OnUnknown(%s)", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("OnUnknown was not called")
	}
	// The other four came within the second: no more calls. The counter
	// says the five were dropped.
	poll.EventuallyNil(t, 10*time.Second, "the drops counted", func() error {
		if n := h.Counters().UnknownGroup.Load(); n != 5 {
			return fmt.Errorf("%d unknown-group drops", n)
		}
		return nil
	})
	if len(calls) != 0 {
		t.Fatalf("OnUnknown called %d more times within a second", len(calls))
	}
}

// When a leader's node is taken for down, its followers forget it, so
// that one of them takes the lead at once: with CheckQuorum and PreVote a
// follower otherwise grants no vote for an election timeout after it last
// heard from its leader. Here no tick is given after the one that finds
// the node silent, so the followers' election timers do not run: the lead
// is taken on the word of the failure detector alone.
func TestHostPeerDownForgetsItsLeader(t *testing.T) {
	c := newCluster(t, 3)
	got := acked{}
	lead := c.leader()
	c.propose(lead, 0, 5, got)
	c.agree(got)
	c.paused.Store(true)
	c.halt(lead)
	followers := c.followers(lead)
	// Past the peer timeout, one tick each: the hosts find the leader's
	// node silent.
	node := c.peers[lead].Node
	poll.EventuallyNil(t, 10*time.Second, "the followers taking the leader's node for down", func() error {
		for _, id := range followers {
			select {
			case c.ticks[id] <- time.Now():
			default:
			}
			if _, down := c.hosts[id].Silent(node); !down {
				return fmt.Errorf("host %d does not take %s for down", id, node)
			}
		}
		return nil
	})
	if err := c.group(followers[0]).Lead(2 * time.Second); err != nil {
		t.Fatalf("a follower could not take the lead with the leader's node down and no election timeout run: %v", err)
	}
	if lost := c.propose(followers[0], 100, 5, got); lost != 0 {
		t.Fatalf("%d proposals lost", lost)
	}
	c.paused.Store(false)
	c.agree(got)
}

// A node taken for down that comes back with no group open yet (it opens
// its replicas as messages come) answers the beacons of the nodes that
// took it for down, so that they know it is up before any group speaks.
func TestHostBeaconAnsweredByRestartedNode(t *testing.T) {
	c := newCluster(t, 3)
	lead := c.leader()
	follower := c.followers(lead)[0]
	c.halt(follower)
	node := c.peers[follower].Node
	down := func() bool { _, d := c.hosts[lead].Silent(node); return d }
	poll.EventuallyNil(t, 10*time.Second, "the follower's node taken for down", func() error {
		if !down() {
			return fmt.Errorf("%s not taken for down", node)
		}
		return nil
	})
	// Back, as a host with no group.
	self := c.peers[follower]
	h := replica.NewHost(replica.HostConfig{Self: self, TickInterval: 2 * time.Millisecond, Ticks: c.ticks[follower], PeerTimeout: testPeerTimeout, Workers: 1,
		Send: func(to replica.Peer, batch []replica.Envelope) { c.send(self, to, batch) }})
	t.Cleanup(h.Close)
	c.mu.Lock()
	c.hosts[follower] = h
	c.mu.Unlock()
	poll.EventuallyNil(t, 10*time.Second, "the restarted node taken for up", func() error {
		if down() {
			return fmt.Errorf("%s still taken for down", node)
		}
		return nil
	})
	if h.Len() != 0 {
		t.Fatalf("the restarted node runs %d groups", h.Len())
	}
	c.mu.Lock()
	delete(c.hosts, follower) // a host without a group: not the cluster's to halt
	c.mu.Unlock()
}

// Many callers waiting for a replica to lead do not restart its
// elections: raft is asked at most once a tick, and a campaign under way
// is begun again only after 2 ticks, then twice as long each time. A
// campaign begun again before the last could finish only raises the term
// and starts over (many groups starting at once under load never elected
// that way). Here no majority answers, so every caller waits out its
// timeout.
func TestLeadDoesNotRestartElections(t *testing.T) {
	c := newCluster(t, 3)
	lead := c.leader()
	followers := c.followers(lead)
	c.halt(lead)
	c.halt(followers[1])
	g := c.group(followers[0])
	before := c.hosts[followers[0]].Counters().LeadAsks.Load()
	const wait = 300 * time.Millisecond
	done := make(chan error, 10)
	for range 10 {
		go func() { done <- g.Lead(wait) }()
	}
	for range 10 {
		if err := <-done; err == nil {
			t.Fatal("a replica of three took the lead with the two others down")
		}
	}
	// A campaign under way is begun again after 2, 4, 8, then 10 ticks
	// (of 2 ms here): about 17 asks in 300 ms, not one per caller per
	// look (10 callers every 20 ms: about 150).
	if asks := c.hosts[followers[0]].Counters().LeadAsks.Load() - before; asks > 30 {
		t.Fatalf("10 callers waiting %v asked raft for the lead %d times", wait, asks)
	}
}

// A message for a group its host does not run yet is held while
// OnUnknown opens the group, then delivered: a new group's first vote
// request is answered at once, and the group elects without a tick (so
// without raft sending it again a campaign later). Without the hold the
// first campaign is lost and, no tick coming, nobody ever leads.
func TestHostHoldsMessagesWhileOpeningAGroup(t *testing.T) {
	root := t.TempDir()
	peers := map[uint64]replica.Peer{1: {"n1", "a"}, 2: {"n2", "b"}}
	noTicks := make(chan time.Time) // no tick ever: no election timer runs
	hosts := map[replica.Peer]*replica.Host{}
	var logs []*wal.Log
	var mu sync.Mutex
	open := func(p replica.Peer, id uint64) *replica.Group {
		dir := filepath.Join(root, p.Node)
		if err := replica.Bootstrap(nil, dir+".state", []uint64{1, 2}); err != nil {
			t.Error(err)
			return nil
		}
		l, err := wal.Open(dir, wal.Options{Durability: wal.DurabilityNone})
		if err != nil {
			t.Error(err)
			return nil
		}
		mu.Lock()
		logs = append(logs, l)
		mu.Unlock()
		st, err := replica.OpenStorage(l, nil, dir+".state")
		if err != nil {
			t.Error(err)
			return nil
		}
		g, err := hosts[p].Start(replica.Config{Group: "fresh", ID: id, Peers: peers, Storage: st})
		if err != nil {
			t.Error(err)
		}
		return g
	}
	for id, p := range peers {
		cfg := replica.HostConfig{Self: p, Ticks: noTicks, Workers: 2,
			Send: func(to replica.Peer, batch []replica.Envelope) { hosts[to].Deliver(p, to, batch) }}
		if id == 2 {
			cfg.OnUnknown = func(group string, _ replica.Peer) { open(p, 2) }
		}
		hosts[p] = replica.NewHost(cfg)
	}
	t.Cleanup(func() {
		for _, h := range hosts {
			h.Close()
		}
		for _, l := range logs {
			l.Close()
		}
	})
	g := open(peers[1], 1)
	g.Campaign()
	poll.EventuallyNil(t, 10*time.Second, "the new group's leader", func() error {
		if lead, _, _ := g.Status(); lead != 1 {
			return fmt.Errorf("leader %d", lead)
		}
		return nil
	})
}

// A host knows a node under another incarnation when one of its groups
// has a replica there under an older one (the node came back with a new
// data directory); not when every group names it as it is.
func TestHostKnowsOther(t *testing.T) {
	dir := t.TempDir()
	self := replica.Peer{Node: "n1", Incarnation: "a"}
	h := replica.NewHost(replica.HostConfig{Self: self, Send: func(replica.Peer, []replica.Envelope) {}})
	defer h.Close()
	if err := replica.Bootstrap(nil, dir+"/state", []uint64{1, 2}); err != nil {
		t.Fatal(err)
	}
	l, err := wal.Open(dir+"/log", wal.Options{Durability: wal.DurabilityNone})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	st, err := replica.OpenStorage(l, nil, dir+"/state")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Start(replica.Config{Group: "g", ID: 1, Peers: map[uint64]replica.Peer{1: self, 2: {Node: "n2", Incarnation: "old"}}, Storage: st}); err != nil {
		t.Fatal(err)
	}
	if !h.KnowsOther("n2", "new") {
		t.Fatal("n2 under a new incarnation: not known as other")
	}
	if h.KnowsOther("n2", "old") || h.KnowsOther("n3", "x") {
		t.Fatal("known as other under its own incarnation, or a node of no group")
	}
}

// A new group's replicas but its first leader do not campaign on their
// own: with the first leader down, the two others elect nobody over 50
// election timeouts (they would: two of three are a quorum). Asked to
// lead, one does; the first leader, started then, follows it.
func TestNewGroupAwaitsItsFirstLeader(t *testing.T) {
	c := newClusterWith(t, 3, clusterOptions{firstLeader: 1, down: []uint64{1}})
	c.paused.Store(true)
	for range 50 * 10 {
		for _, id := range []uint64{2, 3} {
			c.ticks[id] <- time.Now()
		}
	}
	for _, id := range []uint64{2, 3} {
		if lead, term, _ := c.group(id).Status(); lead != 0 || term != 0 {
			t.Fatalf("replica %d campaigned on its own, waiting for the first leader: leader %d at term %d", id, lead, term)
		}
	}
	c.paused.Store(false)
	if err := c.group(2).Lead(10 * time.Second); err != nil {
		t.Fatalf("asked to lead without the first leader: %v", err)
	}
	c.start(1)
	if lead := c.leader(); lead != 2 {
		t.Fatalf("the replicas agree on leader %d, not 2", lead)
	}
	got := acked{}
	if lost := c.propose(2, 0, 5, got); lost != 0 {
		t.Fatalf("%d proposals lost", lost)
	}
	c.agree(got)
}
