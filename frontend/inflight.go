package frontend

import (
	"sync"
	"time"
)

// inflight counts the produce requests a node has taken and not answered,
// so that a stopping node answers them all before it closes its logs.
type inflight struct {
	mu   sync.Mutex
	cond *sync.Cond
	n    int // guarded by mu
}

func newInflight() *inflight {
	f := &inflight{}
	f.cond = sync.NewCond(&f.mu)
	return f
}

func (f *inflight) add(k int) {
	f.mu.Lock()
	f.n += k
	f.mu.Unlock()
}

func (f *inflight) done(k int) {
	f.mu.Lock()
	f.n -= k
	if f.n <= 0 {
		f.cond.Broadcast()
	}
	f.mu.Unlock()
}

// wait returns once nothing is in flight, or after timeout with how many
// requests are still unanswered.
func (f *inflight) wait(timeout time.Duration) int {
	timer := time.AfterFunc(timeout, func() {
		f.mu.Lock()
		f.cond.Broadcast()
		f.mu.Unlock()
	})
	defer timer.Stop()
	deadline := time.Now().Add(timeout)
	f.mu.Lock()
	defer f.mu.Unlock()
	for f.n > 0 && time.Now().Before(deadline) {
		f.cond.Wait()
	}
	return max(f.n, 0)
}
