package consumers

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/internal/poll"
	"github.com/braidmq/braid/topology"
)

// queueHarness drives one queue subscription through a real QueueManager,
// on a fake clock the test moves (advance): ack timeouts, nack delays,
// sessions and parked fetches take no real time.
type queueHarness struct {
	t      *testing.T
	system *actor.ActorSystem
	m      *QueueManager
	src    *testSource
	dir    string
	sub    string
	opts   []Option // WithClock(clock) and WithDeadLetter first
	dlq    *fakeDeadLetters
	clock  *testClock
}

// fakeDeadLetters records what the group sends to dead-letter topics.
type fakeDeadLetters struct {
	mu   sync.Mutex
	recs map[string][]api.Record
	fail bool
}

func (f *fakeDeadLetters) send(uri string, rec api.Record, done func(error)) {
	f.mu.Lock()
	if f.fail {
		f.mu.Unlock()
		done(fmt.Errorf("injected dead-letter failure"))
		return
	}
	f.recs[uri] = append(f.recs[uri], rec)
	f.mu.Unlock()
	done(nil)
}

func (f *fakeDeadLetters) count(uri string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.recs[uri])
}

func newQueueHarness(t *testing.T, src *testSource, opts ...Option) *queueHarness {
	t.Helper()
	system := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return testLogger() }))
	h := &queueHarness{t: t, system: system, src: src, dir: t.TempDir(), sub: "work", dlq: &fakeDeadLetters{recs: map[string][]api.Record{}},
		clock: newTestClock()}
	h.opts = append([]Option{WithClock(h.clock), WithDeadLetter(h.dlq.send)}, opts...)
	h.m = NewQueueManager(system, h.dir, testLogger(), h.opts...)
	t.Cleanup(func() {
		if err := h.m.Close(); err != nil {
			t.Error(err)
		}
		system.Shutdown()
	})
	return h
}

func (h *queueHarness) reopen() {
	h.t.Helper()
	if err := h.m.Close(); err != nil {
		h.t.Fatal(err)
	}
	h.m = NewQueueManager(h.system, h.dir, testLogger(), h.opts...)
}

func (h *queueHarness) joinReq(req api.QueueJoinRequest) error {
	h.t.Helper()
	ch := make(chan error, 1)
	req.Subscription = h.sub
	h.m.Join(h.src, req, func(_ api.JoinReply, err error) { ch <- err })
	return wait(h.t, ch)
}

func (h *queueHarness) join(consumer string) {
	h.t.Helper()
	if err := h.joinReq(api.QueueJoinRequest{Consumer: consumer}); err != nil {
		h.t.Fatal(err)
	}
}

func (h *queueHarness) fetchWait(consumer string, max int, wait string) []api.Message {
	h.t.Helper()
	res := waitLong(h.t, h.fetchAsync(consumer, max, wait))
	if res.err != nil {
		h.t.Fatalf("fetch by %s: %v", consumer, res.err)
	}
	return res.msgs
}

func (h *queueHarness) fetch(consumer string, max int) []api.Message {
	h.t.Helper()
	return h.fetchWait(consumer, max, "0s")
}

// fetchAsync starts a fetch and returns where its reply will arrive.
func (h *queueHarness) fetchAsync(consumer string, max int, wait string) <-chan fetchResult {
	ch := make(chan fetchResult, 1)
	h.m.Fetch(h.src, api.FetchRequest{Subscription: h.sub, Consumer: consumer, Max: max, Wait: wait},
		func(msgs []api.Message, assigned int, err error) { ch <- fetchResult{msgs, assigned, err} })
	return ch
}

// advance moves the fake clock on by d once the group has handled every
// request sent to it (see harness.advance).
func (h *queueHarness) advance(d time.Duration) {
	h.t.Helper()
	h.stats()
	h.clock.advance(h.t, d)
}

// parked waits until consumer's fetch is parked in the group.
func (h *queueHarness) parked(consumer string) {
	h.t.Helper()
	poll.Eventually(h.t, replyTimeout, consumer+"'s fetch parks", func() bool {
		for _, c := range h.stats().Consumers {
			if c.Name == consumer {
				return c.Parked
			}
		}
		return false
	})
}

func waitLong[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(40 * time.Second):
		t.Fatal("no reply")
		panic("unreachable")
	}
}

func (h *queueHarness) ackErr(consumer string, ps ...api.Position) error {
	h.t.Helper()
	ch := make(chan error, 1)
	h.m.Ack(h.src, api.AckRequest{Subscription: h.sub, Consumer: consumer, Acks: ps}, func(err error) { ch <- err })
	return wait(h.t, ch)
}

func (h *queueHarness) ack(consumer string, msgs ...api.Message) {
	h.t.Helper()
	if len(msgs) == 0 {
		return
	}
	if err := h.ackErr(consumer, positions(msgs)...); err != nil {
		h.t.Fatalf("ack by %s: %v", consumer, err)
	}
}

func (h *queueHarness) nack(consumer, delay string, msgs ...api.Message) {
	h.t.Helper()
	ch := make(chan error, 1)
	h.m.Nack(h.src, api.NackRequest{Subscription: h.sub, Consumer: consumer, Nacks: positions(msgs), Delay: delay}, func(err error) { ch <- err })
	if err := wait(h.t, ch); err != nil {
		h.t.Fatalf("nack by %s: %v", consumer, err)
	}
}

func (h *queueHarness) leave(consumer string) {
	h.t.Helper()
	ch := make(chan error, 1)
	h.m.Leave(h.src, api.LeaveRequest{Subscription: h.sub, Consumer: consumer}, func(err error) { ch <- err })
	if err := wait(h.t, ch); err != nil {
		h.t.Fatal(err)
	}
}

func (h *queueHarness) stats() QueueStats {
	h.t.Helper()
	type result struct {
		s   QueueStats
		err error
	}
	ch := make(chan result, 1)
	h.m.Stats(h.src, h.sub, func(s QueueStats, err error) { ch <- result{s, err} })
	res := wait(h.t, ch)
	if res.err != nil {
		h.t.Fatal(res.err)
	}
	return res.s
}

func positions(msgs []api.Message) []api.Position {
	ps := make([]api.Position, len(msgs))
	for i, m := range msgs {
		ps[i] = api.Position{Segment: m.Segment, Bucket: m.Bucket, Offset: m.Offset}
	}
	return ps
}

func idOf(m api.Message) string { return fmt.Sprintf("%d/%d/%d", m.Segment, m.Bucket, m.Offset) }

// fill appends n payloads to every bucket of every active segment.
func fill(src *testSource, n int) int {
	total := 0
	for _, s := range src.Layout().Active() {
		for b := range s.Buckets {
			payloads := make([]string, n)
			for i := range payloads {
				payloads[i] = fmt.Sprintf("m-%d-%d-%d", s.ID, b, i)
			}
			src.appendTo(s.ID, b, payloads...)
			total += n
		}
	}
	return total
}

func TestQueueSharesEveryUnitAndAcksIndividually(t *testing.T) {
	src := newTestSource(t, 2, 4) // 2 segments, 2 buckets each
	total := fill(src, 10)
	h := newQueueHarness(t, src)
	h.join("a")
	h.join("b")
	a := h.fetch("a", 15)
	b := h.fetch("b", 100)
	if len(a) != 15 || len(a)+len(b) != total {
		t.Fatalf("a got %d, b got %d, want 15 and %d in all", len(a), len(b), total)
	}
	if len(unitsOf(a)) != 4 {
		t.Fatalf("a's fetch took from %d units, want all 4", len(unitsOf(a)))
	}
	seen := map[string]bool{}
	for _, m := range slices.Concat(a, b) {
		if seen[idOf(m)] || m.Deliveries != 1 {
			t.Fatalf("message %s delivered twice or with deliveries %d", idOf(m), m.Deliveries)
		}
		seen[idOf(m)] = true
	}
	// Ack every other message, out of order; a consumer may ack what the
	// other holds.
	var acked, unacked []api.Message
	for i, m := range slices.Concat(a, b) {
		if i%2 == 0 {
			acked = append(acked, m)
		} else {
			unacked = append(unacked, m)
		}
	}
	slices.Reverse(acked)
	h.ack("b", acked...)
	if st := h.stats(); st.Backlog != uint64(len(unacked)) || st.Inflight != len(unacked) {
		t.Fatalf("backlog %d inflight %d, want %d", st.Backlog, st.Inflight, len(unacked))
	}
	h.ack("a", unacked...)
	h.ack("a", unacked...) // twice is fine
	if st := h.stats(); st.Backlog != 0 || st.InWindow != 0 {
		t.Fatalf("after all acks: backlog %d, in window %d", st.Backlog, st.InWindow)
	}
	wantCode(t, h.ackErr("a", pos(0, 0, 10)), api.CodeInvalidArgument) // never delivered
	wantCode(t, h.ackErr("nobody", pos(0, 0, 1)), api.CodeConsumerUnknown)
}

func TestQueueNackRedeliversAfterItsDelayWithCounts(t *testing.T) {
	src := newTestSource(t, 1, 1)
	fill(src, 3)
	h := newQueueHarness(t, src)
	backoff := 2.0
	if err := h.joinReq(api.QueueJoinRequest{Consumer: "a", NackDelay: "400ms", NackBackoff: &backoff, MaxNackDelay: "600ms"}); err != nil {
		t.Fatal(err)
	}
	msgs := h.fetch("a", 3)
	h.nack("a", "0s", msgs[0])
	again := h.fetch("a", 10)
	if len(again) != 1 || again[0].Offset != 0 || again[0].Deliveries != 2 {
		t.Fatalf("after a nack without delay: %+v", again)
	}
	// The backoff: the 2nd delivery's nack waits 400ms*2, capped at 600ms.
	h.nack("a", "", again[0])
	if got := h.fetch("a", 10); len(got) != 0 {
		t.Fatalf("delayed message delivered at once: %+v", got)
	}
	h.advance(600*time.Millisecond - time.Millisecond)
	if got := h.fetch("a", 10); len(got) != 0 {
		t.Fatalf("delayed message delivered a millisecond before its backoff of 600ms: %+v", got)
	}
	// A fetch parked meanwhile is served by the group's timer once the
	// backoff is over.
	parked := h.fetchAsync("a", 10, "2s")
	h.parked("a")
	h.advance(time.Millisecond)
	res := waitLong(t, parked)
	if res.err != nil || len(res.msgs) != 1 {
		t.Fatalf("parked fetch at the end of the backoff: %+v, %v", res.msgs, res.err)
	}
	if third := res.msgs; third[0].Offset != 0 || third[0].Deliveries != 3 {
		t.Fatalf("third delivery %+v", third[0])
	}
	// A nack of a message this consumer does not hold is ignored.
	h.join("b")
	h.nack("b", "0s", msgs[1])
	if got := h.fetch("b", 10); len(got) != 0 {
		t.Fatalf("b's nack of a's message redelivered it: %+v", got)
	}
}

func TestQueueAckTimeoutAndDeadConsumersRedeliver(t *testing.T) {
	src := newTestSource(t, 1, 2)
	fill(src, 4)
	h := newQueueHarness(t, src)
	if err := h.joinReq(api.QueueJoinRequest{Consumer: "slow", AckTimeout: "1s"}); err != nil {
		t.Fatal(err)
	}
	held := h.fetch("slow", 3)
	h.join("fast")
	rest := h.fetch("fast", 100)
	if len(rest) != 5 {
		t.Fatalf("fast got %d, want the 5 slow does not hold", len(rest))
	}
	h.ack("fast", rest...)
	h.advance(time.Second - time.Millisecond)
	if got := h.fetch("fast", 100); len(got) != 0 {
		t.Fatalf("redelivered a millisecond before the ack timeout of 1s: %+v", got)
	}
	h.advance(time.Millisecond)
	var redelivered []api.Message
	poll.Eventually(t, replyTimeout, "the 3 messages past their ack timeout are redelivered", func() bool {
		redelivered = append(redelivered, h.fetch("fast", 100)...)
		return len(redelivered) >= 3
	})
	for _, m := range redelivered {
		if m.Deliveries != 2 {
			t.Fatalf("redelivery after the ack timeout has deliveries %d", m.Deliveries)
		}
	}
	h.ack("slow", held...) // late, but the work is done: accepted
	if st := h.stats(); st.Backlog != 0 {
		t.Fatalf("backlog %d after every ack", st.Backlog)
	}

	// A consumer that leaves hands back what it held, at once.
	src.appendTo(0, 0, "x", "y")
	if err := h.joinReq(api.QueueJoinRequest{Consumer: "slow", AckTimeout: "0s"}); err != nil {
		t.Fatal(err)
	}
	got := h.fetch("slow", 10)
	if len(got) != 2 {
		t.Fatalf("got %d", len(got))
	}
	h.leave("slow")
	back := h.fetch("fast", 10)
	if len(back) != 2 || back[0].Deliveries != 2 {
		t.Fatalf("after leave: %+v", back)
	}
}

func TestQueueDeadLettersAfterMaxDeliveries(t *testing.T) {
	src := newTestSource(t, 1, 1)
	src.appendTo(0, 0, "poison", "fine")
	h := newQueueHarness(t, src)
	maxDeliveries := 2
	if err := h.joinReq(api.QueueJoinRequest{Consumer: "a", MaxDeliveries: &maxDeliveries, NackDelay: "0s"}); err != nil {
		t.Fatal(err)
	}
	first := h.fetch("a", 10)
	h.ack("a", first[1])
	h.nack("a", "", first[0])
	second := h.fetch("a", 10)
	if len(second) != 1 || second[0].Deliveries != 2 {
		t.Fatalf("second delivery: %+v", second)
	}
	h.nack("a", "", second[0])
	if got := h.fetch("a", 10); len(got) != 0 {
		t.Fatalf("delivered past max deliveries: %+v", got)
	}
	dlq := "topic://acme/orders/" + sanitize(t.Name()) + "-dlq"
	poll.Eventually(t, 5*time.Second, "dead letter", func() bool { return h.stats().Backlog == 0 })
	if n := h.dlq.count(dlq); n != 1 {
		t.Fatalf("%d dead letters in %s", n, dlq)
	}
	rec := h.dlq.recs[dlq][0]
	hs := map[string]string{}
	for _, hd := range rec.Headers {
		hs[hd.Name] = string(hd.Value)
	}
	want := map[string]string{
		api.HeaderDLQOrigin: src.Topic(), api.HeaderDLQSubscription: "work", api.HeaderDLQPosition: "0/0/0",
		api.HeaderDLQReason: api.DLQReasonMaxDeliveries, api.HeaderDLQDeliveries: "2",
	}
	for k, v := range want {
		if hs[k] != v {
			t.Fatalf("header %s = %q, want %q (all: %v)", k, hs[k], v, hs)
		}
	}
	if string(rec.Payload) != "poison" || h.stats().DeadLettered != 1 {
		t.Fatalf("dead letter payload %q", rec.Payload)
	}
}

func TestQueueStateSurvivesRestart(t *testing.T) {
	src := newTestSource(t, 1, 2)
	total := fill(src, 20)
	h := newQueueHarness(t, src, WithCompactAfter(3))
	h.join("a")
	msgs := h.fetch("a", total)
	acked := map[string]bool{}
	for i, m := range msgs {
		switch i % 4 {
		case 0, 1:
			h.ack("a", m)
			acked[idOf(m)] = true
		case 2:
			h.nack("a", "1h", m) // not due before the test ends
		}
	}
	h.reopen()
	h.join("b")
	again := h.fetch("b", total)
	if len(again) != total/4 {
		t.Fatalf("after restart %d redelivered, want %d (acked and delayed ones stay)", len(again), total/4)
	}
	for _, m := range again {
		if acked[idOf(m)] || m.Deliveries != 2 || m.Offset%4 == 2 {
			t.Fatalf("after restart: %s deliveries %d", idOf(m), m.Deliveries)
		}
	}
	if st := h.stats(); st.Delayed != total/4 || st.Backlog != uint64(total/2) {
		t.Fatalf("after restart: delayed %d backlog %d", st.Delayed, st.Backlog)
	}
}

func TestQueueHoldsAtMostItsWindowInMemory(t *testing.T) {
	src := newTestSource(t, 1, 2)
	const backlog = 500_000
	payloads := make([]string, backlog)
	for i := range payloads {
		payloads[i] = "x"
	}
	src.appendTo(0, 0, payloads...)
	src.appendTo(0, 1, payloads...)
	const window = 64
	h := newQueueHarness(t, src, WithQueueWindow(window))
	h.join("a")
	delivered := 0
	for {
		got := h.fetch("a", 1000)
		if len(got) == 0 {
			break
		}
		delivered += len(got)
	}
	st := h.stats()
	if delivered != 2*window || st.InWindow != 2*window || st.Backlog != 2*backlog {
		t.Fatalf("delivered %d, in window %d, backlog %d; want %d, %d, %d", delivered, st.InWindow, st.Backlog, 2*window, 2*window, 2*backlog)
	}
}

func TestQueueAndStreamNamesAreSeparateKinds(t *testing.T) {
	if _, err := DefaultDeadLetterTopic("topic://a/b/" + strings.Repeat("x", 126)); err == nil {
		t.Fatal("a dead-letter name over 128 characters accepted")
	}
	if got, _ := DefaultDeadLetterTopic("topic://a/b/c"); got != "topic://a/b/c-dlq" {
		t.Fatalf("default dead-letter topic %q", got)
	}
	src := newTestSource(t, 1, 1)
	h := newQueueHarness(t, src)
	for _, bad := range []api.QueueJoinRequest{
		{Consumer: "a", AckTimeout: "10ms"},
		{Consumer: "a", NackDelay: "-1s"},
		{Consumer: "a", DeadLetterTopic: "persistent://a/b/c"},
		{Consumer: "a", Start: "middle"},
	} {
		if err := h.joinReq(bad); err == nil {
			t.Fatalf("join %+v accepted", bad)
		}
	}
	_ = topology.Unit{}
}
