package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/braidmq/braid/actors"
	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/meta"
	"github.com/braidmq/braid/placement"
	"github.com/braidmq/braid/routing"
	"github.com/braidmq/braid/topology"
)

// Segments across nodes: a topic's home (the node of its segment covering
// hash 0, where its controller runs and every append is routed) places
// each other segment a split or merge creates on the least loaded live
// node by the load the nodes' leases record — among equals another node
// than itself, then by a hash of the topic and segment — so that the
// children of a hot topic spread over the cluster (placeSegment). It relocates the
// segments of a node whose lease lapsed or that is being drained (evict;
// actors/placement.go). A drained node asks the home of each topic whose
// segments it owns to move them now (evictSubject), then waits for the
// records to show none.

// evictSubject is where a node takes requests to move a draining node's
// segments off one of the topics it is the home of (evictRequest).
func evictSubject(node string) string { return "braid.cluster.evict." + node }

// evictRequest asks a topic's home to move node's segments away.
type evictRequest struct {
	Topic string `json:"topic"`
	Node  string `json:"node"`
}

// placeSegment is the node a new segment of a topic goes to: among nodes
// equally loaded, another than this one (the topic's home, which routes
// every append of the topic already).
func (n *Member) PlaceSegment(topic string, seg topology.SegmentID) string {
	return n.place(topic+"#"+strconv.FormatUint(uint64(seg), 10), n.nodeID)
}

// evict says whether node must give up its segments (move): its lease
// lapsed (gone), or it is being drained.
func (n *Member) Evict(node string) (move, gone bool) {
	if n.members == nil || node == "" || node == n.nodeID {
		return false, false
	}
	if r, ok := n.members.liveView()[node]; ok && n.members.holds(r) {
		return placement.Evict(true, r.Draining, false)
	}
	return placement.Evict(false, false, n.ownerGone(node))
}

// startEvictService serves the requests of drained nodes to move their
// segments off a topic this node is the home of.
func (n *Member) startEvictService() error {
	_, err := n.nc.Subscribe(evictSubject(n.nodeID), func(m *nats.Msg) {
		go func() {
			var req evictRequest
			err := json.Unmarshal(m.Data, &req)
			var name routing.TopicName
			if err == nil {
				name, err = routing.ParseTopic(req.Topic)
			}
			if err == nil {
				err = n.topics.MoveSegmentsOff(name, req.Node)
			}
			reply := []byte("ok")
			if err != nil {
				reply = []byte(err.Error())
			}
			_ = m.Respond(reply)
		}()
	})
	return err
}

// hostedTopics lists the topics whose home is another node and that have
// active segments this node owns, with those homes.
func (n *Member) hostedTopics(ctx context.Context) (map[string]string, error) {
	all, err := n.meta.AllTopics(ctx)
	if err != nil {
		return nil, api.Errorf(api.CodeUnavailable, "listing topics: %v", err)
	}
	out := map[string]string{}
	for _, uri := range all {
		name, err := routing.ParseTopic(uri)
		if err != nil {
			continue
		}
		rec, _, err := n.meta.Topic(ctx, name)
		if err != nil {
			continue
		}
		if home := actors.LayoutOwner(rec.Layout); home != n.nodeID && len(rec.Layout.OwnedActive(n.nodeID)) > 0 {
			out[uri] = home
		}
	}
	return out, nil
}

// evictHosted has the homes of the topics this node holds segments of
// move them away (this node is draining), and waits until the records
// show none; it returns how many segments moved.
func (n *Member) evictHosted(ctx context.Context) (int, []string) {
	hosted, err := n.hostedTopics(ctx)
	if err != nil {
		return 0, []string{err.Error()}
	}
	moved := 0
	var failed []string
	for uri, home := range hosted {
		k, err := n.evictFrom(ctx, uri, home)
		moved += k
		if err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v", uri, err))
		}
	}
	return moved, failed
}

// evictFrom asks home to move this node's segments of topic uri until its
// record shows none, and returns how many there were.
func (n *Member) evictFrom(ctx context.Context, uri, home string) (int, error) {
	name, err := routing.ParseTopic(uri)
	if err != nil {
		return 0, err
	}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	before := -1
	for {
		rec, _, err := n.meta.Topic(ctx, name)
		if errors.Is(err, meta.ErrNotFound) {
			return 0, nil
		}
		if err == nil {
			owned := len(rec.Layout.OwnedActive(n.nodeID))
			if before < 0 {
				before = owned
			}
			if owned == 0 {
				return before, nil
			}
			if node, err := n.Target(actors.LayoutOwner(rec.Layout), false); err == nil {
				body, _ := json.Marshal(evictRequest{Topic: uri, Node: n.nodeID})
				_, _ = n.nc.Request(evictSubject(node), body, adminTimeout)
			}
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("its home (%s) did not move this node's segments in time", home)
		case <-tick.C:
		}
	}
}
