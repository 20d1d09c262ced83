package clock

import (
	"sync"
	"testing"
	"time"
)

func TestFakeRunsWhatFallsDue(t *testing.T) {
	t.Parallel()
	start := time.Unix(1000, 0)
	c := NewFake(start)
	var mu sync.Mutex
	var ran []string
	var wg sync.WaitGroup
	add := func(name string, d time.Duration) Timer {
		wg.Add(1)
		return c.AfterFunc(d, func() {
			defer wg.Done()
			mu.Lock()
			ran = append(ran, name)
			mu.Unlock()
		})
	}
	add("a", time.Second)
	b := add("b", 2*time.Second)
	add("c", 3*time.Second)
	if !b.Stop() {
		t.Fatal("Stop of a pending timer reported false")
	}
	wg.Done() // b never runs
	if b.Stop() {
		t.Fatal("a second Stop reported true")
	}
	c.Advance(1500 * time.Millisecond)
	if got := c.Now(); !got.Equal(start.Add(1500 * time.Millisecond)) {
		t.Fatalf("Now %v", got)
	}
	if c.Pending() != 1 {
		t.Fatalf("pending %d, want 1 (c)", c.Pending())
	}
	c.Set(start) // never back
	if !c.Now().Equal(start.Add(1500 * time.Millisecond)) {
		t.Fatal("Set moved the clock back")
	}
	c.Advance(2 * time.Second)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if len(ran) != 2 || c.Pending() != 0 {
		t.Fatalf("ran %v, pending %d", ran, c.Pending())
	}
}

func TestOr(t *testing.T) {
	t.Parallel()
	if Or(nil) != Real {
		t.Fatal("Or(nil) is not Real")
	}
	f := NewFake(time.Unix(0, 0))
	if Or(f) != Clock(f) {
		t.Fatal("Or(f) is not f")
	}
}

// A step of the wall clock moves Now alone: Elapsed, and the timers due
// by it, go by the time that passed.
func TestJumpStepsTheWallClockAlone(t *testing.T) {
	t.Parallel()
	start := time.Unix(1000, 0)
	c := NewFake(start)
	ran := make(chan struct{})
	c.AfterFunc(time.Second, func() { close(ran) })
	c.Jump(-time.Hour)
	c.Jump(2 * time.Hour)
	if got := c.Now(); !got.Equal(start.Add(time.Hour)) {
		t.Fatalf("Now %v after steps of -1h and +2h, want %v", got, start.Add(time.Hour))
	}
	if c.Elapsed() != 0 || c.Pending() != 1 {
		t.Fatalf("a step moved Elapsed to %v (pending %d)", c.Elapsed(), c.Pending())
	}
	c.Advance(time.Second)
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Fatal("the timer due after a second did not run")
	}
	if c.Elapsed() != time.Second || !c.Now().Equal(start.Add(time.Hour+time.Second)) {
		t.Fatalf("after Advance(1s): Elapsed %v, Now %v", c.Elapsed(), c.Now())
	}
}

func TestSteppedStepsNowAlone(t *testing.T) {
	t.Parallel()
	var s Stepped
	e0 := s.Elapsed()
	s.Step(-time.Hour)
	if d := time.Since(s.Now()); d < 59*time.Minute || d > 61*time.Minute {
		t.Fatalf("Now is %v behind the real time, want about an hour", d)
	}
	if d := s.Elapsed() - e0; d < 0 || d > time.Minute {
		t.Fatalf("Elapsed moved by %v over a step of an hour", d)
	}
}
