package placement

import (
	"cmp"
	"slices"
)

// RebalanceGap is the smallest difference in active segments owned
// between the most and the least loaded live node that moves topics.
const RebalanceGap = 4

// Move is a rebalancing move: node From moves topics worth up to Segments
// active segments to node To.
type Move struct {
	From, To string
	Segments int
}

// Rebalance compares the live nodes' active segments (draining nodes left
// out: they are emptied otherwise) and, when the most loaded owns at
// least RebalanceGap more than the least loaded, returns the move of half
// the difference between them. Among equally loaded nodes the one first
// by id is taken, so that every node decides alike.
func Rebalance(nodes []Node) (Move, bool) {
	live := slices.DeleteFunc(slices.Clone(nodes), func(n Node) bool { return n.Draining })
	if len(live) < 2 {
		return Move{}, false
	}
	slices.SortFunc(live, func(a, b Node) int {
		return cmp.Or(cmp.Compare(a.Segments, b.Segments), cmp.Compare(a.ID, b.ID))
	})
	cold, hot := live[0], live[len(live)-1]
	gap := hot.Segments - cold.Segments
	if gap < RebalanceGap {
		return Move{}, false
	}
	return Move{From: hot.ID, To: cold.ID, Segments: gap / 2}, true
}

// Candidate is a topic a node may move: its URI and the active segments
// it owns of it.
type Candidate struct {
	Topic    string
	Segments int
}

// PickTopics chooses the topics a move of up to budget active segments
// takes, smallest first, and stops at the first that would go over: a
// topic larger than what is left stays, so that two nodes never trade one
// topic back and forth. Equal sizes go by URI.
func PickTopics(cands []Candidate, budget int) []Candidate {
	sorted := slices.Clone(cands)
	slices.SortFunc(sorted, func(a, b Candidate) int {
		return cmp.Or(cmp.Compare(a.Segments, b.Segments), cmp.Compare(a.Topic, b.Topic))
	})
	var out []Candidate
	taken := 0
	for _, c := range sorted {
		if taken+c.Segments > budget {
			break
		}
		taken += c.Segments
		out = append(out, c)
	}
	return out
}
