package cluster

import (
	"context"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/braidmq/braid/actors"
	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/cluster/clusterpb"
	"github.com/braidmq/braid/placement"
	"github.com/braidmq/braid/routing"
	"github.com/braidmq/braid/topology"
)

// MoveOffDamaged moves topic uri, homed here, to another live node: this
// node's copy of one of the topic's active replicated units lost entries
// it had stored (damage found at its start), so it cannot lead that
// unit's group, and the unit would take no writes while the topic stays
// (actors.Config.MoveOffDamaged). The move is a drain of the one topic:
// its active segments sealed and given successors on the other node (the
// damaged unit's end is agreed by its healthy replicas), its consumer
// groups handed over.
func (n *Member) MoveOffDamaged(uri string) {
	name, err := routing.ParseTopic(uri)
	if err != nil || n.members == nil {
		return
	}
	to := placement.Choose(placementNodes(n.members.liveNodes(placementViewAge)), uri, "", n.nodeID, true)
	if to == n.nodeID {
		n.log.Error("a topic whose copy here is damaged has no other live node to move to: the damaged unit takes no writes", "topic", uri)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	moved, groups, err := n.moveTopicTo(ctx, name, to)
	if err != nil {
		n.log.Error("moving a topic whose copy here is damaged failed: the damaged unit takes no writes until it moves", "topic", uri, "to", to, "err", err)
		return
	}
	n.log.Warn("topic moved off this node: its copy of a unit is damaged", "topic", uri, "to", to, "segments", moved, "groups", groups)
}

// ReportDamaged tells node home, the home of r's topic, that this node's
// copy of one of its units is damaged (actors.Config.ReportDamaged).
func (n *Member) ReportDamaged(home string, r actors.DamageReport) error {
	if home == n.nodeID {
		return n.topics.ReplicaDamaged(r)
	}
	addr, err := n.members.actorAddrOf(home)
	if err != nil {
		return err
	}
	req := &clusterpb.ReplicaDamaged{Topic: r.Topic.String(), Incarnation: r.Incarnation, Segment: uint64(r.Segment),
		Bucket: uint32(r.Bucket), Node: r.Node, NodeIncarnation: r.NodeIncarnation, Error: r.Err}
	res, err := n.system.Root.RequestFuture(actor.NewPID(addr, unitsActorName), req, remoteReadTimeout).Result()
	if err != nil {
		return api.Errorf(api.CodeUnavailable, "node %s did not take the damage report: %v", home, err)
	}
	if reply, ok := res.(*clusterpb.ReplicaDamagedReply); !ok || reply.ErrorCode != 0 {
		return api.Errorf(api.CodeUnavailable, "node %s did not take the damage report: %v", home, replyError(res))
	}
	return nil
}

// serveReplicaDamaged takes another node's report of its damaged copy of
// a unit of a topic homed here.
func (n *Member) serveReplicaDamaged(req *clusterpb.ReplicaDamaged) *clusterpb.ReplicaDamagedReply {
	name, err := routing.ParseTopic(req.Topic) // the rest is checked by ReplicaDamaged
	if err == nil {
		err = n.topics.ReplicaDamaged(actors.DamageReport{Topic: name, Incarnation: req.Incarnation, Segment: topology.SegmentID(req.Segment),
			Bucket: int(req.Bucket), Node: req.Node, NodeIncarnation: req.NodeIncarnation, Err: req.Error})
	}
	if err != nil {
		e := api.AsError(err)
		return &clusterpb.ReplicaDamagedReply{ErrorCode: int32(e.Code.Number), Error: e.Message}
	}
	return &clusterpb.ReplicaDamagedReply{}
}
