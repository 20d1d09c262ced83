package placement

import (
	"slices"

	"github.com/cespare/xxhash/v2"
)

// Node is what placement knows of a live node: what its lease recorded at
// its last renewal.
type Node struct {
	ID string
	// BytesPerSec is what the node made durable per second, measured
	// between its last renewals; Segments the active segments it owns.
	BytesPerSec float64
	Segments    int
	// Draining says the node takes nothing new: it is being drained, or
	// it is starting (its lease taken, its topics not yet recovered).
	Draining bool
}

// Load weights: nodes whose rates differ by less than a MiB/s, and whose
// active segments differ by less than 64, count as equally loaded (their
// leases' figures are up to a renewal old, and a few segments or a burst
// are not worth skewing placement for).
const (
	bytesStep    = 1 << 20
	segmentsStep = 64
)

// Choose returns the node a new topic (key its URI) or segment (key its
// topic and id) goes to among the live nodes: the least loaded by the
// load their leases recorded (bytes/s made durable by the MiB/s, then
// active segments by the 64), and among equals one other than avoid (""
// for none), then the one a hash of key and the node's id ranks first, so
// that what is created while the nodes are idle spreads evenly. Draining
// nodes, and self when selfDraining (its own view may predate its lease
// saying so), take nothing. With one live node or none, or none that may
// take it, it returns self.
func Choose(nodes []Node, key, avoid, self string, selfDraining bool) string {
	if len(nodes) <= 1 {
		return self
	}
	best, bestKey := "", [4]uint64{}
	for _, r := range nodes {
		if r.Draining || r.ID == self && selfDraining {
			continue
		}
		avoided := uint64(0)
		if r.ID == avoid {
			avoided = 1
		}
		k := [4]uint64{uint64(r.BytesPerSec / bytesStep), uint64(r.Segments / segmentsStep), avoided, nodeHash(key, r.ID)}
		if best == "" || slices.Compare(k[:], bestKey[:]) < 0 {
			best, bestKey = r.ID, k
		}
	}
	if best == "" {
		return self
	}
	return best
}

// Replicas returns where the n copies of a segment owned by owner go (key
// its topic and id): owner first, then up to n-1 other live nodes that
// take new work, ranked as Choose ranks them (the least loaded, then by a
// hash of key and the node's id, so that the copies of many segments
// spread evenly). Fewer live nodes give fewer copies.
func Replicas(nodes []Node, key, owner string, n int) []string {
	out := []string{owner}
	type ranked struct {
		id string
		k  [3]uint64
	}
	var others []ranked
	for _, r := range nodes {
		if r.ID == owner || r.Draining {
			continue
		}
		others = append(others, ranked{r.ID, [3]uint64{uint64(r.BytesPerSec / bytesStep), uint64(r.Segments / segmentsStep), nodeHash(key, r.ID)}})
	}
	slices.SortFunc(others, func(a, b ranked) int { return slices.Compare(a.k[:], b.k[:]) })
	for _, r := range others {
		if len(out) >= n {
			break
		}
		out = append(out, r.id)
	}
	return out
}

// nodeHash ranks node id among equals for key. xxhash, not FNV: FNV-1a of
// keys and ids that differ only in their last bytes ranks one node first
// for half the keys.
func nodeHash(key, id string) uint64 {
	h := xxhash.New()
	_, _ = h.WriteString(key)
	_, _ = h.Write([]byte{0})
	_, _ = h.WriteString(id)
	return h.Sum64()
}
