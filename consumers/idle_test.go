package consumers

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/internal/poll"
)

// TestIdleGroupsPassivate lets a stream group go idle: it stops (and its
// topic is no longer held), then the next request spawns it again from
// its log, with what was acknowledged kept; a request sent while a group
// stops waits for it and is answered by the new one.
func TestIdleGroupsPassivate(t *testing.T) {
	src := newTestSource(t, 1, 1)
	h := newHarness(t, src)
	for i := range 10 {
		src.produce("k", fmt.Sprint(i))
	}
	if _, err := h.joinReq(api.JoinRequest{Consumer: "c1", SessionTimeout: "100ms"}); err != nil {
		t.Fatal(err)
	}
	msgs := h.fetchUntil("c1", 4, 5*time.Second)
	h.ackAll("c1", msgs)
	if !h.m.Running(src.Topic()) {
		t.Fatal("a group in use does not hold its topic")
	}
	if n := h.m.PassivateIdle(time.Hour); n != 0 {
		t.Fatalf("passivated %d groups used just now", n)
	}
	// Idle is quiet for the idle timeout and for the longest session
	// timeout a consumer asked of the group (100ms).
	h.clock.Advance(100*time.Millisecond - time.Millisecond)
	if n := h.m.PassivateIdle(50 * time.Millisecond); n != 0 {
		t.Fatalf("passivated %d groups within the session timeout of their consumer", n)
	}
	h.clock.Advance(time.Millisecond)
	if n := h.m.PassivateIdle(50 * time.Millisecond); n != 1 {
		t.Fatalf("passivated %d groups quiet for the session timeout of their consumer, want the 1", n)
	}
	if h.m.Running(src.Topic()) {
		t.Fatal("a passivated group still holds its topic")
	}
	// The consumer's session ran out meanwhile: it joins again and gets
	// what it had not acknowledged, nothing it had.
	rejoin := func() {
		t.Helper()
		if _, err := h.joinReq(api.JoinRequest{Consumer: "c1", SessionTimeout: "100ms"}); err != nil {
			t.Fatal(err)
		}
	}
	rejoin()
	rest := h.fetchUntil("c1", 100, 5*time.Second)
	if len(rest) != 10-len(msgs) || string(rest[0].Payload) != fmt.Sprint(len(msgs)) {
		t.Fatalf("after the passivation the group delivered %d messages from %q; want the %d not acknowledged", len(rest), rest[0].Payload, 10-len(msgs))
	}
	// Requests racing a passivation are answered by the group that comes
	// after it, never refused.
	passivated, raced := 0, 0
	poll.Until(20*time.Second, func() bool {
		// Past the session timeout, so that the group may stop.
		h.clock.Advance(110 * time.Millisecond)
		done := make(chan int, 1)
		go func() { done <- h.m.PassivateIdle(0) }()
		// The fetches start once the passivation has picked the group: a
		// fetch before that keeps it busy, and nothing races.
		stopped := false
		for picked := false; !picked && !stopped; {
			select {
			case n := <-done:
				passivated += n
				stopped = true
			default:
				h.m.mu.Lock()
				picked = len(h.m.parked) > 0
				h.m.mu.Unlock()
				runtime.Gosched()
			}
		}
		for !stopped {
			select {
			case n := <-done:
				passivated += n
				stopped = true
			default:
			}
			if res := h.fetchReq(api.FetchRequest{Consumer: "c1", Max: 1, Wait: "0s"}); res.err != nil && !isConsumerUnknown(res.err) {
				t.Fatalf("a fetch racing a passivation: %v", res.err)
			}
			raced++
		}
		rejoin()
		return passivated >= 3
	})
	if passivated == 0 {
		t.Fatalf("no passivation in %d fetches racing them", raced)
	}
}

func isConsumerUnknown(err error) bool {
	e := api.AsError(err)
	return e != nil && e.Code == api.CodeConsumerUnknown
}

// TestIdleSweeperRunsOnTheManagersClock: the sweeper started by
// StartIdleSweeper passivates a group once it has been quiet for the idle
// timeout on the manager's clock, and not before.
func TestIdleSweeperRunsOnTheManagersClock(t *testing.T) {
	src := newTestSource(t, 1, 1)
	h := newHarness(t, src)
	if _, err := h.joinReq(api.JoinRequest{Consumer: "c1", SessionTimeout: "100ms"}); err != nil {
		t.Fatal(err)
	}
	lastUse := h.clock.Now()
	const idle = 200 * time.Millisecond // swept every 50ms
	h.m.StartIdleSweeper(idle)
	poll.Eventually(t, replyTimeout, "the sweeper passivates the idle group", func() bool {
		if h.m.Running(src.Topic()) {
			h.clock.Advance(10 * time.Millisecond)
			return false
		}
		if quiet := h.clock.Now().Sub(lastUse); quiet < idle {
			t.Fatalf("the sweeper passivated a group quiet for %s, less than its idle timeout %s", quiet, idle)
		}
		return true
	})
}
