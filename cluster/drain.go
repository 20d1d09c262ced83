package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/nats-io/nats.go"

	"github.com/braidmq/braid/actors"
	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/cluster/clusterpb"
	"github.com/braidmq/braid/routing"
)

// Drain: `braid node drain <id>` moves a node's key ranges away the way a
// loss does, but with the node's help: for each topic it owns, it stops
// the topic here (answering every append it took) and seals its active
// segments in metadata with successors on the least loaded other node
// (actors.Manager.MoveOut; no data copied: the sealed segments stay here
// and are read here while the node runs), then has the new owner take its
// consumer groups over at once. Appends that reach the topic meanwhile
// are refused with SEGMENT_SEALED naming the epoch of the move: producers
// refresh the layout and resend (the Go client does so by itself, in key
// order), so none is lost or stored twice. A draining node takes no new
// topics (its lease says so, and placement passes it by). The segments it
// holds of topics whose home is another node are moved by that home, which
// it asks to (placement.go). Its sealed segments stay readable while it
// runs; stop it once nothing reads them.

// drainSubject is where a node takes drain requests for itself.
func drainSubject(node string) string { return "braid.cluster.drain." + node }

// movedSubject carries the URI of a topic that moved: every node forgets
// which node it remembered as its owner.
const movedSubject = "braid.cluster.moved"

// drainTimeout bounds one drain.
const drainTimeout = 10 * time.Minute

// startDrainService subscribes to drain requests for this node and to
// the moves of topics.
func (n *Member) startDrainService() error {
	if _, err := n.nc.Subscribe(drainSubject(n.nodeID), func(m *nats.Msg) {
		go func() {
			reply, err := n.drain()
			var data []byte
			if err != nil {
				e := api.AsError(err)
				data, _ = json.Marshal(map[string]any{"error": e.Message, "code": e.Code.Number})
			} else {
				data, _ = json.Marshal(reply)
			}
			_ = m.Respond(data)
		}()
	}); err != nil {
		return err
	}
	if _, err := n.nc.Subscribe(movedSubject, func(m *nats.Msg) { n.forgetOwner(string(m.Data)) }); err != nil {
		return err
	}
	_, err := n.nc.Subscribe(nodesChangedSubject, func(m *nats.Msg) {
		if n.members != nil && string(m.Data) != n.nodeID {
			go n.members.countNodes()
			n.members.kickRenewal() // the node may have handed the entry role over
		}
	})
	return err
}

// nodeDrain serves node.drain on any node: it asks the named node.
func (n *Member) NodeDrain(ctx context.Context, body []byte) (any, error) {
	var req api.NodeDrainRequest
	if err := json.Unmarshal(body, &req); err != nil || req.Node == "" {
		return nil, api.Errorf(api.CodeBadRequest, "node.drain wants {\"node\": \"<id>\"}")
	}
	if req.Node == n.nodeID {
		return n.drain()
	}
	m, err := n.nc.Request(drainSubject(req.Node), nil, drainTimeout)
	if errors.Is(err, nats.ErrNoResponders) {
		return nil, api.Errorf(api.CodeNotFound, "no live node %q", req.Node)
	}
	if err != nil {
		return nil, api.Errorf(api.CodeUnavailable, "draining node %s: %v", req.Node, err)
	}
	var failed struct {
		Error string `json:"error"`
		Code  int    `json:"code"`
	}
	if json.Unmarshal(m.Data, &failed) == nil && failed.Error != "" {
		code, ok := api.CodeByNumber(failed.Code)
		if !ok {
			code = api.CodeInternal
		}
		return nil, api.Errorf(code, "%s", failed.Error)
	}
	var reply api.NodeDrainReply
	if err := json.Unmarshal(m.Data, &reply); err != nil {
		return nil, api.Errorf(api.CodeInternal, "node %s answered the drain with %q", req.Node, m.Data)
	}
	return reply, nil
}

// drain moves every topic this node owns to other nodes.
func (n *Member) drain() (api.NodeDrainReply, error) {
	begin := n.clock.Now()
	reply := api.NodeDrainReply{Node: n.nodeID}
	if n.members == nil {
		return reply, api.Errorf(api.CodeLayoutRefused, "node %s is not in a cluster: there is nowhere to move its topics", n.nodeID)
	}
	n.draining.Store(true)
	n.log.Warn("draining: moving every topic this node owns to other nodes", "node", n.nodeID)
	ctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
	defer cancel()
	// No node may place a new topic here once the drain has looked: wait
	// for the lease to say so, have every node read the leases again, and
	// let views older than that age out (placement reads the leases again
	// when its view is older than placementViewAge).
	if err := n.members.awaitDrainingLease(ctx); err != nil {
		return reply, api.Errorf(api.CodeUnavailable, "node %s could not record that it drains: %v", n.nodeID, err)
	}
	_ = n.nc.Publish(nodesChangedSubject, []byte(n.nodeID))
	select {
	case <-time.After(2 * placementViewAge):
	case <-ctx.Done():
		return reply, api.Errorf(api.CodeTimeout, "draining node %s: %v", n.nodeID, ctx.Err())
	}
	// Two passes: a topic placed here by a node that had not seen the
	// drain yet is moved by the second.
	for pass := 0; pass < 2; pass++ {
		uris, err := n.ownedTopics(ctx)
		if err != nil {
			return reply, err
		}
		for _, uri := range uris {
			name, err := routing.ParseTopic(uri)
			if err != nil {
				continue
			}
			to := n.PlaceTopic(uri)
			if to == n.nodeID {
				return reply, api.Errorf(api.CodeUnavailable, "no other live node to move %s to", uri)
			}
			moved, groups, err := n.moveTopicTo(ctx, name, to)
			if err != nil {
				reply.Failed = append(reply.Failed, fmt.Sprintf("%s: %v", uri, err))
				continue
			}
			if moved == 0 {
				continue
			}
			reply.Topics++
			reply.Segments += moved
			reply.Groups += groups
		}
	}
	// The segments this node holds of other nodes' topics: their homes
	// move them.
	hosted, failed := n.evictHosted(ctx)
	reply.Segments += hosted
	reply.Failed = append(reply.Failed, failed...)
	reply.Seconds = time.Since(begin).Seconds()
	n.log.Warn("drained: the node owns no active segment; its sealed ones are read here while it runs", "node", n.nodeID,
		"topics", reply.Topics, "segments", reply.Segments, "groups", reply.Groups, "failed", len(reply.Failed), "took", time.Since(begin))
	return reply, nil
}

// moveTopicTo moves topic name, homed here, to node to: its active
// segments sealed and given successors there (MoveOut), every node told,
// and its consumer groups handed over. It returns the segments moved and
// the groups handed over.
func (n *Member) moveTopicTo(ctx context.Context, name routing.TopicName, to string) (moved, groups int, err error) {
	_, ids, err := n.topics.MoveOut(ctx, name, to)
	if err != nil {
		return 0, 0, err
	}
	_ = n.nc.Publish(movedSubject, []byte(name.String()))
	if len(ids) == 0 {
		return 0, 0, nil
	}
	return len(ids), n.handGroupsOver(name.String(), to), nil
}

// ownedTopics lists the topics whose active segments this node owns:
// the active ones here, and the others by their records.
func (n *Member) ownedTopics(ctx context.Context) ([]string, error) {
	seen := map[string]bool{}
	var out []string
	for _, t := range n.topics.All() {
		if actors.LayoutOwner(t.Layout()) == n.nodeID && !seen[t.Topic()] {
			seen[t.Topic()] = true
			out = append(out, t.Topic())
		}
	}
	all, err := n.meta.AllTopics(ctx)
	if err != nil {
		return nil, api.Errorf(api.CodeUnavailable, "listing topics: %v", err)
	}
	for _, uri := range all {
		if seen[uri] {
			continue
		}
		name, err := routing.ParseTopic(uri)
		if err != nil {
			continue
		}
		rec, _, err := n.meta.Topic(ctx, name)
		if err == nil && actors.LayoutOwner(rec.Layout) == n.nodeID {
			seen[uri] = true
			out = append(out, uri)
		}
	}
	return out, nil
}

// handGroupsOver has node to take over the consumer groups of topic uri
// held here; it returns how many it took.
func (n *Member) handGroupsOver(uri, to string) int {
	addr, err := n.members.actorAddrOf(to)
	if err != nil {
		return 0
	}
	pid := actor.NewPID(addr, unitsActorName)
	taken := 0
	for _, kind := range []string{GroupStream, GroupQueue} {
		groups, _ := n.groupsOf(kind)
		for _, sub := range groups.Subscriptions(uri) {
			res, err := n.system.Root.RequestFuture(pid, &clusterpb.GroupAdopt{Kind: kind, Topic: uri, Subscription: sub}, 2*adminTimeout).Result()
			if r, ok := res.(*clusterpb.GroupAdoptReply); err == nil && ok && r.ErrorCode == 0 {
				taken++
				continue
			}
			n.log.Error("draining: a consumer group was not taken over; it moves at its next request while this node runs",
				"topic", uri, "subscription", sub, "kind", kind, "to", to, "err", err, "reply", res)
		}
	}
	return taken
}

// serveGroupAdopt takes a group's state over now (a drain asks).
func (n *Member) serveGroupAdopt(req *clusterpb.GroupAdopt) *clusterpb.GroupAdoptReply {
	groups, err := n.groupsOf(req.Kind)
	if err == nil {
		err = n.PrepareGroup(req.Kind)(req.Topic, req.Subscription, groups.Dir(req.Topic, req.Subscription))
	}
	if err != nil {
		e := api.AsError(err)
		return &clusterpb.GroupAdoptReply{ErrorCode: int32(e.Code.Number), Error: e.Message}
	}
	return &clusterpb.GroupAdoptReply{}
}
