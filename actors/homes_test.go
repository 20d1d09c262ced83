package actors

import (
	"testing"
	"time"

	"github.com/braidmq/braid/meta"
	"github.com/braidmq/braid/topology"
)

// TestNeverHere: a sealed segment this node owns but holds no directory of
// reads as empty only when its topic was made after this data directory
// (beyond the nodes' clock skew): then nothing of it was ever written
// here. A topic older than the directory (the disk was replaced since)
// is data lost, and stays UNAVAILABLE; so does any topic when the
// directory's age is unknown.
func TestNeverHere(t *testing.T) {
	since := time.Date(2026, 12, 7, 3, 0, 0, 0, time.UTC)
	m := &Manager{cfg: Config{DataSince: since}}
	for _, c := range []struct {
		created time.Time
		want    bool
	}{
		{since.Add(time.Minute), true},
		{since.Add(clockSkew / 2), false}, // within the clocks' skew
		{since.Add(-time.Hour), false},    // the disk is newer: data lost
		{time.Time{}, false},
	} {
		if got := m.neverHere(meta.TopicRecord{Created: c.created}); got != c.want {
			t.Errorf("topic made at %v, directory at %v: neverHere %v, want %v", c.created, since, got, c.want)
		}
	}
	unknown := &Manager{}
	if unknown.neverHere(meta.TopicRecord{Created: since}) {
		t.Error("neverHere without the directory's age")
	}
}

// TestReplacedHome: a node is the home of a replicated topic by name only
// when the home segment's copies name it under another incarnation (its
// data directory was replaced): it leaves the topic to a node that holds
// a copy. Under its own incarnation, or for a topic of one copy, it is
// the home.
func TestReplacedHome(t *testing.T) {
	m := &Manager{cfg: Config{NodeID: "n1", Incarnation: "new"}}
	layout := func(reps ...topology.Replica) topology.Layout {
		return topology.Layout{Segments: []topology.Segment{
			{ID: 0, State: topology.StateSealed, Owner: "n1"},
			{ID: 1, State: topology.StateActive, Owner: "n1", Range: topology.Range{Lo: 0, Hi: 1 << 63}, Replicas: reps},
		}}
	}
	if other, ok := m.replacedHome(layout(topology.Replica{Node: "n1", Incarnation: "old"}, topology.Replica{Node: "n2", Incarnation: "b"})); !ok || other != "n2" {
		t.Fatalf("replaced: %q %v, want n2 true", other, ok)
	}
	if _, ok := m.replacedHome(layout(topology.Replica{Node: "n1", Incarnation: "new"}, topology.Replica{Node: "n2", Incarnation: "b"})); ok {
		t.Fatal("the home under its own incarnation taken for replaced")
	}
	if _, ok := m.replacedHome(layout()); ok {
		t.Fatal("a topic of one copy taken for replaced")
	}
}
