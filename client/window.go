package client

import (
	"context"
	"sync"
)

// window bounds the records a Producer holds. Places are taken one at a
// time (Send) and given back a batch at a time (a settled batch), so a
// Send blocked on a full window is woken once per batch given back, not
// once per record, as a buffered channel would.
type window struct {
	mu   sync.Mutex
	free int
	// freed is closed, and replaced, when places are given back while
	// someone waits; nil while nobody does.
	freed chan struct{}
}

func newWindow(size int) *window { return &window{free: size} }

// acquire takes one place, waiting while there is none. It returns
// ctx.Err() if ctx ends first, or ErrClosed if closed is closed first.
func (w *window) acquire(ctx context.Context, closed <-chan struct{}) error {
	for {
		w.mu.Lock()
		if w.free > 0 {
			w.free--
			w.mu.Unlock()
			return nil
		}
		if w.freed == nil {
			w.freed = make(chan struct{})
		}
		freed := w.freed
		w.mu.Unlock()
		select {
		case <-freed:
		case <-ctx.Done():
			return ctx.Err()
		case <-closed:
			return ErrClosed
		}
	}
}

// release gives n places back and wakes whoever waits for one.
func (w *window) release(n int) {
	if n <= 0 {
		return
	}
	w.mu.Lock()
	w.free += n
	if w.freed != nil {
		close(w.freed)
		w.freed = nil
	}
	w.mu.Unlock()
}
