package client

import (
	"container/heap"
	"sync"
	"time"
)

// The lingerer of a connection's mux cuts the batches whose linger ends,
// for every producer of the connection, from one timer. A Send that starts
// a unit's linger while its producer's sender sleeps with nothing to wait
// for registers the producer here instead of waking the sender: records
// spread over a thousand producers then cost one timer and one goroutine
// wake a linger period, not one each, and the batches cut together go to
// the mux together (one produce-multi request where they fit).

// lingerer holds the producers whose linger ends at a time, earliest first.
type lingerer struct {
	m     *produceMux
	mu    sync.Mutex
	due   lingerHeap
	timer *time.Timer
	armed time.Time // when the timer fires; zero while it is stopped
	stop  bool      // the mux is released: no more firing
	// collected counts the producers collected by the timer (for tests).
	collected int
}

type lingerEntry struct {
	p  *Producer
	at time.Time
}

type lingerHeap []lingerEntry

func (h lingerHeap) Len() int           { return len(h) }
func (h lingerHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h lingerHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *lingerHeap) Push(x any)        { *h = append(*h, x.(lingerEntry)) }
func (h *lingerHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = lingerEntry{}
	*h = old[:len(old)-1]
	return e
}

func newLingerer(m *produceMux) *lingerer {
	l := &lingerer{m: m}
	l.timer = time.AfterFunc(time.Hour, l.fire)
	l.timer.Stop()
	return l
}

// add has p collected at (or soon after) at.
func (l *lingerer) add(p *Producer, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stop {
		return
	}
	heap.Push(&l.due, lingerEntry{p: p, at: at})
	if l.armed.IsZero() || at.Before(l.armed) {
		l.armed = at
		l.timer.Reset(time.Until(at))
	}
}

// close stops the timer; producers registered are not collected (the
// last producer of the mux has closed).
func (l *lingerer) close() {
	l.mu.Lock()
	l.stop = true
	l.timer.Stop()
	l.due = nil
	l.mu.Unlock()
}

// fire collects the producers that are due, re-arms the timer for the
// next, and hands what they cut to the mux.
func (l *lingerer) fire() {
	now := time.Now()
	l.mu.Lock()
	var ps []*Producer
	seen := map[*Producer]bool{}
	for len(l.due) > 0 && !l.due[0].at.After(now) {
		e := heap.Pop(&l.due).(lingerEntry)
		if !seen[e.p] {
			seen[e.p] = true
			ps = append(ps, e.p)
		}
	}
	l.collected += len(ps)
	l.armed = time.Time{}
	if len(l.due) > 0 && !l.stop {
		l.armed = l.due[0].at
		l.timer.Reset(l.armed.Sub(now))
	}
	l.mu.Unlock()
	if len(ps) > 0 {
		l.m.cutFrom(ps, now)
	}
}

// cutFrom collects the ready batches of each producer of ps, queues them
// in the mux in the order they were cut, and then publishes what waits;
// a producer that still has a unit lingering is registered again.
func (m *produceMux) cutFrom(ps []*Producer, now time.Time) {
	var buf []byte
	for _, p := range ps {
		batches, wait := p.collect(now)
		if wait > 0 {
			m.lingerer.add(p, now.Add(wait))
		}
		if len(batches) == 0 {
			continue
		}
		for _, b := range batches {
			buf = p.encode(b, buf[:0])
			m.enqueue(p, b, append([]byte(nil), buf...))
		}
		p.pubMu.Unlock() // collect took it
	}
	m.mu.Lock()
	failed := m.publishLocked()
	m.mu.Unlock()
	settleFailed(failed)
}
