package consumers

import (
	"testing"

	"github.com/braidmq/braid/topology"
)

// After a rebucket for more consumers, the predecessor drains first; then
// every consumer holds a unit of the successor, and none is left idle on
// the drained predecessor (apache/pulsar#26434 left consumers idle there).
func TestRebucketDrainedPredecessorIsNotAssigned(t *testing.T) {
	src := newTestSource(t, 1, 2) // one segment, two buckets
	seq := produceKeys(src, 20, 40, 0)
	h := newHarness(t, src)
	order := newKeyOrder(t)
	consumers := []string{"a", "b", "c", "d"}
	for _, c := range consumers {
		h.join(c)
	}
	busy, got := 0, 0
	for _, c := range consumers {
		msgs, assigned := h.fetch(c, 1)
		if assigned > 0 {
			busy++
		}
		order.see(msgs)
		h.ackAll(c, msgs)
		got += len(msgs)
	}
	if busy != 2 {
		t.Fatalf("%d consumers busy on 2 units, want 2", busy)
	}
	src.reshape(func(l topology.Layout) (topology.Layout, error) { return l.Rebucket(0, 4) })
	produceKeys(src, 20, 40, seq)
	before := h.m.Reassignments()

	// Drain everything, in order, across the consumers.
	for round := 0; got < 80 && round < 200; round++ {
		for _, c := range consumers {
			msgs, _ := h.fetch(c, 100)
			order.see(msgs)
			h.ackAll(c, msgs)
			got += len(msgs)
		}
	}
	if got != 80 {
		t.Fatalf("delivered %d of 80", got)
	}
	st := h.stats()
	if len(st.Drained) != 1 || st.Drained[0] != 0 {
		t.Fatalf("drained %v, want [0]", st.Drained)
	}
	for _, c := range st.Consumers {
		if c.Idle || c.Assigned != 1 {
			t.Errorf("consumer %s: assigned %d, idle %v; want one unit each", c.Name, c.Assigned, c.Idle)
		}
	}
	for _, u := range st.Readable {
		if u.Segment == 0 {
			t.Errorf("unit %v of the drained predecessor is still readable", u)
		}
	}
	// The predecessor's units went away drained, the successor's were
	// assigned fresh: nothing was taken from a consumer.
	if got := h.m.Reassignments() - before; got != 0 {
		t.Errorf("%d reassignments, want none", got)
	}
}

// A consumer that leaves releases its units: each counts as a
// reassignment.
func TestReassignmentsCountReleasedUnits(t *testing.T) {
	src := newTestSource(t, 2, 4)
	h := newHarness(t, src)
	h.join("a")
	h.join("b")
	h.fetch("a", 1)
	h.fetch("b", 1)
	before := h.m.Reassignments()
	h.leave("b")
	if got := h.m.Reassignments() - before; got != 2 {
		t.Fatalf("%d reassignments after a consumer with 2 units left, want 2", got)
	}
}
