package actors

import (
	"fmt"

	"github.com/braidmq/braid/topology"
)

// NotOwnerError is returned when a request names a topic another node
// owns: this node does not activate it (two nodes serving one topic would
// give out the same offsets twice). The node's front-end forwards the
// request to Owner ("" for a layout written before nodes had ids, which the
// node that serves such topics owns).
type NotOwnerError struct {
	Topic string
	Owner string
	// Epoch is the layout epoch the record had (0: not read here).
	Epoch uint64
}

func (e *NotOwnerError) Error() string {
	return fmt.Sprintf("topic %s is owned by node %q, not this one", e.Topic, e.Owner)
}

// LayoutOwner is the owner of a topic's layout: the owner of its active
// segments (a topic is placed whole on one node today), or "" when they
// have none.
func LayoutOwner(l topology.Layout) string {
	for _, s := range l.Segments {
		if s.State == topology.StateActive && s.Owner != "" {
			return s.Owner
		}
	}
	return ""
}
