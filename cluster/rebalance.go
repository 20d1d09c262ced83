package cluster

import (
	"context"
	"encoding/json"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/braidmq/braid/actors"
	"github.com/braidmq/braid/placement"
	"github.com/braidmq/braid/routing"
)

// Rebalancing: load spreads over machines by topics. The entry node
// compares, every RebalanceInterval, the active segments each live node
// owns (as their leases recorded them); when the most loaded node owns at
// least placement.RebalanceGap more than the least loaded, it asks the most loaded
// to move topics worth up to half the difference to the least loaded one,
// the way a drain moves them (actors.Manager.MoveOut: sealed in metadata,
// successors there, consumer groups handed over; producers resend what
// met the move). A topic larger than half the difference stays, so that
// two nodes never trade one topic back and forth. A node that joins a
// loaded cluster so receives topics, not only new ones.

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
func (n *Member) startRebalancer() error {
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
// when they differ by placement.RebalanceGap active segments or more.
func (n *Member) rebalanceOnce() {
	move, ok := placement.Rebalance(placementNodes(n.members.liveNodes(0)))
	if !ok {
		return
	}
	body, _ := json.Marshal(moveRequest{To: move.To, Segments: move.Segments})
	m, err := n.nc.Request(moveSubject(move.From), body, drainTimeout)
	if err != nil {
		n.log.Warn("rebalancing: the most loaded node did not answer", "node", move.From, "err", err)
		return
	}
	var reply moveReply
	_ = json.Unmarshal(m.Data, &reply)
	n.rebalanced.Add(float64(reply.Topics))
	n.log.Info("rebalanced: topics moved from the most to the least loaded node", "from", move.From, "to", move.To,
		"segments_apart", 2*move.Segments, "topics", reply.Topics, "segments", reply.Segments, "err", reply.Error)
}

// moveTopics moves active topics this node owns, worth up to segments
// active segments, to node to (placement.PickTopics).
func (n *Member) moveTopics(to string, segments int) (topics, moved int) {
	var cands []placement.Candidate
	for _, t := range n.topics.All() {
		l := t.Layout()
		if actors.LayoutOwner(l) == n.nodeID {
			cands = append(cands, placement.Candidate{Topic: t.Topic(), Segments: len(l.OwnedActive(n.nodeID))})
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
	defer cancel()
	for _, c := range placement.PickTopics(cands, segments) {
		name, err := routing.ParseTopic(c.Topic)
		if err != nil {
			continue
		}
		_, ids, err := n.topics.MoveOut(ctx, name, to)
		if err != nil {
			n.log.Warn("rebalancing: a topic was not moved", "topic", c.Topic, "to", to, "err", err)
			continue
		}
		_ = n.nc.Publish(movedSubject, []byte(c.Topic))
		if len(ids) == 0 {
			continue
		}
		topics++
		moved += len(ids)
		n.handGroupsOver(c.Topic, to)
	}
	return topics, moved
}
