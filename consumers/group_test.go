package consumers

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/internal/poll"
	"github.com/braidmq/braid/topology"
	"github.com/braidmq/braid/wal"
)

// keyOrder checks the promise of the ordering rule from the outside: for
// every key, payloads "key:seq" arrive in increasing seq.
type keyOrder struct {
	t    *testing.T
	last map[string]int
}

func newKeyOrder(t *testing.T) *keyOrder { return &keyOrder{t: t, last: make(map[string]int)} }

func (k *keyOrder) see(msgs []api.Message) {
	k.t.Helper()
	for _, m := range msgs {
		key, seqText, _ := strings.Cut(string(m.Payload), ":")
		seq, _ := strconv.Atoi(seqText)
		if last, ok := k.last[key]; ok && seq <= last {
			k.t.Fatalf("key %s: seq %d delivered after %d", key, seq, last)
		}
		k.last[key] = seq
	}
}

// produceKeys produces n messages over keys k0..k(keys-1), numbering them
// from seq, and returns the next seq.
func produceKeys(src *testSource, keys, n, seq int) int {
	for i := range n {
		key := fmt.Sprintf("k%d", (seq+i)%keys)
		src.produce(key, fmt.Sprintf("%s:%d", key, seq+i))
	}
	return seq + n
}

func TestGroupReadsUnitsInOffsetOrder(t *testing.T) {
	src := newTestSource(t, 1, 2)
	want := make(map[topology.Unit][]string)
	for i := range 200 {
		key := fmt.Sprintf("k%d", i%20)
		payload := fmt.Sprintf("%s:%d", key, i)
		unit := src.produce(key, payload)
		want[unit] = append(want[unit], payload)
	}
	if len(want) != 2 {
		t.Fatalf("keys landed in %d buckets, want 2", len(want))
	}
	h := newHarness(t, src)
	h.join("c1")

	got := make(map[topology.Unit][]string)
	first := true
	for total := 0; total < 200; {
		msgs, assigned := h.fetch("c1", 37)
		if len(msgs) == 0 {
			t.Fatalf("fetch came back empty after %d of 200", total)
		}
		if assigned != 2 {
			t.Fatalf("assigned %d units, want 2", assigned)
		}
		if first && len(unitsOf(msgs)) != 2 {
			t.Fatalf("first fetch served units %v, want both (round-robin)", unitsOf(msgs))
		}
		first = false
		for _, m := range msgs {
			unit := unitOf(m)
			if m.Offset != uint64(len(got[unit])) {
				t.Fatalf("unit %v: offset %d after %d messages", unit, m.Offset, len(got[unit]))
			}
			if m.Deliveries != 1 {
				t.Fatalf("deliveries %d, want 1", m.Deliveries)
			}
			got[unit] = append(got[unit], string(m.Payload))
		}
		total += len(msgs)
	}
	if !maps.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("delivered %v, want %v", got, want)
	}
	if msgs, _ := h.fetch("c1", 10); len(msgs) != 0 {
		t.Fatalf("fetch after the end returned %d messages", len(msgs))
	}
	if st := h.stats(); st.Backlog != 200 {
		t.Fatalf("backlog %d before acks, want 200", st.Backlog)
	}
	h.ack("c1", pos(0, 0, uint64(len(want[u(0, 0)])-1)), pos(0, 1, uint64(len(want[u(0, 1)])-1)))
	if st := h.stats(); st.Backlog != 0 {
		t.Fatalf("backlog %d after acking everything, want 0", st.Backlog)
	}
}

func TestMaxBytesBoundsAFetch(t *testing.T) {
	src := newTestSource(t, 1, 1)
	src.appendTo(0, 0, strings.Repeat("a", 100), strings.Repeat("b", 100), strings.Repeat("c", 100))
	h := newHarness(t, src)
	h.join("c1")
	res := h.fetchReq(api.FetchRequest{Consumer: "c1", MaxBytes: 150, Wait: "0s"})
	if res.err != nil || len(res.msgs) != 1 {
		t.Fatalf("fetch with max_bytes 150: %d messages, %v; want 1", len(res.msgs), res.err)
	}
	res = h.fetchReq(api.FetchRequest{Consumer: "c1", MaxBytes: 10, Wait: "0s"})
	if res.err != nil || len(res.msgs) != 1 || res.msgs[0].Offset != 1 {
		t.Fatalf("fetch with max_bytes 10: %v, %v; want the one message at offset 1", res.msgs, res.err)
	}
}

func TestSplitChildrenWaitForParent(t *testing.T) {
	src := newTestSource(t, 1, 1)
	seq := produceKeys(src, 5, 10, 0)
	h := newHarness(t, src)
	order := newKeyOrder(t)
	h.join("c1")

	msgs, _ := h.fetch("c1", 4)
	order.see(msgs)
	src.split(0) // sealed with a backlog of 6 undelivered, 4 unacked
	produceKeys(src, 5, 10, seq)

	msgs, _ = h.fetch("c1", 100)
	order.see(msgs)
	if len(msgs) != 6 || msgs[0].Offset != 4 || unitsOf(msgs)[u(0, 0)] != 6 {
		t.Fatalf("after the split got %d messages from %v, want the 6 left of the parent", len(msgs), unitsOf(msgs))
	}
	if msgs, _ := h.fetch("c1", 100); len(msgs) != 0 {
		t.Fatalf("children delivered before the parent was acknowledged: %v", unitsOf(msgs))
	}
	st := h.stats()
	if !slices.Equal(st.Withheld, []topology.Unit{u(1, 0), u(2, 0)}) {
		t.Fatalf("withheld %v, want the children's units", st.Withheld)
	}

	h.ack("c1", pos(0, 0, 8))
	if msgs, _ := h.fetch("c1", 100); len(msgs) != 0 {
		t.Fatalf("children delivered with the parent one message short: %v", unitsOf(msgs))
	}
	h.ack("c1", pos(0, 0, 9))
	msgs, _ = h.fetch("c1", 100)
	order.see(msgs)
	if len(msgs) != 10 || unitsOf(msgs)[u(0, 0)] != 0 {
		t.Fatalf("after draining the parent got %d messages from %v, want the 10 of the children", len(msgs), unitsOf(msgs))
	}
	if st := h.stats(); !slices.Equal(st.Drained, []topology.SegmentID{0}) || len(st.Withheld) != 0 {
		t.Fatalf("drained %v withheld %v, want [0] and none", st.Drained, st.Withheld)
	}
}

// TestEmptyMiddleSegmentDoesNotReleaseGrandchildren: segment 1 is split
// before it gets any message; it is drained at once, but its children must
// still wait for segment 0.
func TestEmptyMiddleSegmentDoesNotReleaseGrandchildren(t *testing.T) {
	src := newTestSource(t, 1, 1)
	seq := produceKeys(src, 8, 8, 0)
	h := newHarness(t, src)
	order := newKeyOrder(t)
	h.join("c1")

	src.split(0) // -> 1, 2
	src.split(1) // -> 3, 4; 1 got nothing
	produceKeys(src, 8, 16, seq)

	msgs, _ := h.fetch("c1", 100)
	order.see(msgs)
	if len(msgs) != 8 || unitsOf(msgs)[u(0, 0)] != 8 {
		t.Fatalf("got %v, want only the 8 of segment 0", unitsOf(msgs))
	}
	h.ack("c1", pos(0, 0, 6))
	if msgs, _ := h.fetch("c1", 100); len(msgs) != 0 {
		t.Fatalf("delivered %v while segment 0 is not drained", unitsOf(msgs))
	}
	st := h.stats()
	if !slices.Equal(st.Drained, []topology.SegmentID{1}) {
		t.Fatalf("drained %v, want the empty middle [1]", st.Drained)
	}
	if !slices.Equal(st.Withheld, []topology.Unit{u(2, 0), u(3, 0), u(4, 0)}) {
		t.Fatalf("withheld %v, want 2, 3 and 4", st.Withheld)
	}
	h.ack("c1", pos(0, 0, 7))
	msgs, _ = h.fetch("c1", 100)
	order.see(msgs)
	if len(msgs) != 16 {
		t.Fatalf("after draining segment 0 got %d messages, want 16", len(msgs))
	}
}

func TestMergeChildWaitsForBothParents(t *testing.T) {
	src := newTestSource(t, 2, 2) // segments 0 and 1, one bucket each
	src.appendTo(0, 0, "a0", "a1")
	src.appendTo(1, 0, "b0", "b1", "b2")
	src.merge(0, 1) // -> 2
	src.appendTo(2, 0, "c0")
	h := newHarness(t, src)
	h.join("c1")

	msgs, _ := h.fetch("c1", 100)
	if got := unitsOf(msgs); got[u(0, 0)] != 2 || got[u(1, 0)] != 3 || len(got) != 2 {
		t.Fatalf("first fetch %v, want both parents only", got)
	}
	h.ack("c1", pos(0, 0, 1))
	if msgs, _ := h.fetch("c1", 100); len(msgs) != 0 {
		t.Fatalf("merged child delivered with one parent pending: %v", unitsOf(msgs))
	}
	h.ack("c1", pos(1, 0, 2))
	msgs, _ = h.fetch("c1", 100)
	if len(msgs) != 1 || string(msgs[0].Payload) != "c0" {
		t.Fatalf("after both parents got %v, want c0", msgs)
	}
}

func TestTwoConsumersShareUnits(t *testing.T) {
	src := newTestSource(t, 2, 4) // 2 segments x 2 buckets
	for seg := range 2 {
		for b := range 2 {
			src.appendTo(topology.SegmentID(seg), b, "x", "y", "z")
		}
	}
	h := newHarness(t, src)
	h.join("a")
	h.join("b")
	msgsA, assignedA := h.fetch("a", 100)
	msgsB, assignedB := h.fetch("b", 100)
	if assignedA != 2 || assignedB != 2 {
		t.Fatalf("assigned a=%d b=%d, want 2 each", assignedA, assignedB)
	}
	unitsA, unitsB := unitsOf(msgsA), unitsOf(msgsB)
	if len(unitsA) != 2 || len(unitsB) != 2 {
		t.Fatalf("a read %v, b read %v; want 2 units each", unitsA, unitsB)
	}
	for unit := range unitsA {
		if _, ok := unitsB[unit]; ok {
			t.Fatalf("unit %v delivered to both", unit)
		}
	}
	if len(msgsA)+len(msgsB) != 12 {
		t.Fatalf("%d messages delivered, want 12", len(msgsA)+len(msgsB))
	}
}

func TestHandoffWaitsForPreviousOwnerAcks(t *testing.T) {
	src := newTestSource(t, 1, 4) // one segment, 4 buckets
	for b := range 4 {
		src.appendTo(0, b, "0", "1", "2")
	}
	h := newHarness(t, src)
	h.join("a")
	msgs, _ := h.fetch("a", 100)
	if len(msgs) != 12 {
		t.Fatalf("a got %d messages, want 12", len(msgs))
	}

	h.join("b")
	if msgs, assigned := h.fetch("b", 100); len(msgs) != 0 || assigned != 2 {
		t.Fatalf("b got %v (assigned %d) while a holds unacked messages; want nothing, assigned 2", unitsOf(msgs), assigned)
	}
	for b := range 4 {
		src.appendTo(0, b, "3", "4", "5")
	}
	msgs, assigned := h.fetch("a", 100)
	kept := unitsOf(msgs)
	if assigned != 2 || len(kept) != 2 || len(msgs) != 6 {
		t.Fatalf("a got %v (assigned %d), want 3 new messages from each of its 2 kept units", kept, assigned)
	}
	var moving []topology.Unit
	for b := range 4 {
		if _, ok := kept[u(0, b)]; !ok {
			moving = append(moving, u(0, b))
		}
	}
	x, y := moving[0], moving[1]

	// a finishes x: b takes it over from where a stopped.
	h.ack("a", pos(0, x.Bucket, 2))
	msgs, _ = h.fetch("b", 100)
	if got := unitsOf(msgs); len(got) != 1 || got[x] != 3 || msgs[0].Offset != 3 || msgs[0].Deliveries != 1 {
		t.Fatalf("b got %v from offset %d, want x's offsets 3..5", got, msgs[0].Offset)
	}
	// A late ack of x from a is harmless; one beyond what it acked is not.
	h.ack("a", pos(0, x.Bucket, 1))
	wantCode(t, h.ackErr("a", pos(0, x.Bucket, 4)), api.CodeNotOwner)

	// y is still a's to acknowledge, and nobody gets it meanwhile.
	if msgs, _ := h.fetch("b", 100); len(msgs) != 0 {
		t.Fatalf("b got %v before a acknowledged y", unitsOf(msgs))
	}
	if msgs, _ := h.fetch("a", 100); unitsOf(msgs)[y] != 0 {
		t.Fatalf("a got new messages of y, which is being handed over")
	}
	if st := h.stats(); st.PendingHandoffs != 1 {
		t.Fatalf("pending handoffs %d, want 1", st.PendingHandoffs)
	}
	h.ack("a", pos(0, y.Bucket, 2))
	msgs, _ = h.fetch("b", 100)
	if got := unitsOf(msgs); len(got) != 1 || got[y] != 3 {
		t.Fatalf("b got %v, want y's 3 new messages", got)
	}
}

func TestSilentConsumerIsDeclaredDeadAndItsMessagesRedelivered(t *testing.T) {
	src := newTestSource(t, 1, 1)
	src.appendTo(0, 0, "0", "1", "2", "3", "4", "5", "6", "7", "8", "9")
	h := newHarness(t, src)
	if _, err := h.joinReq(api.JoinRequest{Consumer: "a", SessionTimeout: "200ms"}); err != nil {
		t.Fatal(err)
	}
	msgs, _ := h.fetch("a", 10)
	if len(msgs) != 10 {
		t.Fatalf("a got %d messages, want 10", len(msgs))
	}
	h.ack("a", pos(0, 0, 3))
	h.join("b")
	if msgs, assigned := h.fetch("b", 10); len(msgs) != 0 || assigned != 0 {
		t.Fatalf("b got %d messages, assigned %d, while a is alive", len(msgs), assigned)
	}

	// a goes silent: for its session timeout it is alive and keeps its
	// unit; past it, it is dead and its unit comes to b.
	h.advance(200 * time.Millisecond)
	if msgs, assigned := h.fetch("b", 10); len(msgs) != 0 || assigned != 0 {
		t.Fatalf("b got %d messages, assigned %d, when a had been silent for just its session timeout", len(msgs), assigned)
	}
	h.advance(time.Millisecond)
	msgs = h.fetchUntil("b", 100, 5*time.Second)
	if len(msgs) != 6 || msgs[0].Offset != 4 {
		t.Fatalf("b got %d messages from offset %d, want a's 6 unacked from 4", len(msgs), msgs[0].Offset)
	}
	for _, m := range msgs {
		if m.Deliveries != 2 {
			t.Fatalf("offset %d redelivered with deliveries %d, want 2", m.Offset, m.Deliveries)
		}
	}
	res := h.fetchReq(api.FetchRequest{Consumer: "a", Wait: "0s"})
	wantCode(t, res.err, api.CodeConsumerUnknown)
	wantCode(t, h.ackErr("a", pos(0, 0, 5)), api.CodeConsumerUnknown)

	// New messages past what a ever saw are first deliveries.
	src.appendTo(0, 0, "10")
	h.ackAll("b", msgs)
	msgs, _ = h.fetch("b", 100)
	if len(msgs) != 1 || msgs[0].Deliveries != 1 {
		t.Fatalf("got %v, want offset 10 delivered once", msgs)
	}
}

func TestLeaveRedeliversAtOnce(t *testing.T) {
	src := newTestSource(t, 1, 1)
	src.appendTo(0, 0, "0", "1", "2")
	h := newHarness(t, src)
	h.join("a")
	h.join("b")
	msgs, _ := h.fetch("a", 10) // the only unit goes to a (Assign is deterministic)
	if len(msgs) != 3 {
		t.Fatalf("a got %d messages, want 3", len(msgs))
	}
	h.leave("a")
	h.leave("a") // twice is fine
	msgs, _ = h.fetch("b", 10)
	if len(msgs) != 3 || msgs[0].Deliveries != 2 {
		t.Fatalf("after leave got %v, want the 3 messages again with deliveries 2", msgs)
	}
}

func TestRestartKeepsCursors(t *testing.T) {
	src := newTestSource(t, 1, 2)
	for b := range 2 {
		src.appendTo(0, b, "0", "1", "2", "3", "4", "5", "6", "7", "8", "9")
	}
	h := newHarness(t, src, WithCompactAfter(3))
	h.join("a")
	msgs, _ := h.fetch("a", 100)
	if len(msgs) != 20 {
		t.Fatalf("got %d messages, want 20", len(msgs))
	}
	for off := range uint64(7) { // one record per ack: compaction kicks in
		h.ack("a", pos(0, 0, off))
	}
	h.ack("a", pos(0, 1, 2))

	h.reopen()
	// Compaction kept the log short: a snapshot and what followed it.
	log, err := wal.Open(h.m.groupDir(src.Topic(), h.sub), wal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	logFirst, logNext := log.FirstOffset(), log.NextOffset()
	log.Close()
	if logFirst == 0 || logNext-logFirst > 4 {
		t.Fatalf("group log holds offsets [%d, %d), want a compacted log of at most 4 records", logFirst, logNext)
	}
	// The consumer is gone with the old actor; it joins again.
	res := h.fetchReq(api.FetchRequest{Consumer: "a", Wait: "0s"})
	wantCode(t, res.err, api.CodeConsumerUnknown)
	h.join("a")
	msgs, _ = h.fetch("a", 100)
	first := make(map[topology.Unit]uint64)
	for _, m := range msgs {
		if _, ok := first[unitOf(m)]; !ok {
			first[unitOf(m)] = m.Offset
		}
	}
	if len(msgs) != 10 || first[u(0, 0)] != 7 || first[u(0, 1)] != 3 {
		t.Fatalf("after restart got %d messages starting at %v, want 10 from offsets 7 and 3", len(msgs), first)
	}
	if got := h.m.Subscriptions(src.Topic()); !slices.Equal(got, []string{"orders"}) {
		t.Fatalf("subscriptions %v, want [orders]", got)
	}
}

func TestRestartKeepsDrainedSegments(t *testing.T) {
	src := newTestSource(t, 1, 1)
	src.appendTo(0, 0, "p0", "p1")
	h := newHarness(t, src)
	h.join("a")
	msgs, _ := h.fetch("a", 10)
	src.split(0)
	src.appendTo(1, 0, "c0")
	h.ackAll("a", msgs)
	if st := h.stats(); !slices.Equal(st.Drained, []topology.SegmentID{0}) {
		t.Fatalf("drained %v, want [0]", st.Drained)
	}

	h.reopen()
	h.join("a")
	if st := h.stats(); !slices.Equal(st.Drained, []topology.SegmentID{0}) {
		t.Fatalf("drained after restart %v, want [0]", st.Drained)
	}
	msgs, _ = h.fetch("a", 10)
	if len(msgs) != 1 || string(msgs[0].Payload) != "c0" {
		t.Fatalf("after restart got %v, want only c0", msgs)
	}
}

func TestStartLatest(t *testing.T) {
	src := newTestSource(t, 1, 1)
	src.appendTo(0, 0, "old0", "old1")
	src.split(0)
	src.appendTo(1, 0, "old2")
	h := newHarness(t, src)
	if _, err := h.joinReq(api.JoinRequest{Consumer: "a", Start: api.StartLatest}); err != nil {
		t.Fatal(err)
	}
	if msgs, _ := h.fetch("a", 10); len(msgs) != 0 {
		t.Fatalf("latest subscription got old messages %v", msgs)
	}
	src.appendTo(1, 0, "new0")
	src.appendTo(2, 0, "new1")
	msgs, _ := h.fetch("a", 10)
	var got []string
	for _, m := range msgs {
		got = append(got, string(m.Payload))
	}
	slices.Sort(got)
	if !slices.Equal(got, []string{"new0", "new1"}) {
		t.Fatalf("got %v, want the new messages only", got)
	}
	st := h.stats()
	if st.Start != api.StartLatest || !slices.Equal(st.Drained, []topology.SegmentID{0}) {
		t.Fatalf("start %q drained %v, want latest and [0]", st.Start, st.Drained)
	}
	// A second join does not move the start.
	h.reopen()
	if _, err := h.joinReq(api.JoinRequest{Consumer: "a", Start: api.StartEarliest}); err != nil {
		t.Fatal(err)
	}
	if st := h.stats(); st.Start != api.StartLatest {
		t.Fatalf("start after restart %q, want latest", st.Start)
	}
}

func TestParkedFetchWakesOnAppend(t *testing.T) {
	src := newTestSource(t, 1, 1)
	h := newHarness(t, src)
	h.join("a")
	reply := h.fetchAsync(api.FetchRequest{Subscription: h.sub, Consumer: "a", Wait: "20s"})
	poll.Eventually(t, 5*time.Second, "fetch parked", func() bool {
		st := h.stats()
		return len(st.Consumers) == 1 && st.Consumers[0].Parked
	})
	src.appendTo(0, 0, "hello")
	res := wait(t, reply)
	if res.err != nil || len(res.msgs) != 1 || string(res.msgs[0].Payload) != "hello" {
		t.Fatalf("parked fetch woke with %v, %v; want hello", res.msgs, res.err)
	}
}

// TestParkedFetchWakesWhenParentDrains: a fetch parked on withheld children
// is answered once the parent is acknowledged.
func TestParkedFetchWakesWhenParentDrains(t *testing.T) {
	src := newTestSource(t, 1, 1)
	src.appendTo(0, 0, "p0")
	h := newHarness(t, src)
	h.join("a")
	msgs, _ := h.fetch("a", 10)
	src.split(0)
	src.appendTo(1, 0, "c0")
	reply := h.fetchAsync(api.FetchRequest{Subscription: h.sub, Consumer: "a", Wait: "20s"})
	poll.Eventually(t, 5*time.Second, "fetch parked", func() bool {
		st := h.stats()
		return len(st.Consumers) == 1 && st.Consumers[0].Parked
	})
	h.ackAll("a", msgs)
	res := wait(t, reply)
	if res.err != nil || len(res.msgs) != 1 || string(res.msgs[0].Payload) != "c0" {
		t.Fatalf("parked fetch got %v, %v; want c0", res.msgs, res.err)
	}
}

func TestAckValidation(t *testing.T) {
	src := newTestSource(t, 1, 2)
	src.appendTo(0, 0, "0", "1", "2")
	src.appendTo(0, 1, "0", "1", "2")
	h := newHarness(t, src)
	h.join("a")
	msgs, _ := h.fetch("a", 2) // one from each unit
	if len(msgs) != 2 || len(unitsOf(msgs)) != 2 {
		t.Fatalf("got %v, want one message of each unit", unitsOf(msgs))
	}

	wantCode(t, h.ackErr("a", pos(0, 0, 1)), api.CodeInvalidArgument)  // not delivered yet
	wantCode(t, h.ackErr("a", pos(9, 0, 0)), api.CodeNotOwner)         // no such unit
	wantCode(t, h.ackErr("zz", pos(0, 0, 0)), api.CodeConsumerUnknown) // never joined
	wantCode(t, h.ackErr("a", pos(0, 0, 0), pos(0, 1, 5)), api.CodeInvalidArgument)
	if st := h.stats(); st.Backlog != 6 {
		t.Fatalf("backlog %d after a rejected request, want 6: nothing applied", st.Backlog)
	}
	h.ack("a", pos(0, 0, 0), pos(0, 1, 0))
	h.ack("a", pos(0, 0, 0)) // again: a no-op
	if st := h.stats(); st.Backlog != 4 {
		t.Fatalf("backlog %d, want 4", st.Backlog)
	}

	// a has nothing outstanding, so b takes one unit at once.
	h.join("b")
	msgs, _ = h.fetch("b", 10)
	if len(unitsOf(msgs)) != 1 || len(msgs) != 2 {
		t.Fatalf("b got %v, want the 2 messages left of one unit", unitsOf(msgs))
	}
	bUnit := unitOf(msgs[0])
	aUnit := u(0, 1-bUnit.Bucket)
	wantCode(t, h.ackErr("b", pos(0, aUnit.Bucket, 0)), api.CodeNotOwner)
	h.ack("a", pos(0, bUnit.Bucket, 0)) // late but already done: fine
	wantCode(t, h.ackErr("a", pos(0, bUnit.Bucket, 1)), api.CodeNotOwner)
	h.ack("b", pos(0, bUnit.Bucket, 2))

	res := h.fetchReq(api.FetchRequest{Consumer: "nobody", Wait: "0s"})
	wantCode(t, res.err, api.CodeConsumerUnknown)
}

func TestRequestValidation(t *testing.T) {
	src := newTestSource(t, 1, 1)
	h := newHarness(t, src)
	joins := []struct {
		req  api.JoinRequest
		code api.Code
	}{
		{api.JoinRequest{Subscription: "bad.name", Consumer: "a"}, api.CodeInvalidName},
		{api.JoinRequest{Subscription: "s", Consumer: ""}, api.CodeInvalidName},
		{api.JoinRequest{Subscription: "s", Consumer: strings.Repeat("x", 129)}, api.CodeInvalidName},
		{api.JoinRequest{Subscription: "s", Consumer: "a", Start: "middle"}, api.CodeInvalidArgument},
		{api.JoinRequest{Subscription: "s", Consumer: "a", SessionTimeout: "1ms"}, api.CodeInvalidArgument},
		{api.JoinRequest{Subscription: "s", Consumer: "a", SessionTimeout: "soon"}, api.CodeInvalidArgument},
	}
	for _, tt := range joins {
		_, err := h.joinReq(tt.req)
		wantCode(t, err, tt.code)
	}
	fetches := []struct {
		req  api.FetchRequest
		code api.Code
	}{
		{api.FetchRequest{Subscription: "s", Consumer: "a/b"}, api.CodeInvalidName},
		{api.FetchRequest{Subscription: "s", Consumer: "a", Max: -1}, api.CodeInvalidArgument},
		{api.FetchRequest{Subscription: "s", Consumer: "a", Max: MaxFetchMax + 1}, api.CodeInvalidArgument},
		{api.FetchRequest{Subscription: "s", Consumer: "a", MaxBytes: -5}, api.CodeInvalidArgument},
		{api.FetchRequest{Subscription: "s", Consumer: "a", Wait: "31s"}, api.CodeInvalidArgument},
		{api.FetchRequest{Subscription: "s", Consumer: "a", Wait: "-1s"}, api.CodeInvalidArgument},
		{api.FetchRequest{Subscription: "s", Consumer: "a", Wait: "later"}, api.CodeInvalidArgument},
		{api.FetchRequest{Subscription: "s", Consumer: "a", Format: "xml"}, api.CodeBadRequest},
	}
	for _, tt := range fetches {
		wantCode(t, h.fetchReq(tt.req).err, tt.code)
	}
	f, err := ParseFetch(api.FetchRequest{Subscription: "s", Consumer: "a", Format: "json"})
	if err != nil || f.Max != DefaultFetchMax || f.MaxBytes != DefaultFetchMaxBytes || f.Wait != DefaultFetchWait {
		t.Fatalf("defaults: %+v, %v", f, err)
	}
	wantCode(t, h.ackErr("a"), api.CodeInvalidArgument) // no positions
	wantCode(t, h.ackErr("a", api.Position{Bucket: -1}), api.CodeInvalidArgument)
}

// TestPanicRestartsFromWAL: a panic restarts the actor, which rebuilds its
// state from the log; the request that panicked gets UNAVAILABLE, the
// consumers join again, and delivery resumes at the ack cursor.
func TestPanicRestartsFromWAL(t *testing.T) {
	src := newTestSource(t, 1, 1)
	src.appendTo(0, 0, "0", "1", "2", "3", "4")
	h := newHarness(t, src)
	h.join("a")
	msgs, _ := h.fetch("a", 3)
	h.ack("a", pos(0, 0, 1))
	if len(msgs) != 3 {
		t.Fatalf("got %d messages, want 3", len(msgs))
	}

	// More failures than protoactor's default strategy tolerates (10 in
	// 10s): the group must keep coming back.
	for range 12 {
		src.panicOnRead.Store(true)
		wantCode(t, h.fetchReq(api.FetchRequest{Consumer: "a", Wait: "0s"}).err, api.CodeUnavailable)
		wantCode(t, h.fetchReq(api.FetchRequest{Consumer: "a", Wait: "0s"}).err, api.CodeConsumerUnknown)
		h.join("a")
	}
	msgs, _ = h.fetch("a", 10)
	if len(msgs) != 3 || msgs[0].Offset != 2 {
		t.Fatalf("after the restart got %d messages from %d, want offsets 2..4", len(msgs), msgs[0].Offset)
	}
}

func TestRetentionSkipsRemovedOffsets(t *testing.T) {
	src := newTestSource(t, 1, 1)
	src.appendTo(0, 0, "0", "1", "2", "3", "4")
	h := newHarness(t, src)
	h.join("a")
	src.truncate(0, 0, 3)
	msgs, _ := h.fetch("a", 10)
	if len(msgs) != 2 || msgs[0].Offset != 3 {
		t.Fatalf("got %v, want offsets 3 and 4", msgs)
	}
	if st := h.stats(); st.Backlog != 2 {
		t.Fatalf("backlog %d, want 2", st.Backlog)
	}
}

func TestManagerCloseRefusesLaterRequests(t *testing.T) {
	src := newTestSource(t, 1, 1)
	h := newHarness(t, src)
	h.join("a")
	if err := h.m.Close(); err != nil {
		t.Fatal(err)
	}
	_, err := h.joinReq(api.JoinRequest{Consumer: "a"})
	wantCode(t, err, api.CodeUnavailable)
	h.m = NewManager(h.system, h.dir, testLogger()) // for the cleanup
}

func TestDeleteTopicRemovesSubscriptions(t *testing.T) {
	src := newTestSource(t, 1, 1)
	src.appendTo(0, 0, "0")
	h := newHarness(t, src)
	h.join("a")
	msgs, _ := h.fetch("a", 10)
	h.ackAll("a", msgs)
	if got := h.m.Subscriptions(src.Topic()); !slices.Equal(got, []string{"orders"}) {
		t.Fatalf("subscriptions %v, want [orders]", got)
	}
	if err := h.m.DeleteTopic(src.Topic()); err != nil {
		t.Fatal(err)
	}
	if got := h.m.Subscriptions(src.Topic()); len(got) != 0 {
		t.Fatalf("subscriptions after delete %v, want none", got)
	}
	// A join now starts a new subscription from scratch.
	h.join("a")
	if msgs, _ := h.fetch("a", 10); len(msgs) != 1 || msgs[0].Deliveries != 1 {
		t.Fatalf("new subscription got %v, want offset 0 once", msgs)
	}
}

func TestEscapeTopic(t *testing.T) {
	t.Parallel()
	tests := map[string]string{
		"topic://acme/orders/pay": "topic%3A%2F%2Facme%2Forders%2Fpay",
		"persistent://a/b/c":      "persistent%3A%2F%2Fa%2Fb%2Fc",
		"":                        "%",
		"..":                      "%2E.",
		"topic://t/n/x.y":         "topic%3A%2F%2Ft%2Fn%2Fx.y",
		"topic://t/n/%2F":         "topic%3A%2F%2Ft%2Fn%2F%252F",
	}
	seen := make(map[string]string)
	for topic, want := range tests {
		got := escapeTopic(topic)
		if got != want {
			t.Errorf("escapeTopic(%q) = %q, want %q", topic, got, want)
		}
		if other, ok := seen[got]; ok {
			t.Errorf("%q and %q escape to the same %q", topic, other, got)
		}
		seen[got] = topic
	}
}

// TestUnreadableLogRefusesService: a group whose log holds a record it
// cannot read refuses every request rather than serving a state that is
// not the durable one.
func TestUnreadableLogRefusesService(t *testing.T) {
	src := newTestSource(t, 1, 1)
	h := newHarness(t, src)
	h.join("a")
	if err := h.m.Close(); err != nil {
		t.Fatal(err)
	}
	log, err := wal.Open(h.m.groupDir(src.Topic(), h.sub), wal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := log.Append(wal.Record{Payload: []byte{recordVersion, 99}}); err != nil {
		t.Fatal(err)
	}
	log.Close()

	h.m = NewManager(h.system, h.dir, testLogger())
	_, err = h.joinReq(api.JoinRequest{Consumer: "a"})
	wantCode(t, err, api.CodeUnavailable)
	if !strings.Contains(err.Error(), api.UserMessage(ErrBadRecord.Error())) {
		t.Fatalf("error %q does not name the bad record", err)
	}
}

// TestResyncRedeliversWhatALostReplyHeld: a consumer loses a fetch reply;
// its next fetch asks for a resync and gets again, in each unit, what it
// did not receive (from its received position, or from the ack cursor in a
// unit it lists nothing for), with the delivery count raised; an ack can
// then never cover a message the consumer did not see.
func TestResyncRedeliversWhatALostReplyHeld(t *testing.T) {
	src := newTestSource(t, 1, 2)
	for i := range 20 {
		src.appendTo(0, 0, fmt.Sprintf("a%d", i))
		src.appendTo(0, 1, fmt.Sprintf("b%d", i))
	}
	h := newHarness(t, src)
	h.join("c")
	got, _ := h.fetch("c", 8) // received: 4 of each unit
	if len(got) != 8 {
		t.Fatalf("first fetch: %d messages, want 8", len(got))
	}
	h.ack("c", pos(0, 0, 1)) // unit 0/0 acked up to offset 1
	if lost, _ := h.fetch("c", 8); len(lost) != 8 {
		t.Fatalf("second fetch: %d messages, want 8", len(lost))
	}
	// The reply of the second fetch was lost. The consumer received
	// offsets 0-3 of unit 0/0; it lists nothing for 0/1 (as if it had
	// received nothing there), so 0/1 restarts at its ack cursor, 0.
	res := h.fetchReq(api.FetchRequest{Consumer: "c", Max: 100, Wait: "0s", Resync: true,
		Received: []api.Position{pos(0, 0, 4)}})
	if res.err != nil {
		t.Fatal(res.err)
	}
	first := map[topology.Unit]uint64{}
	count := map[topology.Unit]int{}
	for _, m := range res.msgs {
		u := unitOf(m)
		if count[u] == 0 {
			first[u] = m.Offset
		}
		count[u]++
	}
	if first[u(0, 0)] != 4 || count[u(0, 0)] != 16 {
		t.Fatalf("unit 0/0 resumed at %d with %d messages, want 4 with 16", first[u(0, 0)], count[u(0, 0)])
	}
	if first[u(0, 1)] != 0 || count[u(0, 1)] != 20 {
		t.Fatalf("unit 0/1 resumed at %d with %d messages, want 0 with 20", first[u(0, 1)], count[u(0, 1)])
	}
	for _, m := range res.msgs {
		want := uint32(1)
		if m.Offset < 8 {
			want = 2 // handed out once before the resync
		}
		if m.Deliveries != want {
			t.Fatalf("unit %v offset %d: deliveries %d, want %d", unitOf(m), m.Offset, m.Deliveries, want)
		}
	}
	// Received positions below the ack cursor are raised to it; resync is
	// refused with positions but no resync flag.
	wantCode(t, h.fetchReq(api.FetchRequest{Consumer: "c", Wait: "0s", Received: []api.Position{pos(0, 0, 0)}}).err, api.CodeInvalidArgument)
	res = h.fetchReq(api.FetchRequest{Consumer: "c", Max: 100, Wait: "0s", Resync: true, Received: []api.Position{pos(0, 0, 0), pos(0, 1, 20)}})
	if res.err != nil {
		t.Fatal(res.err)
	}
	if len(res.msgs) != 18 || res.msgs[0].Offset != 2 {
		t.Fatalf("resync below the ack cursor: %d messages from offset %d, want 18 from 2", len(res.msgs), res.msgs[0].Offset)
	}
}
