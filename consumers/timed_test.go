package consumers

import (
	"os"
	"testing"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/internal/poll"
	"github.com/braidmq/braid/wal"
)

// Behaviours driven by time, seen from outside through a fake clock: a
// millisecond before its deadline nothing happens, at or past it the thing
// does. (Stream sessions are in group_test.go, graces in owners_test.go,
// ack timeouts and nack backoff in queue_test.go, idleness in
// idle_test.go.)

func TestParkedFetchExpiresEmpty(t *testing.T) {
	src := newTestSource(t, 1, 1)
	h := newHarness(t, src)
	h.join("a")
	reply := h.fetchAsync(api.FetchRequest{Consumer: "a", Wait: "50ms"})
	h.parked("a")
	h.advance(50*time.Millisecond - time.Millisecond)
	if st := h.stats(); !st.Consumers[0].Parked {
		t.Fatalf("parked fetch answered %+v a millisecond before its wait of 50ms", <-reply)
	}
	h.advance(time.Millisecond)
	res := wait(t, reply)
	if res.err != nil || len(res.msgs) != 0 || res.assigned != 1 {
		t.Fatalf("expired fetch: %v, assigned %d, %v; want empty, assigned 1", res.msgs, res.assigned, res.err)
	}
}

func TestQueueParkedFetchExpiresEmpty(t *testing.T) {
	src := newTestSource(t, 1, 1)
	h := newQueueHarness(t, src)
	h.join("a")
	reply := h.fetchAsync("a", 10, "50ms")
	h.parked("a")
	h.advance(50*time.Millisecond - time.Millisecond)
	if st := h.stats(); !st.Consumers[0].Parked {
		t.Fatalf("parked fetch answered %+v a millisecond before its wait of 50ms", <-reply)
	}
	h.advance(time.Millisecond)
	if res := waitLong(t, reply); res.err != nil || len(res.msgs) != 0 {
		t.Fatalf("expired fetch: %v, %v; want empty", res.msgs, res.err)
	}
}

// TestQueueSilentConsumerIsDeclaredDead: a queue consumer keeps what it
// holds while silent for its session timeout; past it, it is dead and what
// it held goes to the others, delivered again.
func TestQueueSilentConsumerIsDeclaredDead(t *testing.T) {
	src := newTestSource(t, 1, 1)
	fill(src, 3)
	h := newQueueHarness(t, src)
	// No ack timeout: only the session can take back what a holds.
	if err := h.joinReq(api.QueueJoinRequest{Consumer: "a", SessionTimeout: "1s", AckTimeout: "0s"}); err != nil {
		t.Fatal(err)
	}
	held := h.fetch("a", 2)
	h.join("b")
	if got := h.fetch("b", 10); len(got) != 1 {
		t.Fatalf("b got %d messages, want the 1 a does not hold", len(got))
	}
	h.advance(time.Second)
	if got := h.fetch("b", 10); len(got) != 0 {
		t.Fatalf("b got %v when a had been silent for just its session timeout", got)
	}
	h.advance(time.Millisecond)
	var got []api.Message
	poll.Eventually(t, replyTimeout, "a's messages go to b", func() bool {
		got = append(got, h.fetch("b", 10)...)
		return len(got) >= len(held)
	})
	for i, m := range got {
		if idOf(m) != idOf(held[i]) || m.Deliveries != 2 {
			t.Fatalf("b got %s with deliveries %d, want a's %s again", idOf(m), m.Deliveries, idOf(held[i]))
		}
	}
	if st := h.stats(); len(st.Consumers) != 1 || st.Consumers[0].Name != "b" {
		t.Fatalf("consumers %+v after a's session, want b alone", st.Consumers)
	}
}

// TestQueueDeadLetterRetriesAfterAFailure: a message whose dead-letter
// append failed is sent again deadLetterRetry later, not before.
func TestQueueDeadLetterRetriesAfterAFailure(t *testing.T) {
	src := newTestSource(t, 1, 1)
	src.appendTo(0, 0, "poison")
	h := newQueueHarness(t, src)
	maxDeliveries := 1
	if err := h.joinReq(api.QueueJoinRequest{Consumer: "a", MaxDeliveries: &maxDeliveries, NackDelay: "0s"}); err != nil {
		t.Fatal(err)
	}
	setFail := func(fail bool) {
		h.dlq.mu.Lock()
		h.dlq.fail = fail
		h.dlq.mu.Unlock()
	}
	setFail(true)
	msgs := h.fetch("a", 10)
	h.nack("a", "", msgs[0]) // its last delivery: to the dead-letter topic, which fails
	poll.Eventually(t, replyTimeout, "the failed dead letter waits for its retry", func() bool { return h.stats().Delayed == 1 })
	setFail(false)
	dlq := "topic://acme/orders/" + sanitize(t.Name()) + "-dlq"
	h.advance(deadLetterRetry - time.Millisecond)
	if st := h.stats(); st.Delayed != 1 || h.dlq.count(dlq) != 0 {
		t.Fatalf("dead letter retried a millisecond before deadLetterRetry: delayed %d, sent %d", st.Delayed, h.dlq.count(dlq))
	}
	h.advance(time.Millisecond)
	poll.Eventually(t, replyTimeout, "the dead letter is retried", func() bool { return h.stats().Backlog == 0 })
	if n := h.dlq.count(dlq); n != 1 {
		t.Fatalf("%d dead letters in %s, want 1", n, dlq)
	}
}

// TestBrokenLogRetriesOncePerSecond: a group whose log cannot be replayed
// refuses requests and loads again at the first request loadRetryEvery
// after the failure on its clock, not before.
func TestBrokenLogRetriesOncePerSecond(t *testing.T) {
	src := newTestSource(t, 1, 1)
	h := newHarness(t, src)
	h.join("a")
	if err := h.m.Close(); err != nil {
		t.Fatal(err)
	}
	dir := h.m.groupDir(src.Topic(), h.sub)
	log, err := wal.Open(dir, wal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := log.Append(wal.Record{Payload: []byte{recordVersion, 99}}); err != nil {
		t.Fatal(err)
	}
	log.Close()
	h.m = NewManager(h.system, h.dir, testLogger(), h.opts...)
	_, err = h.joinReq(api.JoinRequest{Consumer: "a"})
	wantCode(t, err, api.CodeUnavailable)

	// The cause goes away: the subscription's state is removed, and the
	// next load finds none (a join creates it anew).
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	h.clock.Advance(loadRetryEvery - time.Millisecond)
	_, err = h.joinReq(api.JoinRequest{Consumer: "a"})
	wantCode(t, err, api.CodeUnavailable)
	h.clock.Advance(time.Millisecond)
	if _, err := h.joinReq(api.JoinRequest{Consumer: "a"}); err != nil {
		t.Fatalf("join a retry interval after the failure: %v", err)
	}
}
