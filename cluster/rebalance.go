package cluster

import (
	"context"
	"encoding/json"
	"slices"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/braidmq/braid/actors"
	"github.com/braidmq/braid/meta"
	"github.com/braidmq/braid/routing"
)

// Rebalancing: load spreads over machines by topics. The entry node
// compares, every RebalanceInterval, the active segments each live node
// owns (as their leases recorded them); when the most loaded node owns at
// least rebalanceGap more than the least loaded, it asks the most loaded
// to move topics worth up to half the difference to the least loaded one,
// the way a drain moves them (actors.Manager.MoveOut: sealed in metadata,
// successors there, consumer groups handed over; producers resend what
// met the move). A topic larger than half the difference stays, so that
// two nodes never trade one topic back and forth. A node that joins a
// loaded cluster so receives topics, not only new ones.

// rebalanceGap is the smallest difference in active segments owned
// between the most and the least loaded node that moves topics.
const rebalanceGap = 4

// moveSubject is where a node takes requests to move topics away.
func moveSubject(node string) string { return "braid.cluster.move." + node }

// moveRequest asks a node to move topics worth up to Segments active
// segments to node To.
type moveRequest struct {
	To       string `json:"to"`
	Segments int    `json:"segments"`
}

type moveReply struct {
	Topics   int    `json:"topics"`
	Segments int    `json:"segments"`
	Error    string `json:"error,omitempty"`
}

// startRebalancer subscribes to move requests and, unless the interval is
// negative, compares the nodes' loads every interval while this node
// holds the entry role.
func (n *Node) startRebalancer() error {
	if n.members == nil {
		return nil
	}
	if _, err := n.nc.Subscribe(moveSubject(n.nodeID), func(m *nats.Msg) {
		go func() {
			var req moveRequest
			reply := moveReply{}
			if err := json.Unmarshal(m.Data, &req); err != nil || req.To == "" || req.Segments < 1 {
				reply.Error = "bad move request"
			} else {
				reply.Topics, reply.Segments = n.moveTopics(req.To, req.Segments)
			}
			data, _ := json.Marshal(reply)
			_ = m.Respond(data)
		}()
	}); err != nil {
		return err
	}
	every := n.cfg.RebalanceInterval
	if every < 0 {
		return nil
	}
	// Leases carry the loads: compare no more often than they renew.
	every = max(every, n.cfg.LeaseTTL)
	stop := n.members.stop
	go func() {
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if n.entry.Load() {
				n.rebalanceOnce()
			}
		}
	}()
	return nil
}

// rebalanceOnce moves topics from the most to the least loaded live node
// when they differ by rebalanceGap active segments or more.
func (n *Node) rebalanceOnce() {
	nodes := n.members.liveNodes(0)
	nodes = slices.DeleteFunc(nodes, func(r meta.NodeRecord) bool { return r.Draining })
	if len(nodes) < 2 {
		return
	}
	slices.SortFunc(nodes, func(a, b meta.NodeRecord) int { return a.Segments - b.Segments })
	cold, hot := nodes[0], nodes[len(nodes)-1]
	gap := hot.Segments - cold.Segments
	if gap < rebalanceGap {
		return
	}
	body, _ := json.Marshal(moveRequest{To: cold.ID, Segments: gap / 2})
	m, err := n.nc.Request(moveSubject(hot.ID), body, drainTimeout)
	if err != nil {
		n.log.Warn("rebalancing: the most loaded node did not answer", "node", hot.ID, "err", err)
		return
	}
	var reply moveReply
	_ = json.Unmarshal(m.Data, &reply)
	n.rebalanced.Add(float64(reply.Topics))
	n.log.Info("rebalanced: topics moved from the most to the least loaded node", "from", hot.ID, "to", cold.ID,
		"segments_apart", gap, "topics", reply.Topics, "segments", reply.Segments, "err", reply.Error)
}

// moveTopics moves active topics this node owns, worth up to segments
// active segments, to node to, smallest first.
func (n *Node) moveTopics(to string, segments int) (topics, moved int) {
	type cand struct {
		uri  string
		segs int
	}
	var cands []cand
	for _, t := range n.topics.All() {
		l := t.Layout()
		if actors.LayoutOwner(l) == n.nodeID {
			cands = append(cands, cand{t.Topic(), len(l.OwnedActive(n.nodeID))})
		}
	}
	slices.SortFunc(cands, func(a, b cand) int { return a.segs - b.segs })
	ctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
	defer cancel()
	for _, c := range cands {
		if moved+c.segs > segments {
			break
		}
		name, err := routing.ParseTopic(c.uri)
		if err != nil {
			continue
		}
		_, ids, err := n.topics.MoveOut(ctx, name, to)
		if err != nil {
			n.log.Warn("rebalancing: a topic was not moved", "topic", c.uri, "to", to, "err", err)
			continue
		}
		_ = n.nc.Publish(movedSubject, []byte(c.uri))
		if len(ids) == 0 {
			continue
		}
		topics++
		moved += len(ids)
		n.handGroupsOver(c.uri, to)
	}
	return topics, moved
}
