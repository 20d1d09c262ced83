package consumers

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/braidmq/braid/api"
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
	deadline := time.Now().Add(5 * time.Second)
	for h.m.PassivateIdle(50*time.Millisecond) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the idle group was never passivated")
		}
		time.Sleep(10 * time.Millisecond) // polling, with the deadline above
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
	deadline = time.Now().Add(20 * time.Second)
	for passivated < 3 && time.Now().Before(deadline) {
		// Past the session timeout, so that the group may stop.
		quiet := time.Now().Add(110 * time.Millisecond)
		for time.Now().Before(quiet) {
			time.Sleep(10 * time.Millisecond) // polling, with the deadline above
		}
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
	}
	if passivated == 0 {
		t.Fatalf("no passivation in %d fetches racing them", raced)
	}
}

func isConsumerUnknown(err error) bool {
	e := api.AsError(err)
	return e != nil && e.Code == api.CodeConsumerUnknown
}
