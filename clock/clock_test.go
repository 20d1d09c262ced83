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
