package actors

import (
	"context"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/routing"
	"github.com/braidmq/braid/topology"
)

// Placement of the segments a layout change creates, and their relocation
// when their node goes (see hosted.go). The home keeps the segment
// covering hash 0 — that is what makes it the home — and asks
// Config.PlaceSegment where each other new segment goes; every
// ownerCheckEvery it asks Config.Evict whether a node owning one of its
// segments is gone (its lease lapsed) or being drained, and if so
// relocates that node's segments: sealed in metadata, successors with
// their ranges placed anew. The appends the home had sent the lost node
// and not had answered fail (UNAVAILABLE, within remoteTimeout); the
// producers resend them and they land in the successors.

// ownerCheckEvery is how often a home checks the nodes that own its
// segments.
const ownerCheckEvery = time.Second

// checkOwnersMsg asks a controller to check the owners of its segments.
type checkOwnersMsg struct{}

// place returns the node a new segment s goes to.
func (c *controller) place(s topology.Segment) string {
	m := c.t.mgr
	// Replicated segments stay with the home, which leads their groups;
	// their copies are what spreads (withReplicas).
	if m.cfg.RemoteUnits == nil || m.cfg.PlaceSegment == nil || s.Range.Lo == 0 || c.t.replicationFactor() > 1 && m.cfg.Replicas != nil {
		return m.cfg.NodeID
	}
	if node := m.cfg.PlaceSegment(c.t.uri, s.ID); node != "" {
		return node
	}
	return m.cfg.NodeID
}

// placeCreated gives each segment in created an owner: those without one,
// or all of them when replace, by place; the rest of next keeps its own
// (a layout written before nodes had ids gets this node's).
func (c *controller) placeCreated(next topology.Layout, created []topology.SegmentID, replace bool) topology.Layout {
	out := next
	out.Segments = slices.Clone(next.Segments)
	for i := range out.Segments {
		s := &out.Segments[i]
		if slices.Contains(created, s.ID) && (s.Owner == "" || replace) {
			s.Owner = c.place(*s)
		}
	}
	out = out.WithOwner(c.t.mgr.cfg.NodeID)
	return c.t.mgr.withReplicas(c.t.uri, out, created, c.t.mgr.cfg.NodeID, c.t.replicationFactor())
}

// remoteOf returns the owner of active segment s when its buckets write
// to another node, else "".
func (c *controller) remoteOf(s topology.Segment) string {
	if owner, remote := c.t.remoteOwner(s); remote {
		return owner
	}
	return ""
}

// scheduleOwnerCheck sends the controller a checkOwnersMsg after
// ownerCheckEvery while its layout has segments on other nodes (each check
// schedules the next; a stopped controller's is a dead letter). A topic
// all of whose segments are here costs no timer.
func (c *controller) scheduleOwnerCheck(ctx actor.Context) {
	if c.checking || c.t.mgr.cfg.Evict == nil || c.t.mgr.cfg.RemoteUnits == nil || len(c.otherOwners()) == 0 && !c.hasReplicated() {
		return
	}
	c.checking = true
	self, root := ctx.Self(), ctx.ActorSystem().Root
	time.AfterFunc(ownerCheckEvery, func() { root.Send(self, checkOwnersMsg{}) })
}

// otherOwners lists the other nodes that own active segments of the topic.
func (c *controller) otherOwners() []string {
	self := c.t.mgr.cfg.NodeID
	var owners []string
	for _, s := range c.rec.Layout.Active() {
		if s.Owner != "" && s.Owner != self && !slices.Contains(owners, s.Owner) {
			owners = append(owners, s.Owner)
		}
	}
	return owners
}

// checkOwners relocates the segments of every other node that owns some
// of this topic's active segments and must give them up.
func (c *controller) checkOwners(ctx actor.Context) {
	for _, owner := range c.otherOwners() {
		move, gone := c.t.mgr.cfg.Evict(owner)
		if !move {
			continue
		}
		if err := c.relocateFrom(ctx, owner, gone); err != nil {
			c.t.mgr.m.relocateFailures.Inc()
			c.t.mgr.log.Error("relocating the segments of a node that is gone or draining failed; trying again",
				"topic", c.t.uri, "node", owner, "err", err)
		}
	}
	c.countUnderReplicated()
	c.checkReplicas(ctx)
	c.repairSealed(ctx)
}

// MoveSegmentsOff activates topic name (this node is its home) and has its
// controller relocate the active segments node owns now (node is being
// drained and asked).
func (m *Manager) MoveSegmentsOff(name routing.TopicName, node string) error {
	if node == "" || node == m.cfg.NodeID {
		return api.Errorf(api.CodeInvalidArgument, "cannot move segments off node %q here", node)
	}
	t, err := m.TopicByName(name)
	if err != nil {
		return err
	}
	res, err := m.system.Root.RequestFuture(t.pid, moveOffReq{node: node}, 2*sealTimeout+remoteTimeout).Result()
	if err != nil {
		return api.Errorf(api.CodeTimeout, "moving the segments of %s off node %s: %v", name, node, err)
	}
	return res.(*changeResp).err
}

// moveOffReq asks a controller to relocate the active segments of node.
type moveOffReq struct{ node string }

// relocateFrom relocates the active segments node owns, placing their
// successors anew; nothing to do when it owns none. When node is gone, what
// was sent to it and not answered is answered UNAVAILABLE first rather than
// waited for (its lease has lapsed: it writes nothing more).
func (c *controller) relocateFrom(ctx actor.Context, node string, gone bool) error {
	self := c.t.mgr.cfg.NodeID
	owned := c.rec.Layout.OwnedActive(node)
	if len(owned) == 0 {
		return nil // relocated already, or it never owned any
	}
	st := c.t.state.Load()
	// abandon sends every bucket of owned an abandonMsg (with err: answer
	// what was sent to node; nil: write to it again).
	abandon := func(err error) {
		for _, id := range owned {
			for _, pid := range st.buckets[id] {
				ctx.Send(pid, abandonMsg{err: err})
			}
		}
	}
	if gone {
		abandon(api.Errorf(api.CodeUnavailable, "node %s, which holds segments %v of %s, is gone; resend", node, owned, c.t.uri))
	}
	// The successors are placed anew (placeCreated); self is where they
	// go when placement names no other node.
	_, err := c.change(ctx, &changeReq{op: topology.Relocate(owned, self), reason: "node-lost"})
	if err != nil && gone {
		// Not moved (the store did not take the change): the buckets write
		// to the node again, which may be back by the next check.
		abandon(nil)
	}
	return err
}

// elsewhere groups the segments ids that other nodes own by owner.
func (c *controller) elsewhere(ids []topology.SegmentID) map[string][]topology.SegmentID {
	out := map[string][]topology.SegmentID{}
	for _, id := range ids {
		if s, ok := c.rec.Layout.Segment(id); ok {
			if owner, remote := c.t.remoteOwner(s); remote {
				out[owner] = append(out[owner], id)
			}
		}
	}
	return out
}

// dropSegmentsElsewhere tells the nodes that own segments of t retention
// deleted to remove their logs; one that cannot be told (it is down) is
// logged and counted: its logs of them stay on its disk.
func (m *Manager) dropSegmentsElsewhere(t *Topic, byOwner map[string][]topology.SegmentID) {
	for owner, ids := range byOwner {
		ctx, cancel := context.WithTimeout(context.Background(), remoteTimeout)
		err := m.cfg.RemoteUnits.DropTopic(ctx, owner, t.name, t.incarnation, ids)
		cancel()
		if err != nil {
			m.m.dropFailures.Inc()
			m.log.Error("a node that owns segments retention deleted could not be told to remove their logs; they stay on its disk",
				"topic", t.uri, "node", owner, "segments", ids, "err", err)
		}
	}
}
