package consumers

import (
	"slices"
	"testing"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/topology"
)

func payloads(msgs []api.Message) []string {
	var out []string
	for _, m := range msgs {
		out = append(out, string(m.Payload))
	}
	return out
}

// A stream subscription created with read_compacted gets, below a unit's
// horizon, only the records compaction kept, at their offsets; the offsets
// compaction removed after the last one count as acknowledged once it is,
// so a sealed parent drains and its children are delivered.
func TestReadCompactedSubscription(t *testing.T) {
	src := newTestSource(t, 1, 1)
	src.appendTo(0, 0, "p0", "p1", "p2", "p3", "p4", "p5", "p6", "p7", "p8", "p9")
	src.split(0)
	src.appendTo(1, 0, "c0")
	src.appendTo(2, 0, "d0")
	src.compact(0, 0, 10, 2, 5) // everything after 5 removed: a gap at the tail

	h := newHarness(t, src)
	if _, err := h.joinReq(api.JoinRequest{Consumer: "a", ReadCompacted: true}); err != nil {
		t.Fatal(err)
	}
	msgs, _ := h.fetch("a", 100)
	if got := payloads(msgs); !slices.Equal(got, []string{"p2", "p5"}) || msgs[0].Offset != 2 || msgs[1].Offset != 5 {
		t.Fatalf("first fetch %v (%+v), want p2@2 and p5@5", got, msgs)
	}
	// Not acknowledged yet: the children wait.
	if again, _ := h.fetch("a", 100); len(again) != 0 {
		t.Fatalf("children delivered before the parent was acknowledged: %v", payloads(again))
	}
	// Past the unit's end is refused, as always.
	if err := h.ackErr("a", api.Position{Segment: 0, Offset: 10}); err == nil || api.AsError(err).Code != api.CodeInvalidArgument {
		t.Fatalf("ack past the end of the unit: %v", err)
	}
	h.ack("a", api.Position{Segment: 0, Offset: 5})
	children := h.fetchUntil("a", 100, replyTimeout)
	got := payloads(children)
	slices.Sort(got)
	if !slices.Equal(got, []string{"c0", "d0"}) {
		t.Fatalf("after the parent: %v, want c0 and d0", got)
	}
	st := h.stats()
	if !st.ReadCompacted || !slices.Equal(st.Drained, []topology.SegmentID{0}) {
		t.Fatalf("stats: read_compacted %v drained %v, want true and [0]", st.ReadCompacted, st.Drained)
	}

	// The flag is the subscription's: kept across a restart, and a join
	// asking otherwise is refused.
	h.reopen()
	if _, err := h.joinReq(api.JoinRequest{Consumer: "a"}); api.AsError(err).Code != api.CodeInvalidArgument {
		t.Fatalf("join without read_compacted of a compacted subscription: %v", err)
	}
	if _, err := h.joinReq(api.JoinRequest{Consumer: "a", ReadCompacted: true}); err != nil {
		t.Fatal(err)
	}
	if !h.stats().ReadCompacted {
		t.Fatal("read_compacted lost at restart")
	}

	// Another subscription, not compacted, reads the whole log.
	h.sub = "raw"
	h.join("b")
	var all []api.Message
	for len(all) < 10 {
		msgs := h.fetchUntil("b", 100, replyTimeout)
		all = append(all, msgs...)
		h.ackAll("b", msgs)
	}
	if got := payloads(all[:10]); !slices.Equal(got, []string{"p0", "p1", "p2", "p3", "p4", "p5", "p6", "p7", "p8", "p9"}) {
		t.Fatalf("raw subscription: %v", got)
	}
}

// An ack cursor that reaches the removed tail of a unit while nothing waits
// moves past it at once; a gap between kept records is covered by the
// cumulative ack of the record after it.
func TestReadCompactedGapsAndRedelivery(t *testing.T) {
	src := newTestSource(t, 1, 1)
	src.appendTo(0, 0, "p0", "p1", "p2", "p3", "p4", "p5")
	src.compact(0, 0, 4, 1, 3) // horizon 4: 0 and 2 removed; 4 and 5 raw
	h := newHarness(t, src)
	if _, err := h.joinReq(api.JoinRequest{Consumer: "a", ReadCompacted: true}); err != nil {
		t.Fatal(err)
	}
	msgs, _ := h.fetch("a", 2)
	if got := payloads(msgs); !slices.Equal(got, []string{"p1", "p3"}) {
		t.Fatalf("first fetch %v", got)
	}
	h.ack("a", api.Position{Segment: 0, Offset: 1})
	// The consumer leaves before acknowledging p3: the next owner gets it
	// again, counted, then the raw rest.
	h.leave("a")
	if _, err := h.joinReq(api.JoinRequest{Consumer: "b", ReadCompacted: true}); err != nil {
		t.Fatal(err)
	}
	msgs = h.fetchUntil("b", 10, replyTimeout)
	if got := payloads(msgs); !slices.Equal(got, []string{"p3", "p4", "p5"}) || msgs[0].Deliveries != 2 || msgs[0].Offset != 3 {
		t.Fatalf("after the hand-over %v (%+v), want p3 (second delivery), p4, p5", got, msgs)
	}
	h.ackAll("b", msgs)
	if st := h.stats(); st.Backlog != 0 {
		t.Fatalf("backlog %d after acknowledging everything", st.Backlog)
	}
}
