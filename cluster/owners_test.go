package cluster

import (
	"fmt"
	"testing"
	"time"

	"github.com/braidmq/braid/clock"
	"github.com/braidmq/braid/meta"
	"github.com/braidmq/braid/placement"
	"github.com/braidmq/braid/topology"
)

func nodeWithLive(self string, live ...meta.NodeRecord) *Member {
	m := &membership{}
	set := map[string]meta.NodeRecord{}
	for _, r := range live {
		set[r.ID] = r
	}
	m.live.Store(&set)
	m.countedAt.Store(time.Now().Add(time.Hour).UnixNano()) // never read again (far past any mono time)
	return &Member{nodeID: self, members: m}
}

// TestPlacement: a new topic goes to the node with the least bytes/s, then
// the fewest segments; idle nodes share new topics evenly; alone, a node
// takes them all.
func TestPlacement(t *testing.T) {
	busy := nodeWithLive("a",
		meta.NodeRecord{ID: "a", BytesPerSec: 50 << 20},
		meta.NodeRecord{ID: "b", BytesPerSec: 3 << 20},
		meta.NodeRecord{ID: "c", BytesPerSec: 1 << 20, Segments: 10})
	for i := range 20 {
		if got := busy.PlaceTopic(fmt.Sprintf("topic://t/n/x%d", i)); got != "c" {
			t.Fatalf("placed on %s, want c (the least bytes/s)", got)
		}
	}
	crowded := nodeWithLive("a",
		meta.NodeRecord{ID: "a", Segments: 500},
		meta.NodeRecord{ID: "b", Segments: 10},
		meta.NodeRecord{ID: "c", Segments: 700})
	if got := crowded.PlaceTopic("topic://t/n/y"); got != "b" {
		t.Fatalf("placed on %s, want b (the fewest segments)", got)
	}
	idle := nodeWithLive("a", meta.NodeRecord{ID: "a"}, meta.NodeRecord{ID: "b"}, meta.NodeRecord{ID: "c"})
	count := map[string]int{}
	for i := range 300 {
		count[idle.PlaceTopic(fmt.Sprintf("topic://t/n/z%d", i))]++
	}
	for _, id := range []string{"a", "b", "c"} {
		if count[id] < 70 {
			t.Fatalf("300 topics over three idle nodes: %v", count)
		}
	}
	if got := nodeWithLive("solo").PlaceTopic("topic://t/n/w"); got != "solo" {
		t.Fatalf("a node alone placed a topic on %q", got)
	}
}

// TestSegmentPlacement: a topic's new segment goes to the least loaded
// node; among equally loaded nodes never to the home asking (it routes the
// topic's appends already), spread over the others; a joined idle node
// takes the segments of a loaded cluster; a draining node takes none.
func TestSegmentPlacement(t *testing.T) {
	idle := nodeWithLive("a", meta.NodeRecord{ID: "a"}, meta.NodeRecord{ID: "b"}, meta.NodeRecord{ID: "c"})
	count := map[string]int{}
	for i := range 300 {
		count[idle.PlaceSegment("topic://t/n/hot", topology.SegmentID(i))]++
	}
	if count["a"] != 0 || count["b"] < 100 || count["c"] < 100 {
		t.Fatalf("300 segments of a topic homed on a, over three idle nodes: %v", count)
	}
	joined := nodeWithLive("a",
		meta.NodeRecord{ID: "a", BytesPerSec: 20 << 20, Segments: 200},
		meta.NodeRecord{ID: "b", BytesPerSec: 20 << 20, Segments: 200},
		meta.NodeRecord{ID: "d"})
	for i := range 20 {
		if got := joined.PlaceSegment("topic://t/n/hot", topology.SegmentID(i)); got != "d" {
			t.Fatalf("segment %d placed on %s, want d (joined, idle)", i, got)
		}
	}
	loadedHome := nodeWithLive("a",
		meta.NodeRecord{ID: "a"},
		meta.NodeRecord{ID: "b", BytesPerSec: 5 << 20},
		meta.NodeRecord{ID: "c", BytesPerSec: 5 << 20, Draining: true})
	if got := loadedHome.PlaceSegment("topic://t/n/hot", 7); got != "a" {
		t.Fatalf("placed on %s, want a: the others are busier or draining", got)
	}
}

// TestPlacementLeavesOutLapsedLeases: when the view of the leases could
// not be read again (the metadata store electing a leader), a node whose
// lease has run out since, by this node's clock (no new revision of its
// record for a lease time), gets no new segment, though it is the least
// loaded in the view: Evict takes it for gone by the same reckoning, and
// a segment relocated off it must not be placed back on it.
func TestPlacementLeavesOutLapsedLeases(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_000_000, 0))
	n := &Member{nodeID: "a", clock: clk}
	m := &membership{n: n, sightings: placement.Sightings{TTL: 10 * time.Second}}
	n.members = m
	set := map[string]meta.NodeRecord{
		"a": {ID: "a", Segments: 5, Rev: 1, Expires: 1},
		"b": {ID: "b", Segments: 5, Rev: 2, Expires: 1},
		"c": {ID: "c", Rev: 3, Expires: 1},
	}
	m.live.Store(&set)
	m.countedAt.Store(n.mono().Add(time.Hour).UnixNano()) // not read again
	if got := n.PlaceSegment("topic://t/n/hot", 1); got != "c" {
		t.Fatalf("placed on %s, want c (the least loaded, its lease current)", got)
	}
	// A lease time on, b renewed (a new revision, read), c did not; the
	// wall clock stepped back an hour meanwhile, which changes nothing.
	clk.Advance(9 * time.Second)
	b := set["b"]
	b.Rev = 4
	set["b"] = b
	m.holds(b)
	clk.Jump(-time.Hour)
	clk.Advance(2 * time.Second)
	for i := range 50 {
		if got := n.PlaceSegment("topic://t/n/hot", topology.SegmentID(i)); got == "c" {
			t.Fatalf("segment %d placed on c, whose lease had run out", i)
		}
	}
}
