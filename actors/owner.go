package actors

import (
	"fmt"
	"slices"

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

// LayoutOwner is the owner of a topic's layout, its home: the owner of the
// active segment covering hash 0, where the topic's controller runs and
// every append is routed (its other segments may be on other nodes, see
// hosted.go), or "" when it has none (a layout written before nodes had
// ids).
func LayoutOwner(l topology.Layout) string {
	for _, s := range l.Segments {
		if s.State == topology.StateActive && s.Range.Lo == 0 {
			return s.Owner
		}
	}
	return ""
}

// replacedHome says whether this node is the home of layout l only by
// its id: the active segment covering hash 0 is replicated and names this
// node under another incarnation (its data directory was replaced), and
// returns the first other node that holds a copy.
func (m *Manager) replacedHome(l topology.Layout) (string, bool) {
	for _, s := range l.Segments {
		if s.State != topology.StateActive || s.Range.Lo != 0 || len(s.Replicas) == 0 {
			continue
		}
		if m.cfg.Incarnation == "" || s.ReplicaID(m.cfg.NodeID, m.cfg.Incarnation) > 0 {
			return "", false
		}
		for _, r := range s.Replicas {
			if r.Node != m.cfg.NodeID {
				return r.Node, true
			}
		}
	}
	return "", false
}

// HomeReplicas returns the replicas of the active segment covering hash 0
// of topic uri (nil when it is not replicated), and whether the topic is
// active here (reps is nil when not: ask its record): the nodes its
// consumer groups' state is replicated on (package cluster), so that a
// node that takes the topic over holds a copy of its groups' state too.
func (m *Manager) HomeReplicas(uri string) (reps []topology.Replica, active bool) {
	t, ok := m.Active(uri)
	if !ok {
		return nil, false
	}
	for _, s := range t.Layout().Segments {
		if s.State == topology.StateActive && s.Range.Lo == 0 {
			return slices.Clone(s.Replicas), true
		}
	}
	return nil, true
}
