// Package clock makes time an input. Code that schedules or compares times
// (consumer sessions, hand-over grace, redelivery, ack timeouts, leases)
// takes a Clock instead of calling time.Now and time.AfterFunc itself, so
// that its tests advance a Fake clock instead of waiting.
//
// What it owns: the Clock interface, the real clock and a fake one. What it
// does not own: any decision made with the time (those are pure functions
// that take now).
package clock

import (
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// Clock tells the time and runs functions later.
type Clock interface {
	// Now is the current time by the wall clock, which may step (an
	// operator, NTP, a virtual machine resumed): stamps written for other
	// nodes and people to read.
	Now() time.Time
	// Elapsed is the time passed since the clock was made, by a clock
	// that never steps: what intervals are measured with (how long a
	// lease has left). A step of the wall clock does not move it.
	Elapsed() time.Duration
	// AfterFunc runs f in its own goroutine once d has passed.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending AfterFunc.
type Timer interface {
	// Stop prevents the function from running; it reports whether it did
	// (false: it already ran or was stopped).
	Stop() bool
}

// Real is the system clock.
var Real Clock = realClock{}

type realClock struct{}

// realStart is the origin of the real clock's Elapsed. time.Now carries a
// monotonic reading, which Since measures with.
var realStart = time.Now()

func (realClock) Now() time.Time { return time.Now() }

func (realClock) Elapsed() time.Duration { return time.Since(realStart) }

func (realClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// Or returns c, or Real when c is nil (a zero Config).
func Or(c Clock) Clock {
	if c == nil {
		return Real
	}
	return c
}

// Fake is a clock that moves only when told to. It is safe for concurrent
// use. Functions given to AfterFunc run, in their own goroutines, when
// Advance or Set moves the time to or past their deadline, in deadline
// order. Jump steps its wall clock alone, as an operator or NTP steps a
// real one.
type Fake struct {
	mu sync.Mutex
	// now is the fake wall time and elapsed the time passed (Elapsed);
	// timers holds the pending AfterFuncs, due by elapsed; seq orders
	// those of equal deadlines by creation.
	now     time.Time
	elapsed time.Duration
	timers  []*fakeTimer
	seq     uint64
}

// NewFake returns a fake clock at start.
func NewFake(start time.Time) *Fake { return &Fake{now: start} }

type fakeTimer struct {
	c       *Fake
	at      time.Duration // by Elapsed
	seq     uint64
	f       func()
	stopped bool
}

// Now is the fake time.
func (c *Fake) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Elapsed is the time the clock was moved on by (Advance, Set), steps of
// Jump left out.
func (c *Fake) Elapsed() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.elapsed
}

// Jump steps the wall clock by d, forward or back, as an operator or NTP
// steps a real one: Now moves, Elapsed does not, and no timer runs.
func (c *Fake) Jump(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// AfterFunc schedules f once d more has elapsed. A d of zero or less
// still waits for the next Advance (or Set), as a real timer waits for the
// scheduler.
func (c *Fake) AfterFunc(d time.Duration, f func()) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	t := &fakeTimer{c: c, at: c.elapsed + d, seq: c.seq, f: f}
	c.timers = append(c.timers, t)
	return t
}

// Stop removes the timer.
func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	if t.stopped {
		return false
	}
	t.stopped = true
	for i, o := range t.c.timers {
		if o == t {
			t.c.timers = append(t.c.timers[:i], t.c.timers[i+1:]...)
			break
		}
	}
	return true
}

// Advance moves the time on by d and runs what fell due.
func (c *Fake) Advance(d time.Duration) { c.Set(c.Now().Add(d)) }

// Set moves the time to t (never back: an earlier t only runs what is
// due) and runs what fell due, each in its own goroutine.
func (c *Fake) Set(t time.Time) {
	c.mu.Lock()
	if t.After(c.now) {
		c.elapsed += t.Sub(c.now)
		c.now = t
	}
	var due, left []*fakeTimer
	for _, tm := range c.timers {
		if tm.at <= c.elapsed {
			tm.stopped = true
			due = append(due, tm)
		} else {
			left = append(left, tm)
		}
	}
	c.timers = left
	c.mu.Unlock()
	sort.Slice(due, func(i, j int) bool {
		if due[i].at != due[j].at {
			return due[i].at < due[j].at
		}
		return due[i].seq < due[j].seq
	})
	for _, tm := range due {
		go tm.f()
	}
}

// Pending is the number of timers not yet run or stopped.
func (c *Fake) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// Stepped is the real clock with its wall clock stepped by an offset that
// may change at any moment (Step), as an operator or NTP steps a real
// one: Now moves by the step, Elapsed and timers do not. It is for tests
// of clock trouble (the fault suite's build offsets a node's clock with
// it).
type Stepped struct{ offset atomic.Int64 }

// Now is the real time plus the offset.
func (s *Stepped) Now() time.Time { return time.Now().Add(time.Duration(s.offset.Load())) }

// Elapsed is the real clock's.
func (s *Stepped) Elapsed() time.Duration { return Real.Elapsed() }

// AfterFunc is the real clock's.
func (s *Stepped) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// Step sets the wall clock's offset from the real time.
func (s *Stepped) Step(offset time.Duration) { s.offset.Store(int64(offset)) }
