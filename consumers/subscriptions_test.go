package consumers

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/internal/poll"
	"github.com/braidmq/braid/topology"
	"github.com/braidmq/braid/wal"
)

// Subscription management of stream subscriptions: positions per unit and
// per consumer, seek, delete (subscriptions.go, seek.go).

func (h *harness) infoErr() (api.SubscriptionInfo, error) {
	h.t.Helper()
	type result struct {
		info api.SubscriptionInfo
		err  error
	}
	ch := make(chan result, 1)
	h.m.Info(h.src, h.sub, func(i api.SubscriptionInfo, err error) { ch <- result{i, err} })
	res := wait(h.t, ch)
	return res.info, res.err
}

func (h *harness) info() api.SubscriptionInfo {
	h.t.Helper()
	info, err := h.infoErr()
	if err != nil {
		h.t.Fatal(err)
	}
	return info
}

func (h *harness) seekErr(req api.SubscriptionSeekRequest) (api.SubscriptionSeekReply, error) {
	h.t.Helper()
	type result struct {
		r   api.SubscriptionSeekReply
		err error
	}
	ch := make(chan result, 1)
	if req.Subscription == "" {
		req.Subscription = h.sub
	}
	h.m.Seek(h.src, req, func(r api.SubscriptionSeekReply, err error) { ch <- result{r, err} })
	res := wait(h.t, ch)
	return res.r, res.err
}

func (h *harness) seek(req api.SubscriptionSeekRequest) api.SubscriptionSeekReply {
	h.t.Helper()
	r, err := h.seekErr(req)
	if err != nil {
		h.t.Fatalf("seek %+v: %v", req, err)
	}
	return r
}

func to(where string) api.SubscriptionSeekRequest { return api.SubscriptionSeekRequest{To: where} }

func atTime(ms int64) api.SubscriptionSeekRequest { return api.SubscriptionSeekRequest{Time: &ms} }

func atMessage(seg, bucket int, off uint64) api.SubscriptionSeekRequest {
	p := pos(seg, bucket, off)
	return api.SubscriptionSeekRequest{Message: &p}
}

// appendAt appends one record per time to a unit, with those record times.
func (s *testSource) appendAt(seg topology.SegmentID, bucket int, times ...int64) {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	l, err := s.logLocked(seg, bucket)
	if err != nil {
		s.t.Fatal(err)
	}
	for _, ts := range times {
		if _, err := l.Append(wal.Record{Timestamp: ts, Payload: fmt.Appendf(nil, "t%d", ts)}); err != nil {
			s.t.Fatal(err)
		}
	}
	s.notifyLocked()
}

// unitAt finds a unit's position in info.
func unitAt(t *testing.T, info api.SubscriptionInfo, seg, bucket int) api.SubscriptionUnit {
	t.Helper()
	for _, u := range info.Units {
		if u.Segment == uint64(seg) && u.Bucket == bucket {
			return u
		}
	}
	t.Fatalf("no unit %d/%d in %+v", seg, bucket, info.Units)
	return api.SubscriptionUnit{}
}

func offsets(msgs []api.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = fmt.Sprintf("%d/%d/%d", m.Segment, m.Bucket, m.Offset)
	}
	return out
}

// TestInfoShowsLagPerUnitAndConsumer: after producing 5 and 3 messages to
// two units and acknowledging 2 of the first, the positions say acked 2
// and 0, lags 3 and 3, the consumer holds both with a lag of 6, and the
// backlog is what topic.stats reports.
func TestInfoShowsLagPerUnitAndConsumer(t *testing.T) {
	src := newTestSource(t, 1, 2)
	src.appendTo(0, 0, "a", "b", "c", "d", "e")
	src.appendTo(0, 1, "x", "y", "z")
	h := newHarness(t, src)
	h.join("c1")
	if msgs, _ := h.fetch("c1", 100); len(msgs) != 8 {
		t.Fatalf("fetched %d, want 8", len(msgs))
	}
	h.ack("c1", pos(0, 0, 1))

	info := h.info()
	if info.Name != h.sub || info.Kind != api.SubscriptionStream || info.Start != "earliest" || info.Backlog != 6 {
		t.Fatalf("info %+v, want stream subscription %q from earliest with a backlog of 6", info, h.sub)
	}
	want := []api.SubscriptionUnit{
		{Segment: 0, Bucket: 0, Acked: 2, Next: 5, Lag: 3, Owner: "c1"},
		{Segment: 0, Bucket: 1, Acked: 0, Next: 3, Lag: 3, Owner: "c1"},
	}
	if !slices.Equal(info.Units, want) {
		t.Fatalf("units %+v, want %+v", info.Units, want)
	}
	if len(info.Consumers) != 1 || info.Consumers[0].Name != "c1" || info.Consumers[0].Lag != 6 ||
		!slices.Equal(info.Consumers[0].Units, []api.UnitID{{Segment: 0, Bucket: 0}, {Segment: 0, Bucket: 1}}) {
		t.Fatalf("consumers %+v, want c1 holding both units with a lag of 6", info.Consumers)
	}
	if st := h.stats(); st.Backlog != info.Backlog {
		t.Fatalf("stats backlog %d, info backlog %d", st.Backlog, info.Backlog)
	}

	// A split: the children are withheld until the parent is drained.
	src.split(0)
	src.appendTo(1, 0, "p")
	info = h.info()
	if u := unitAt(t, info, 1, 0); !u.Withheld || u.Lag != 1 || u.Owner != "" {
		t.Fatalf("child unit %+v, want withheld with a lag of 1", u)
	}
	if info.Backlog != 7 {
		t.Fatalf("backlog %d, want 7", info.Backlog)
	}
}

// TestSeekEarliestRedeliversEverything: a subscription that acknowledged
// everything, across a split, gets it all again after a seek to earliest,
// parents before children, and the seek is durable.
func TestSeekEarliestRedeliversEverything(t *testing.T) {
	src := newTestSource(t, 1, 1)
	seq := produceKeys(src, 4, 6, 0)
	src.split(0)
	produceKeys(src, 4, 6, seq)
	h := newHarness(t, src)
	h.join("c1")
	var all []api.Message
	for range 5 {
		msgs, _ := h.fetch("c1", 100)
		h.ackAll("c1", msgs)
		all = append(all, msgs...)
	}
	if len(all) != 12 {
		t.Fatalf("consumed %d, want 12", len(all))
	}
	h.leave("c1")
	if info := h.info(); info.Backlog != 0 || !slices.Equal(info.Drained, []uint64{0}) {
		t.Fatalf("before the seek: %+v", info)
	}

	r := h.seek(to(api.SeekEarliest))
	if r.Backlog != 12 || len(r.Drained) != 0 || len(r.Detached) != 0 {
		t.Fatalf("seek reply %+v, want a backlog of 12, nothing drained", r)
	}
	h.reopen() // the new positions are durable
	h.join("c2")
	order := newKeyOrder(t)
	var again []api.Message
	for range 5 {
		msgs, _ := h.fetch("c2", 100)
		order.see(msgs)
		h.ackAll("c2", msgs)
		again = append(again, msgs...)
	}
	if !slices.Equal(offsets(again), offsets(all)) {
		t.Fatalf("after the seek got %v, want %v", offsets(again), offsets(all))
	}
}

// TestSeekLatestLeavesNothing: after a seek to latest nothing is delivered
// but what is appended afterwards; sealed segments are drained.
func TestSeekLatestLeavesNothing(t *testing.T) {
	src := newTestSource(t, 1, 1)
	src.appendTo(0, 0, "a", "b")
	src.split(0)
	src.appendTo(1, 0, "c")
	src.appendTo(2, 0, "d", "e")
	h := newHarness(t, src)
	h.join("c1")
	h.leave("c1")

	r := h.seek(to(api.SeekLatest))
	if r.Backlog != 0 || !slices.Equal(r.Drained, []uint64{0}) {
		t.Fatalf("seek reply %+v, want no backlog and segment 0 drained", r)
	}
	if u := unitAt(t, r.SubscriptionInfo, 2, 0); u.Acked != 2 || u.Lag != 0 {
		t.Fatalf("unit 2/0 %+v, want acked at its next offset 2", u)
	}
	h.join("c2")
	if msgs, _ := h.fetch("c2", 100); len(msgs) != 0 {
		t.Fatalf("delivered %v after a seek to latest", offsets(msgs))
	}
	src.appendTo(2, 0, "f")
	if msgs := h.fetchUntil("c2", 100, replyTimeout); !slices.Equal(offsets(msgs), []string{"2/0/2"}) {
		t.Fatalf("delivered %v, want only the new 2/0/2", offsets(msgs))
	}
}

// TestSeekByTime: every unit goes to its first offset at or after the
// time; a sealed segment with nothing from then on is drained, and its
// children are read from their positions.
func TestSeekByTime(t *testing.T) {
	src := newTestSource(t, 1, 1)
	src.appendAt(0, 0, 10, 20, 30)
	src.split(0)
	src.appendAt(1, 0, 40, 50, 60)
	src.appendAt(2, 0, 35, 45)
	h := newHarness(t, src)

	h.join("c1")
	h.leave("c1")
	r := h.seek(atTime(50))
	if !slices.Equal(r.Drained, []uint64{0}) {
		t.Fatalf("drained %v, want segment 0 (all before the time)", r.Drained)
	}
	if a, b := unitAt(t, r.SubscriptionInfo, 1, 0), unitAt(t, r.SubscriptionInfo, 2, 0); a.Acked != 1 || b.Acked != 2 || r.Backlog != 2 {
		t.Fatalf("units %+v %+v backlog %d, want 1/0 at 1, 2/0 at 2 (its end), backlog 2", a, b, r.Backlog)
	}
	h.join("c2")
	msgs := h.fetchUntil("c2", 100, replyTimeout)
	if !slices.Equal(offsets(msgs), []string{"1/0/1", "1/0/2"}) {
		t.Fatalf("delivered %v, want 1/0/1 and 1/0/2", offsets(msgs))
	}
	h.leave("c2")

	// A time inside the parent: the parent from there, the children
	// withheld until it is drained, and then from their own positions.
	r = h.seek(atTime(20))
	if len(r.Drained) != 0 || unitAt(t, r.SubscriptionInfo, 0, 0).Acked != 1 || !unitAt(t, r.SubscriptionInfo, 1, 0).Withheld {
		t.Fatalf("seek to 20: %+v", r.SubscriptionInfo)
	}
	if unitAt(t, r.SubscriptionInfo, 1, 0).Acked != 0 || unitAt(t, r.SubscriptionInfo, 2, 0).Acked != 0 {
		t.Fatalf("children after a seek to 20: %+v", r.Units)
	}
	h.join("c3")
	msgs, _ = h.fetch("c3", 100)
	if !slices.Equal(offsets(msgs), []string{"0/0/1", "0/0/2"}) {
		t.Fatalf("delivered %v, want the parent from 0/0/1", offsets(msgs))
	}
	h.ackAll("c3", msgs)
	msgs = h.fetchUntil("c3", 100, replyTimeout)
	if len(msgs) != 5 {
		t.Fatalf("delivered %v, want the 5 of the children", offsets(msgs))
	}

	// A time past everything: every unit at its end.
	h.leave("c3")
	if r := h.seek(atTime(1000)); r.Backlog != 0 || !slices.Equal(r.Drained, []uint64{0}) {
		t.Fatalf("seek past the end: %+v", r.SubscriptionInfo)
	}
}

// TestSeekByMessage: the message's unit at its offset, the ancestors of its
// segment drained, its descendants at their start, the other buckets of a
// drained segment at their end; the rest stays.
func TestSeekByMessage(t *testing.T) {
	src := newTestSource(t, 1, 2) // segment 0, two buckets
	src.appendTo(0, 0, "a0", "a1", "a2", "a3")
	src.appendTo(0, 1, "b0", "b1")
	src.split(0) // -> 1, 2
	src.appendTo(1, 0, "c0", "c1")
	src.appendTo(2, 0, "d0")
	h := newHarness(t, src)
	h.join("c1")
	for range 4 {
		msgs, _ := h.fetch("c1", 100)
		h.ackAll("c1", msgs)
	}
	h.leave("c1")
	if info := h.info(); info.Backlog != 0 {
		t.Fatalf("not consumed: %+v", info)
	}

	// Into the drained parent: 0/0 from 2, 0/1 at its end, the children
	// back at their start and withheld.
	r := h.seek(atMessage(0, 0, 2))
	if len(r.Drained) != 0 || r.Backlog != 2+3 {
		t.Fatalf("seek to 0/0/2: drained %v backlog %d, want none and 5", r.Drained, r.Backlog)
	}
	if a, b := unitAt(t, r.SubscriptionInfo, 0, 0), unitAt(t, r.SubscriptionInfo, 0, 1); a.Acked != 2 || b.Acked != 2 || b.Lag != 0 {
		t.Fatalf("parent units %+v %+v, want 0/0 at 2 and 0/1 at its end", a, b)
	}
	if c := unitAt(t, r.SubscriptionInfo, 1, 0); c.Acked != 0 || !c.Withheld {
		t.Fatalf("child %+v, want at its start, withheld", c)
	}
	h.join("c2")
	msgs, _ := h.fetch("c2", 100)
	if !slices.Equal(offsets(msgs), []string{"0/0/2", "0/0/3"}) {
		t.Fatalf("delivered %v, want 0/0/2 and 0/0/3 first", offsets(msgs))
	}
	h.ackAll("c2", msgs)
	msgs = h.fetchUntil("c2", 100, replyTimeout)
	got := offsets(msgs)
	slices.Sort(got)
	if !slices.Equal(got, []string{"1/0/0", "1/0/1", "2/0/0"}) {
		t.Fatalf("then %v, want the children from their start", got)
	}
	h.ackAll("c2", msgs)
	h.leave("c2")

	// Into a child: its ancestor drained, its sibling unchanged (consumed).
	r = h.seek(atMessage(1, 0, 1))
	if !slices.Equal(r.Drained, []uint64{0}) || r.Backlog != 1 || unitAt(t, r.SubscriptionInfo, 2, 0).Lag != 0 {
		t.Fatalf("seek to 1/0/1: %+v", r.SubscriptionInfo)
	}
	h.join("c3")
	if msgs := h.fetchUntil("c3", 100, replyTimeout); !slices.Equal(offsets(msgs), []string{"1/0/1"}) {
		t.Fatalf("delivered %v, want 1/0/1", offsets(msgs))
	}
	h.leave("c3")

	// At a unit's next offset: nothing of it is left.
	if r := h.seek(atMessage(2, 0, 1)); unitAt(t, r.SubscriptionInfo, 2, 0).Lag != 0 {
		t.Fatalf("seek to the end of 2/0: %+v", r.Units)
	}

	// Into a child while its parent is not drained: the parent becomes
	// drained, or the child would be withheld behind it.
	h.seek(to(api.SeekEarliest))
	r = h.seek(atMessage(2, 0, 0))
	if !slices.Equal(r.Drained, []uint64{0}) || unitAt(t, r.SubscriptionInfo, 2, 0).Withheld {
		t.Fatalf("seek to 2/0/0 after earliest: %+v", r.SubscriptionInfo)
	}
	if u := unitAt(t, r.SubscriptionInfo, 1, 0); u.Acked != 0 || u.Lag != 2 {
		t.Fatalf("sibling 1/0 %+v, want where earliest left it", u)
	}
}

// TestSeekRefusedWhileAttachedUnlessForced: a seek with a consumer attached
// is refused and changes nothing; forced, the consumer is detached: its
// parked fetch and its later requests are refused with NOT_OWNER, until it
// leaves; a new consumer reads from the new position.
func TestSeekRefusedWhileAttachedUnlessForced(t *testing.T) {
	src := newTestSource(t, 1, 1)
	src.appendTo(0, 0, "a", "b", "c")
	h := newHarness(t, src)
	h.join("c1")
	msgs, _ := h.fetch("c1", 100)
	h.ackAll("c1", msgs)
	before := h.info()

	_, err := h.seekErr(to(api.SeekEarliest))
	wantCode(t, err, api.CodeInvalidArgument)
	if !strings.Contains(err.Error(), "c1") || !strings.Contains(err.Error(), "force") {
		t.Fatalf("refusal %q does not name the consumer and force", err)
	}
	if after := h.info(); !slices.Equal(after.Units, before.Units) {
		t.Fatalf("a refused seek changed %+v into %+v", before.Units, after.Units)
	}

	parked := h.fetchAsync(api.FetchRequest{Consumer: "c1", Wait: "20s"})
	poll.Eventually(t, replyTimeout, "the fetch parks", func() bool {
		st := h.stats()
		return len(st.Consumers) == 1 && st.Consumers[0].Parked
	})
	req := to(api.SeekEarliest)
	req.Force = true
	r := h.seek(req)
	if !slices.Equal(r.Detached, []string{"c1"}) || len(r.Consumers) != 0 || r.Backlog != 3 {
		t.Fatalf("forced seek %+v, want c1 detached and a backlog of 3", r)
	}
	wantCode(t, wait(t, parked).err, api.CodeNotOwner)
	wantCode(t, h.fetchReq(api.FetchRequest{Consumer: "c1", Wait: "0s"}).err, api.CodeNotOwner)
	wantCode(t, h.ackErr("c1", pos(0, 0, 0)), api.CodeNotOwner)
	_, err = h.joinReq(api.JoinRequest{Consumer: "c1"})
	wantCode(t, err, api.CodeNotOwner)

	h.join("c2")
	if msgs, _ := h.fetch("c2", 100); len(msgs) != 3 {
		t.Fatalf("a new consumer got %v, want the 3 again", offsets(msgs))
	}
	h.leave("c1") // told: it may join again
	h.join("c1")
}

// TestSeekRefusesBadInputsAndChangesNothing: every refusal has its code,
// and the positions stay as they were.
func TestSeekRefusesBadInputsAndChangesNothing(t *testing.T) {
	src := newTestSource(t, 1, 2)
	src.appendTo(0, 0, "a", "b", "c")
	h := newHarness(t, src)
	h.join("c1")
	h.fetch("c1", 100)
	h.ack("c1", pos(0, 0, 0))
	h.leave("c1")
	before := h.info()
	ms := int64(5)
	neg := int64(-1)
	p := func(seg uint64, bucket int, off uint64) *api.Position {
		return &api.Position{Segment: seg, Bucket: bucket, Offset: off}
	}
	for _, tc := range []struct {
		name string
		req  api.SubscriptionSeekRequest
		code api.Code
	}{
		{"no target", api.SubscriptionSeekRequest{}, api.CodeBadRequest},
		{"two targets", api.SubscriptionSeekRequest{To: api.SeekEarliest, Time: &ms}, api.CodeInvalidArgument},
		{"three targets", api.SubscriptionSeekRequest{To: api.SeekLatest, Time: &ms, Message: p(0, 0, 0)}, api.CodeInvalidArgument},
		{"unknown to", api.SubscriptionSeekRequest{To: "middle"}, api.CodeInvalidArgument},
		{"negative time", api.SubscriptionSeekRequest{Time: &neg}, api.CodeInvalidArgument},
		{"unknown segment", api.SubscriptionSeekRequest{Message: p(7, 0, 0)}, api.CodeSegmentNotFound},
		{"bucket out of range", api.SubscriptionSeekRequest{Message: p(0, 2, 0)}, api.CodeInvalidArgument},
		{"negative bucket", api.SubscriptionSeekRequest{Message: p(0, -1, 0)}, api.CodeInvalidArgument},
		{"offset past the end", api.SubscriptionSeekRequest{Message: p(0, 0, 4)}, api.CodeInvalidArgument},
		{"bad subscription name", api.SubscriptionSeekRequest{Subscription: "a.b", To: api.SeekEarliest}, api.CodeInvalidName},
	} {
		_, err := h.seekErr(tc.req)
		var e *api.Error
		if !errors.As(err, &e) || e.Code != tc.code {
			t.Errorf("%s: %v, want %s", tc.name, err, tc.code.Symbol)
		}
	}
	if after := h.info(); !slices.Equal(after.Units, before.Units) {
		t.Fatalf("refused seeks changed %+v into %+v", before.Units, after.Units)
	}
	h.sub = "nobody"
	_, err := h.seekErr(to(api.SeekEarliest))
	wantCode(t, err, api.CodeNotFound)
}

// TestDeleteSubscription: refused with a consumer attached; forced, the
// consumer is told NOT_FOUND, the state is gone, and a new join creates a
// new subscription that reads from the start.
func TestDeleteSubscription(t *testing.T) {
	src := newTestSource(t, 1, 1)
	src.appendTo(0, 0, "a", "b")
	h := newHarness(t, src)
	h.join("c1")
	msgs, _ := h.fetch("c1", 100)
	h.ackAll("c1", msgs)

	_, err := h.m.DeleteSubscription(h.src, h.sub, false)
	wantCode(t, err, api.CodeInvalidArgument)
	if got := h.m.Subscriptions(src.Topic()); !slices.Equal(got, []string{h.sub}) {
		t.Fatalf("subscriptions %v after a refused delete", got)
	}
	parked := h.fetchAsync(api.FetchRequest{Consumer: "c1", Wait: "20s"})
	poll.Eventually(t, replyTimeout, "the fetch parks", func() bool {
		st := h.stats()
		return len(st.Consumers) == 1 && st.Consumers[0].Parked
	})
	detached, err := h.m.DeleteSubscription(h.src, h.sub, true)
	if err != nil || !slices.Equal(detached, []string{"c1"}) {
		t.Fatalf("forced delete: %v, %v", detached, err)
	}
	wantCode(t, wait(t, parked).err, api.CodeNotFound)
	if got := h.m.Subscriptions(src.Topic()); len(got) != 0 {
		t.Fatalf("subscriptions %v after the delete", got)
	}
	entries, _ := os.ReadDir(h.m.Dir(src.Topic(), h.sub) + "/..")
	if len(entries) != 0 {
		t.Fatalf("the topic's directory still holds %v", entries)
	}
	wantCode(t, h.fetchReq(api.FetchRequest{Consumer: "c1", Wait: "0s"}).err, api.CodeNotFound)
	_, err = h.joinReq(api.JoinRequest{Consumer: "c1"})
	wantCode(t, err, api.CodeNotFound)
	_, err = h.infoErr()
	wantCode(t, err, api.CodeNotFound)

	h.join("c2") // a new subscription, from the start
	if msgs, _ := h.fetch("c2", 100); len(msgs) != 2 {
		t.Fatalf("the new subscription delivered %v, want both messages", offsets(msgs))
	}
	if _, err := h.m.DeleteSubscription(h.src, "nobody", false); !errors.Is(err, &api.Error{Code: api.CodeNotFound}) {
		t.Fatalf("delete of an unknown subscription: %v", err)
	}
	if _, err := h.m.DeleteSubscription(h.src, "a/b", false); !errors.Is(err, api.ErrInvalidName) {
		t.Fatalf("delete of a bad name: %v", err)
	}
}

// TestDeleteSubscriptionWhoseLogDoesNotLoad: a subscription whose state
// cannot be read can still be deleted.
func TestDeleteSubscriptionWhoseLogDoesNotLoad(t *testing.T) {
	src := newTestSource(t, 1, 1)
	h := newHarness(t, src)
	h.join("a")
	h.leave("a")
	h.reopen()
	log, err := wal.Open(h.m.groupDir(src.Topic(), h.sub), wal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := log.Append(wal.Record{Payload: []byte{recordVersion, 99}}); err != nil {
		t.Fatal(err)
	}
	log.Close()
	_, err = h.infoErr()
	wantCode(t, err, api.CodeUnavailable)
	if _, err := h.m.DeleteSubscription(h.src, h.sub, false); err != nil {
		t.Fatalf("delete of an unreadable subscription: %v", err)
	}
	if got := h.m.Subscriptions(src.Topic()); len(got) != 0 {
		t.Fatalf("subscriptions %v after the delete", got)
	}
}
