package cluster

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/braidmq/braid/actors"
	"github.com/braidmq/braid/meta"
	"github.com/braidmq/braid/routing"
)

// Node loss, absorbed by the DAG. A topic whose owner's lease has run out
// is moved by the first node that needs it (a request for it reached
// this node): it seals the lost node's active segments in metadata and
// gives each a successor with its range on a live node (placeTopic), in
// one compare-and-swap of the topic's record (actors.Manager.Relocate).
// The new owner activates the topic from the new record and takes the
// appends of those key ranges; the sealed segments stay on the lost
// node's disk, and readers read them there once it is back (ordered
// consumers wait for them, by the ordering rule).
//
// Safety: a node takes appends only until its lease's expiry less a
// margin (fence), so once the lease has run out nothing more lands in
// the segments being sealed, and the node learns the new layout before it
// serves again (rejoin).
//
// Topics nobody uses stay as they are until somebody does: moving them
// costs nothing then, and a million idle topics are not rewritten at
// once.

// ownerGone reports whether the node named by a layout's owner is gone:
// another node whose lease has run out (not merely late at this node's
// last count: its lease is read again to be sure).
func (n *Member) ownerGone(owner string) bool {
	node := n.OwnerNode(owner)
	m := n.members
	if m == nil || node == "" || node == n.nodeID {
		return false
	}
	if r, ok := m.liveView()[node]; ok && m.holds(r) {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), m.ttl/3)
	defer cancel()
	cur, _, err := n.meta.NodeLease(ctx, node)
	if err != nil {
		// Unknown (the store is not answering): not gone, as far as this
		// node can tell; requests for its topics are refused meanwhile.
		return !m.isLive(node)
	}
	return !m.holds(cur)
}

// ownerSilent says whether the node named by a layout's owner, live by
// its lease or not, is taken for down by this node's replica host: none
// of its raft batches came for --raft-tick x 10 (replica.Host.Down). A
// replicated topic it owns can move before its lease lapses, fenced by
// sealing its groups (takeOver, silent).
func (n *Member) ownerSilent(owner string) bool {
	return n.raftSilent(n.OwnerNode(owner))
}

// raftSilent says whether this node's replica host takes node for down,
// and its lease, as last read, does not say otherwise: a process started
// after it went silent is another (its raft batches have not come yet),
// and one that renewed its lease since is alive, cut off from its raft
// peers only (the lease decides then).
func (n *Member) raftSilent(node string) bool {
	if n.replicas == nil || node == "" || node == n.nodeID {
		return false
	}
	since, down := n.replicas.Silent(node)
	if !down {
		return false
	}
	if n.members != nil {
		if r, ok := n.members.liveView()[node]; ok && aliveSince(r, since) {
			return false
		}
	}
	return true
}

// aliveSince says whether lease r shows its node alive after since: a
// process started after it, or a renewal written after it (less a slack).
func aliveSince(r meta.NodeRecord, since time.Time) bool {
	return r.Started > since.UnixMilli() || r.Renewed > since.Add(silentRenewalSlack).UnixMilli()
}

// confirmSilent reads node's lease again before its topic is moved for
// its silence: the view raftSilent used may be older than its restart.
// A lease that cannot be read does not confirm it.
func (n *Member) confirmSilent(ctx context.Context, node string) bool {
	since, down := n.replicas.Silent(node)
	if !down {
		return false
	}
	r, _, err := n.meta.NodeLease(ctx, node)
	return err == nil && !aliveSince(r, since)
}

// ownerMayBeReplaced says, from this node's replica host's peers alone,
// whether the node named by a layout's owner may have come back with a
// new data directory: some replica here knows it under an older
// incarnation than its lease's.
func (n *Member) ownerMayBeReplaced(owner string) bool {
	node := n.OwnerNode(owner)
	if n.replicas == nil || n.members == nil || node == "" || node == n.nodeID {
		return false
	}
	r, ok := n.members.liveView()[node]
	return ok && r.Incarnation != "" && n.replicas.KnowsOther(node, r.Incarnation)
}

// ownerReplaced says whether the node named by a layout's owner runs
// under another incarnation (as this node last counted the leases) than
// the one this node's replicas of topic name know it by: it came back
// with an empty data directory and holds no copy of the topic; a replica
// here moves the topic as off a silent home.
func (n *Member) ownerReplaced(name routing.TopicName, owner string) bool {
	node := n.OwnerNode(owner)
	if n.replicas == nil || n.members == nil || node == "" || node == n.nodeID {
		return false
	}
	r, ok := n.members.liveView()[node]
	return ok && n.replicaKnowsOther(name, node, r.Incarnation)
}

// replicaKnowsOther says whether one of this node's replicas of topic
// name's units knows node under another incarnation than inc.
func (n *Member) replicaKnowsOther(name routing.TopicName, node, inc string) bool {
	if inc == "" {
		return false
	}
	for _, g := range n.replicas.Groups(name.String() + "#") {
		if _, sealed := g.Sealed(); sealed {
			continue // a sealed unit's copies may name a node as it was
		}
		if p, ok := g.PeerOn(node); ok && p.Incarnation != inc {
			return true
		}
	}
	return false
}

// confirmReplaced reads node's lease again before topic name is moved
// off it for its replaced directory (ownerReplaced).
func (n *Member) confirmReplaced(ctx context.Context, name routing.TopicName, node string) bool {
	r, _, err := n.meta.NodeLease(ctx, node)
	if err != nil || n.members == nil || !n.members.holds(r) || r.Incarnation == "" {
		return false
	}
	rec, _, err := n.meta.Topic(ctx, name)
	if err != nil || actors.LayoutOwner(rec.Layout) != node {
		return false
	}
	for _, s := range rec.Layout.Active() {
		if s.Range.Lo == 0 && len(s.Replicas) > 0 {
			// The home segment's copies name the home under an older
			// incarnation, and this node holds one of them.
			return s.ReplicaID(node, r.Incarnation) == 0 && s.ReplicaID(n.nodeID, n.cfg.Incarnation) > 0
		}
	}
	return false
}

// silentMoveTimeout bounds confirming a silent home's silence and sealing
// its groups.
const silentMoveTimeout = 3 * time.Second

// silentRenewalSlack is how long after a node's last raft batch a renewal
// of its lease may have been written before it: a renewal later than that
// says it is alive.
const silentRenewalSlack = 500 * time.Millisecond

// moveOffLost moves topic name off owner if owner is gone (its lease
// lapsed), reporting whether the caller should look the topic up again;
// if owner is only silent (a replicated topic, by its raft peers' word),
// it starts the move in the background (moveOffSilentSoon).
func (n *Member) moveOffLost(name routing.TopicName, owner string) bool {
	if n.ownerGone(owner) {
		return n.takeOver(name, n.OwnerNode(owner), false)
	}
	n.moveOffSilentSoon(name, owner)
	return false
}

// moveOffSilentSoon starts moving topic name off owner in the background
// if owner is silent and no move of the topic is under way here: the
// request that noticed is answered as before (its sender tries again),
// rather than waiting on a metadata store that may have lost its leader
// with the node. The move forgets the cached owner when it is done.
func (n *Member) moveOffSilentSoon(name routing.TopicName, owner string) {
	silent := n.ownerSilent(owner)
	if !silent && !n.ownerMayBeReplaced(owner) {
		return
	}
	tk := &n.takeovers
	tk.mu.Lock()
	_, busy := tk.doing[name.String()]
	if !silent && !busy {
		// Looked at once every replacedCheckEvery a topic: the replicas
		// of the topic here are scanned, then its record read.
		now := n.clock.Now()
		if now.Sub(tk.replacedAt[name.String()]) < replacedCheckEvery {
			busy = true
		} else {
			if tk.replacedAt == nil || len(tk.replacedAt) > 10_000 {
				tk.replacedAt = map[string]time.Time{}
			}
			tk.replacedAt[name.String()] = now
		}
	}
	tk.mu.Unlock()
	if !silent && !busy && !n.ownerReplaced(name, owner) {
		return
	}
	if !busy {
		go n.takeOver(name, n.OwnerNode(owner), true)
	}
}

// moveOffSilent moves, without waiting for requests to need them, the
// replicated topics homed on node, which this node's replicas took for
// down, that this node is to move (actors.Manager.SilentHomeTopics):
// their writes resume once the move is committed, before node's lease
// lapses. At most 8 at a time; it stops if node speaks again.
func (n *Member) moveOffSilent(node string) {
	if n.topics == nil || !n.raftSilent(node) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	topics := n.topics.SilentHomeTopics(ctx, node, n.raftSilent)
	ok := len(topics) > 0 && n.confirmSilent(ctx, node)
	cancel()
	if !ok {
		return
	}
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for _, name := range topics {
		if !n.raftSilent(node) {
			break
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			n.takeOver(name, node, true)
		}()
	}
	wg.Wait()
}

// takeovers serializes the moves of each topic on this node.
type takeovers struct {
	mu    sync.Mutex
	doing map[string]chan struct{}
	// replacedAt is when each topic was last checked for a replaced
	// home (at most every replacedCheckEvery).
	replacedAt map[string]time.Time
}

// replacedCheckEvery is how often a topic's home is checked for a
// replaced data directory (a read of the topic's record and the home's
// lease each time).
const replacedCheckEvery = 5 * time.Second

// takeOver moves the active segments of topic name that the lost node
// owns to a live node. It reports whether the caller should look the
// topic up again (it moved, here or by another node). silent: the lost
// node's lease has not lapsed, but its raft peers take it for down; its
// segments' groups are sealed from this node's replicas first (which
// fences it: it can commit nothing more in them), and the topic moves
// here. A topic whose segments are not all replicated here waits for the
// lease.
func (n *Member) takeOver(name routing.TopicName, lost string, silent bool) bool {
	uri := name.String()
	tk := &n.takeovers
	tk.mu.Lock()
	if tk.doing == nil {
		tk.doing = map[string]chan struct{}{}
	}
	if ch, busy := tk.doing[uri]; busy {
		tk.mu.Unlock()
		<-ch
		return true
	}
	ch := make(chan struct{})
	tk.doing[uri] = ch
	tk.mu.Unlock()
	defer func() {
		tk.mu.Lock()
		delete(tk.doing, uri)
		tk.mu.Unlock()
		close(ch)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	begin := n.clock.Now()
	var to string
	if silent {
		// Briefly: while the metadata store does not answer (it lost its
		// leader with the node), nothing can move, and the lease path
		// must not wait behind this one.
		sctx, scancel := context.WithTimeout(ctx, silentMoveTimeout)
		defer scancel()
		if !n.confirmSilent(sctx, lost) && !n.confirmReplaced(sctx, name, lost) {
			return false
		}
		err := n.topics.SealSilentOwner(sctx, name, lost)
		if errors.Is(err, actors.ErrNotReplicatedHere) {
			return false
		} else if err != nil {
			n.log.Warn("a topic's home is silent to its raft peers, but its segments could not be sealed from here: it moves when the home's lease lapses",
				"topic", uri, "home", lost, "err", err)
			return false
		}
		to = n.nodeID
	} else {
		to = n.PlaceTopic(uri)
	}
	if to == lost {
		return false
	}
	epoch, moved, err := n.topics.Relocate(ctx, name, lost, to)
	if err != nil {
		n.log.Error("moving the segments of a lost node failed; requests for the topic are refused until it succeeds", "topic", uri,
			"lost", lost, "to", to, "err", err)
		return false
	}
	if len(moved) > 0 {
		n.takeoverTotal.Inc()
		n.takeoverSeconds.Observe(time.Since(begin).Seconds())
		n.log.Warn("topic moved off a lost node", "topic", uri, "lost", lost, "to", to, "epoch", epoch, "successors", moved,
			"before_its_lease_lapsed", silent, "took", time.Since(begin).Round(time.Millisecond))
	}
	n.forgetOwner(uri)
	return true
}
