package consumers

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/internal/poll"
	"github.com/braidmq/braid/topology"
)

// wantRefused checks that err is an INVALID_ARGUMENT whose text holds every
// one of parts.
func wantRefused(t *testing.T, what string, err error, parts ...string) {
	t.Helper()
	var e *api.Error
	if !errors.As(err, &e) || e.Code != api.CodeInvalidArgument {
		t.Fatalf("%s: error %v, want %s", what, err, api.CodeInvalidArgument.Symbol)
	}
	for _, p := range parts {
		if !strings.Contains(e.Message, p) {
			t.Fatalf("%s: error %q does not say %q", what, e.Message, p)
		}
	}
}

// An ack (or nack) of an offset never delivered is refused on a drained
// segment as it is on a live unit, before and after a restart; a late ack
// of an offset the drained segment did deliver still answers ok.
func TestQueueAckNeverDeliveredOnDrainedSegmentIsRefused(t *testing.T) {
	src := newTestSource(t, 1, 1) // segment 0, one bucket
	fill(src, 3)
	h := newQueueHarness(t, src)
	h.join("c1")
	msgs := h.fetch("c1", 10)
	if len(msgs) != 3 {
		t.Fatalf("fetched %d, want 3", len(msgs))
	}
	// On the live unit: refused.
	wantRefused(t, "live", h.ackErr("c1", pos(0, 0, 999)), "offset 999 was never delivered")

	h.ack("c1", msgs...)
	src.split(0) // seals segment 0: with everything acked, it is drained
	poll.Eventually(t, 10*time.Second, "segment 0 drained", func() bool {
		return slices.Equal(h.stats().Drained, []topology.SegmentID{0})
	})

	check := func(when string) {
		t.Helper()
		wantRefused(t, when+": ack past the end", h.ackErr("c1", pos(0, 0, 999)),
			"segment 0 bucket 0 offset 999 was never delivered", "drained", "ends at offset 3")
		wantRefused(t, when+": ack at the end", h.ackErr("c1", pos(0, 0, 3)), "offset 3 was never delivered")
		wantRefused(t, when+": ack of no bucket", h.ackErr("c1", pos(0, 5, 0)), "bucket 5 is not a unit")
		// One bad position refuses the whole request.
		wantRefused(t, when+": mixed ack", h.ackErr("c1", pos(0, 0, 1), pos(0, 0, 999)), "offset 999")
		ch := make(chan error, 1)
		h.m.Nack(h.src, api.NackRequest{Subscription: h.sub, Consumer: "c1", Nacks: []api.Position{pos(0, 0, 999)}}, func(err error) { ch <- err })
		wantRefused(t, when+": nack past the end", wait(t, ch), "offset 999 was never delivered")
		// Late acks of what was delivered stay fine.
		if err := h.ackErr("c1", pos(0, 0, 0), pos(0, 0, 2)); err != nil {
			t.Fatalf("%s: late ack of delivered offsets: %v", when, err)
		}
	}
	check("drained")
	h.reopen()
	h.join("c1")
	check("after restart")
}
