package consumers

import (
	"slices"
	"testing"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/internal/poll"
	"github.com/braidmq/braid/topology"
)

// offsetsOf lists the offsets of msgs.
func offsetsOf(msgs []api.Message) []uint64 {
	var out []uint64
	for _, m := range msgs {
		out = append(out, m.Offset)
	}
	return out
}

// fetchOffsets fetches from one unit until want offsets came.
func (h *harness) fetchOffsets(consumer string, n int) []api.Message {
	h.t.Helper()
	var got []api.Message
	for len(got) < n {
		got = append(got, h.fetchUntil(consumer, n-len(got), 5*time.Second)...)
	}
	return got
}

// TestStreamSkipsLostRecords: records lost to damage in a unit's log are
// skipped; an ack before them moves the cursor past them, so the sealed
// segment drains and its successors are delivered; after a restart nothing
// acked comes back.
func TestStreamSkipsLostRecords(t *testing.T) {
	src := newTestSource(t, 1, 1)
	src.appendTo(0, 0, "a:0", "a:1", "a:2", "a:3", "a:4")
	src.appendTo(0, 0, "LOST:5", "LOST:6")
	src.appendTo(0, 0, "a:7", "a:8")
	src.damage(0, 0, "LOST:5")
	src.split(0)

	h := newHarness(t, src)
	h.join("c1")
	got := h.fetchOffsets("c1", 7)
	if want := []uint64{0, 1, 2, 3, 4, 7, 8}; !slices.Equal(offsetsOf(got), want) {
		t.Fatalf("delivered offsets %v, want %v", offsetsOf(got), want)
	}
	h.ack("c1", pos(0, 0, 4))
	if st := h.stats(); st.Backlog != 2 {
		t.Fatalf("backlog %d after the ack before the hole, want 2 (offsets 7 and 8)", st.Backlog)
	}

	h.reopen()
	h.join("c1")
	again := h.fetchOffsets("c1", 2)
	if want := []uint64{7, 8}; !slices.Equal(offsetsOf(again), want) {
		t.Fatalf("after a restart, delivered %v, want %v (nothing acked, nothing lost)", offsetsOf(again), want)
	}
	h.ack("c1", pos(0, 0, 8))
	poll.Eventually(t, 5*time.Second, "segment 0 drained", func() bool {
		return slices.Contains(h.stats().Drained, topology.SegmentID(0))
	})
	produceKeys(src, 4, 8, 100)
	if got := h.fetchUntil("c1", 100, 5*time.Second); len(got) == 0 || got[0].Segment == 0 {
		t.Fatalf("after the drain: %+v", got)
	}
}

// TestStreamSkipsLostRecordsAtTheCursor: a hole right at the ack cursor is
// acknowledged as it is skipped.
func TestStreamSkipsLostRecordsAtTheCursor(t *testing.T) {
	src := newTestSource(t, 1, 1)
	src.appendTo(0, 0, "LOST:0", "LOST:1")
	src.appendTo(0, 0, "a:2")
	src.damage(0, 0, "LOST:0")
	h := newHarness(t, src)
	h.join("c1")
	if got := h.fetchOffsets("c1", 1); got[0].Offset != 2 {
		t.Fatalf("delivered %v, want offset 2", offsetsOf(got))
	}
	if st := h.stats(); st.Backlog != 1 {
		t.Fatalf("backlog %d, want 1: the lost records count as acknowledged", st.Backlog)
	}
}

// TestQueueSkipsLostRecords: a queue subscription skips lost records, new
// and to be redelivered, and takes them as acknowledged.
func TestQueueSkipsLostRecords(t *testing.T) {
	src := newTestSource(t, 1, 1)
	src.appendTo(0, 0, "a:0", "a:1")
	src.appendTo(0, 0, "LOST:2", "LOST:3")
	src.appendTo(0, 0, "a:4")
	src.appendTo(0, 0, "LATER:5")
	src.appendTo(0, 0, "a:6")
	h := newQueueHarness(t, src)
	h.join("c1")
	first := h.fetch("c1", 100)
	if len(first) != 7 {
		t.Fatalf("got %d messages before any damage, want 7", len(first))
	}
	h.ack("c1", first[:5]...) // 5 and 6 stay in flight
	src.damage(0, 0, "LOST:2")
	h.nack("c1", "0s", first[5:]...)
	src.damage(0, 0, "LATER:5")
	src.appendTo(0, 0, "a:7")
	got := h.fetchWait("c1", 100, "1s")
	if want := []uint64{6, 7}; !slices.Equal(offsetsOf(got), want) {
		t.Fatalf("delivered %v, want %v: offset 5 was lost before it could be delivered again", offsetsOf(got), want)
	}
	h.ack("c1", got...)
	if st := h.stats(); st.Backlog != 0 {
		t.Fatalf("backlog %d, want 0", st.Backlog)
	}
}
