package consumers

import (
	"errors"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/clock"
	"github.com/braidmq/braid/internal/poll"
	"github.com/braidmq/braid/topology"
)

// harness drives one subscription through a real Manager in a real actor
// system, with synchronous helpers over the callback API. Its manager runs
// on a fake clock that only the test moves (advance): sessions, graces,
// parked fetches and idleness take no real time.
type harness struct {
	t      *testing.T
	system *actor.ActorSystem
	m      *Manager
	src    *testSource
	dir    string
	sub    string
	opts   []Option // WithClock(clock) first
	clock  *testClock
}

const replyTimeout = 10 * time.Second

// testStart is where the tests' fake clocks start: a whole millisecond, as
// queue deadlines are kept in milliseconds.
var testStart = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// testClock is a clock.Fake that knows when the timer functions a move set
// off have returned. A group's timer function only sends the group a
// message, so once they have, whatever the move made due is in the
// group's mailbox ahead of the test's next request: a test can check that
// a millisecond before a deadline nothing happened, not merely that
// nothing happened yet.
type testClock struct {
	*clock.Fake
	// mu guards the counts: every timer made is pending in Fake, stopped,
	// or set off; finished counts those set off whose function returned.
	mu                      sync.Mutex
	made, stopped, finished int
}

func newTestClock() *testClock { return &testClock{Fake: clock.NewFake(testStart)} }

// AfterFunc is Fake's, counted.
func (c *testClock) AfterFunc(d time.Duration, f func()) clock.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.made++
	return &countedTimer{c: c, t: c.Fake.AfterFunc(d, func() {
		f()
		c.mu.Lock()
		c.finished++
		c.mu.Unlock()
	})}
}

type countedTimer struct {
	c *testClock
	t clock.Timer
}

func (t *countedTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	if !t.t.Stop() {
		return false
	}
	t.c.stopped++
	return true
}

// settled reports whether every timer function set off so far has
// returned.
func (c *testClock) settled() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.made == c.Pending()+c.stopped+c.finished
}

// advance moves the clock on by d and waits until the timer functions the
// move set off have returned.
func (c *testClock) advance(t testing.TB, d time.Duration) {
	t.Helper()
	c.Advance(d)
	poll.Eventually(t, replyTimeout, "the timers the clock set off have run", c.settled)
}

func testLogger() *slog.Logger {
	if os.Getenv("BRAID_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

func newHarness(t *testing.T, src *testSource, opts ...Option) *harness {
	t.Helper()
	system := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return testLogger() }))
	clk := newTestClock()
	h := &harness{t: t, system: system, src: src, dir: t.TempDir(), sub: "orders", clock: clk,
		opts: append([]Option{WithClock(clk)}, opts...)}
	h.m = NewManager(system, h.dir, testLogger(), h.opts...)
	t.Cleanup(func() {
		if err := h.m.Close(); err != nil {
			t.Error(err)
		}
		system.Shutdown()
	})
	return h
}

// reopen closes the manager and opens a new one over the same directory,
// as a node restart would.
func (h *harness) reopen() {
	h.t.Helper()
	if err := h.m.Close(); err != nil {
		h.t.Fatal(err)
	}
	h.m = NewManager(h.system, h.dir, testLogger(), h.opts...)
}

func wait[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(replyTimeout):
		t.Fatal("no reply")
		panic("unreachable")
	}
}

func (h *harness) joinReq(req api.JoinRequest) (api.JoinReply, error) {
	h.t.Helper()
	type result struct {
		r   api.JoinReply
		err error
	}
	ch := make(chan result, 1)
	if req.Subscription == "" {
		req.Subscription = h.sub
	}
	h.m.Join(h.src, req, func(r api.JoinReply, err error) { ch <- result{r, err} })
	res := wait(h.t, ch)
	return res.r, res.err
}

func (h *harness) join(consumer string) {
	h.t.Helper()
	if _, err := h.joinReq(api.JoinRequest{Consumer: consumer}); err != nil {
		h.t.Fatal(err)
	}
}

type fetchResult struct {
	msgs     []api.Message
	assigned int
	err      error
}

// fetchAsync starts a fetch and returns where its reply will arrive.
func (h *harness) fetchAsync(req api.FetchRequest) <-chan fetchResult {
	ch := make(chan fetchResult, 1)
	if req.Subscription == "" {
		req.Subscription = h.sub
	}
	h.m.Fetch(h.src, req, func(msgs []api.Message, assigned int, err error) { ch <- fetchResult{msgs, assigned, err} })
	return ch
}

func (h *harness) fetchReq(req api.FetchRequest) fetchResult {
	h.t.Helper()
	return wait(h.t, h.fetchAsync(req))
}

// fetch returns what is available now (no wait), failing the test on error.
func (h *harness) fetch(consumer string, max int) ([]api.Message, int) {
	h.t.Helper()
	res := h.fetchReq(api.FetchRequest{Consumer: consumer, Max: max, Wait: "0s"})
	if res.err != nil {
		h.t.Fatalf("fetch by %s: %v", consumer, res.err)
	}
	return res.msgs, res.assigned
}

// fetchUntil fetches (without waiting) until it gets messages, failing the
// test if none come within timeout.
func (h *harness) fetchUntil(consumer string, max int, timeout time.Duration) []api.Message {
	h.t.Helper()
	var msgs []api.Message
	poll.Eventually(h.t, timeout, "fetch by "+consumer+" gets messages", func() bool {
		msgs, _ = h.fetch(consumer, max)
		return len(msgs) > 0
	})
	return msgs
}

// advance moves the fake clock on by d once the group has handled every
// request sent to it — a group arms its timer after it has answered a
// request, so the test could otherwise move the clock past a deadline
// before the timer for it exists — and returns once what the move made
// due is queued to the group, ahead of the test's next request.
func (h *harness) advance(d time.Duration) {
	h.t.Helper()
	h.stats()
	h.clock.advance(h.t, d)
}

// parked waits until consumer's fetch is parked in the group.
func (h *harness) parked(consumer string) {
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

func (h *harness) ackErr(consumer string, ps ...api.Position) error {
	h.t.Helper()
	ch := make(chan error, 1)
	h.m.Ack(h.src, api.AckRequest{Subscription: h.sub, Consumer: consumer, Acks: ps}, func(err error) { ch <- err })
	return wait(h.t, ch)
}

func (h *harness) ack(consumer string, ps ...api.Position) {
	h.t.Helper()
	if err := h.ackErr(consumer, ps...); err != nil {
		h.t.Fatalf("ack by %s of %v: %v", consumer, ps, err)
	}
}

// ackAll acknowledges the last message of every unit in msgs.
func (h *harness) ackAll(consumer string, msgs []api.Message) {
	h.t.Helper()
	last := make(map[topology.Unit]uint64)
	for _, m := range msgs {
		unit := topology.Unit{Segment: topology.SegmentID(m.Segment), Bucket: m.Bucket}
		last[unit] = max(last[unit], m.Offset)
	}
	var ps []api.Position
	for unit, off := range last {
		ps = append(ps, api.Position{Segment: uint64(unit.Segment), Bucket: unit.Bucket, Offset: off})
	}
	if len(ps) > 0 {
		h.ack(consumer, ps...)
	}
}

func (h *harness) leave(consumer string) {
	h.t.Helper()
	ch := make(chan error, 1)
	h.m.Leave(h.src, api.LeaveRequest{Subscription: h.sub, Consumer: consumer}, func(err error) { ch <- err })
	if err := wait(h.t, ch); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) stats() Stats {
	h.t.Helper()
	type result struct {
		s   Stats
		err error
	}
	ch := make(chan result, 1)
	h.m.Stats(h.src, h.sub, func(s Stats, err error) { ch <- result{s, err} })
	res := wait(h.t, ch)
	if res.err != nil {
		h.t.Fatal(res.err)
	}
	return res.s
}

func wantCode(t *testing.T, err error, code api.Code) {
	t.Helper()
	var e *api.Error
	if !errors.As(err, &e) || e.Code != code {
		t.Fatalf("error %v, want %s", err, code.Symbol)
	}
}

func unitOf(m api.Message) topology.Unit {
	return topology.Unit{Segment: topology.SegmentID(m.Segment), Bucket: m.Bucket}
}

func unitsOf(msgs []api.Message) map[topology.Unit]int {
	out := make(map[topology.Unit]int)
	for _, m := range msgs {
		out[unitOf(m)]++
	}
	return out
}

func pos(seg, bucket int, off uint64) api.Position {
	return api.Position{Segment: uint64(seg), Bucket: bucket, Offset: off}
}
