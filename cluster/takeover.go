package cluster

import (
	"context"
	"sync"
	"time"

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
	now := n.clock.Now()
	if r, ok := m.liveView()[node]; ok && r.Live(now) {
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
	return !cur.Live(now)
}

// takeovers serializes the moves of each topic on this node.
type takeovers struct {
	mu    sync.Mutex
	doing map[string]chan struct{}
}

// takeOver moves the active segments of topic name that the lost node
// owns to a live node. It reports whether the caller should look the
// topic up again (it moved, here or by another node).
func (n *Member) takeOver(name routing.TopicName, lost string) bool {
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
	to := n.PlaceTopic(uri)
	if to == lost {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	begin := n.clock.Now()
	epoch, moved, err := n.topics.Relocate(ctx, name, lost, to)
	if err != nil {
		n.log.Error("moving the segments of a lost node failed; requests for the topic are refused until it succeeds", "topic", uri,
			"lost", lost, "to", to, "err", err)
		return false
	}
	if len(moved) > 0 {
		n.takeoverTotal.Inc()
		n.takeoverSeconds.Observe(time.Since(begin).Seconds())
		n.log.Warn("topic moved off a lost node", "topic", uri, "lost", lost, "to", to, "epoch", epoch, "successors", moved)
	}
	n.forgetOwner(uri)
	return true
}
