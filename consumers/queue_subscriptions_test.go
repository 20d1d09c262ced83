package consumers

import (
	"slices"
	"testing"

	"github.com/braidmq/braid/api"
)

// Subscription management of queue subscriptions (queue_seek.go).

func (h *queueHarness) info() api.SubscriptionInfo {
	h.t.Helper()
	type result struct {
		info api.SubscriptionInfo
		err  error
	}
	ch := make(chan result, 1)
	h.m.Info(h.src, h.sub, func(i api.SubscriptionInfo, err error) { ch <- result{i, err} })
	res := wait(h.t, ch)
	if res.err != nil {
		h.t.Fatal(res.err)
	}
	return res.info
}

func (h *queueHarness) seekErr(req api.SubscriptionSeekRequest) (api.SubscriptionSeekReply, error) {
	h.t.Helper()
	type result struct {
		r   api.SubscriptionSeekReply
		err error
	}
	ch := make(chan result, 1)
	req.Subscription = h.sub
	h.m.Seek(h.src, req, func(r api.SubscriptionSeekReply, err error) { ch <- result{r, err} })
	res := wait(h.t, ch)
	return res.r, res.err
}

// TestQueueInfoShowsLagInflightAndAckedAhead: of 6 messages in one unit,
// 4 are delivered, offsets 0 and 2 acked: acked 1, lag 5, one acked ahead,
// two in flight with the consumer, a backlog of 4 as topic.stats says.
func TestQueueInfoShowsLagInflightAndAckedAhead(t *testing.T) {
	src := newTestSource(t, 1, 1)
	src.appendTo(0, 0, "a", "b", "c", "d", "e", "f")
	h := newQueueHarness(t, src)
	h.join("w1")
	msgs := h.fetch("w1", 4)
	if len(msgs) != 4 {
		t.Fatalf("fetched %d, want 4", len(msgs))
	}
	h.ack("w1", msgs[0], msgs[2])

	info := h.info()
	want := []api.SubscriptionUnit{{Segment: 0, Bucket: 0, Acked: 1, Next: 6, Lag: 5, Inflight: 2, AckedAhead: 1}}
	if info.Kind != api.SubscriptionQueue || !slices.Equal(info.Units, want) || info.Backlog != 4 {
		t.Fatalf("info %+v, want kind queue, units %+v, backlog 4", info, want)
	}
	if len(info.Consumers) != 1 || info.Consumers[0].Name != "w1" || info.Consumers[0].Inflight != 2 {
		t.Fatalf("consumers %+v, want w1 holding 2", info.Consumers)
	}
	if st := h.stats(); st.Backlog != info.Backlog {
		t.Fatalf("stats backlog %d, info backlog %d", st.Backlog, info.Backlog)
	}
}

// TestQueueSeekForcedKeepsConsumers: a seek to earliest with a consumer
// attached is refused; forced, the consumer stays and is delivered
// everything again, what it held forgotten; the positions are durable.
func TestQueueSeekForcedKeepsConsumers(t *testing.T) {
	src := newTestSource(t, 1, 2)
	total := fill(src, 5)
	h := newQueueHarness(t, src)
	h.join("w1")
	msgs := h.fetch("w1", 100)
	h.ack("w1", msgs[:6]...)

	_, err := h.seekErr(api.SubscriptionSeekRequest{To: api.SeekEarliest})
	wantCode(t, err, api.CodeInvalidArgument)
	r, err := h.seekErr(api.SubscriptionSeekRequest{To: api.SeekEarliest, Force: true})
	if err != nil || r.Backlog != uint64(total) || len(r.Detached) != 0 || len(r.Consumers) != 1 {
		t.Fatalf("forced seek: %+v, %v; want a backlog of %d and w1 kept", r, err, total)
	}
	again := h.fetch("w1", 100)
	if len(again) != total {
		t.Fatalf("after the seek w1 got %d, want all %d", len(again), total)
	}
	h.ack("w1", again...)
	if info := h.info(); info.Backlog != 0 {
		t.Fatalf("backlog %d after acking everything", info.Backlog)
	}

	h.leave("w1")
	if _, err := h.seekErr(api.SubscriptionSeekRequest{To: api.SeekLatest}); err != nil {
		t.Fatal(err)
	}
	ms := int64(3) // fill's records have times 1 to 5
	r, err = h.seekErr(api.SubscriptionSeekRequest{Time: &ms})
	if err != nil || r.Backlog != 2*3 {
		t.Fatalf("seek to time 3: %+v, %v; want 3 left in each unit", r.Units, err)
	}
	h.reopen()
	if info := h.info(); info.Backlog != 6 || info.Units[0].Acked != 2 || info.Units[1].Acked != 2 {
		t.Fatalf("after a restart: %+v", info.Units)
	}
	h.join("w2")
	if msgs := h.fetch("w2", 100); len(msgs) != 6 || msgs[0].Deliveries != 1 {
		t.Fatalf("w2 got %v", offsets(msgs))
	}
}

// TestQueueSeekByMessageKeepsOtherUnits: a seek to a message moves its
// unit alone; another unit keeps its window and what its consumer holds.
func TestQueueSeekByMessageKeepsOtherUnits(t *testing.T) {
	src := newTestSource(t, 1, 2)
	fill(src, 4)
	h := newQueueHarness(t, src)
	h.join("w1")
	msgs := h.fetch("w1", 100)
	h.ack("w1", msgs...)
	h.leave("w1")
	p := pos(0, 1, 1)
	r, err := h.seekErr(api.SubscriptionSeekRequest{Message: &p})
	if err != nil {
		t.Fatal(err)
	}
	if a, b := unitAt(t, r.SubscriptionInfo, 0, 0), unitAt(t, r.SubscriptionInfo, 0, 1); a.Acked != 4 || b.Acked != 1 || r.Backlog != 3 {
		t.Fatalf("units %+v %+v, want 0/0 kept at 4, 0/1 at 1", a, b)
	}
	h.join("w2")
	if got := offsets(h.fetch("w2", 100)); !slices.Equal(got, []string{"0/1/1", "0/1/2", "0/1/3"}) {
		t.Fatalf("w2 got %v", got)
	}
}

// TestQueueDeleteTellsItsConsumers: a forced delete of a queue subscription
// detaches its consumer: NOT_FOUND to its fetches, acks and nacks.
func TestQueueDeleteTellsItsConsumers(t *testing.T) {
	src := newTestSource(t, 1, 1)
	src.appendTo(0, 0, "a", "b")
	h := newQueueHarness(t, src)
	h.join("w1")
	msgs := h.fetch("w1", 1)
	_, err := h.m.DeleteSubscription(h.src, h.sub, false)
	wantCode(t, err, api.CodeInvalidArgument)
	detached, err := h.m.DeleteSubscription(h.src, h.sub, true)
	if err != nil || !slices.Equal(detached, []string{"w1"}) {
		t.Fatalf("forced delete: %v, %v", detached, err)
	}
	wantCode(t, h.ackErr("w1", positions(msgs)...), api.CodeNotFound)
	ch := make(chan error, 1)
	h.m.Nack(h.src, api.NackRequest{Subscription: h.sub, Consumer: "w1", Nacks: positions(msgs)}, func(err error) { ch <- err })
	wantCode(t, wait(t, ch), api.CodeNotFound)
	wantCode(t, h.joinReq(api.QueueJoinRequest{Consumer: "w1"}), api.CodeNotFound)
	if got := h.m.Subscriptions(src.Topic()); len(got) != 0 {
		t.Fatalf("subscriptions %v after the delete", got)
	}
	h.join("w2")
	if msgs := h.fetch("w2", 100); len(msgs) != 2 || msgs[0].Deliveries != 1 {
		t.Fatalf("the new subscription delivered %v", offsets(msgs))
	}
}
