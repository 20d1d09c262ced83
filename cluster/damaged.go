package cluster

import (
	"context"

	"github.com/braidmq/braid/placement"
	"github.com/braidmq/braid/routing"
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
