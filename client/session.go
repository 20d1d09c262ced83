package client

import (
	"context"
	"errors"
	"sync"
	"time"
)

// session is what the stream and queue consumers share around their
// requests: their lifetime (closing, the ack loop), the join generation, and
// what the heartbeat and FlushAcks need. The consumers embed it; mu also
// guards their own fields.
type session struct {
	// closing is closed when Close starts: Next returns ErrClosed and the
	// ack loop stops. ctx ends when Close is done; it cancels requests.
	closing   chan struct{}
	closeOnce sync.Once
	ctx       context.Context
	stop      context.CancelFunc
	ackDone   chan struct{}

	// flushMu serializes ack flushes, so that FlushAcks returns only once
	// what a background flush took from the pending acks is answered too.
	flushMu sync.Mutex

	// joinMu serializes joins; generation counts successful re-joins, so
	// that concurrent CONSUMER_UNKNOWN errors cause one re-join only.
	joinMu     sync.Mutex
	generation uint64

	mu sync.Mutex
	// Guarded by mu:
	lastHeard   time.Time // when the server last heard from us
	fetchActive bool      // a fetch is in flight: the server knows we are alive
	// ackErr is the background flush error FlushAcks reports next.
	ackErr error
}

func newSession() session {
	ctx, stop := context.WithCancel(context.Background())
	return session{closing: make(chan struct{}), ctx: ctx, stop: stop, ackDone: make(chan struct{})}
}

func (s *session) currentGeneration() uint64 {
	s.joinMu.Lock()
	defer s.joinMu.Unlock()
	return s.generation
}

// rejoin joins again (through join) after the server answered
// CONSUMER_UNKNOWN to a request made at generation gen, unless another
// request has re-joined since.
func (s *session) rejoin(gen uint64, join func() error) error {
	s.joinMu.Lock()
	defer s.joinMu.Unlock()
	if s.generation != gen {
		return nil
	}
	if err := join(); err != nil {
		return err
	}
	s.generation++
	return nil
}

// heard records that the server answered a request.
func (s *session) heard() {
	s.mu.Lock()
	s.lastHeard = time.Now()
	s.mu.Unlock()
}

// ackLoop calls flush every interval until closing, keeping its error for
// FlushAcks when keep says so, and sends a heartbeat (a join, which the
// server takes as a sign of life from a known consumer) when the consumer
// has been silent for a third of sessionTimeout. A failed heartbeat is not
// the application's concern: the next fetch or ack re-joins if the session
// was lost.
func (s *session) ackLoop(interval, sessionTimeout time.Duration, flush func(context.Context) error,
	keep func(error) bool, heartbeat func(context.Context) error) {
	defer close(s.ackDone)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-s.closing:
			return
		case <-tick.C:
		}
		s.flushMu.Lock()
		err := flush(s.ctx)
		s.flushMu.Unlock()
		s.mu.Lock()
		if keep(err) {
			s.ackErr = err
		}
		silent := !s.fetchActive && time.Since(s.lastHeard) > sessionTimeout/3
		s.mu.Unlock()
		if silent {
			_ = heartbeat(s.ctx)
		}
	}
}

// flushAcks runs flush and returns its error or, if it succeeded, the
// background error kept since the previous call.
func (s *session) flushAcks(ctx context.Context, flush func(context.Context) error) error {
	s.flushMu.Lock()
	err := flush(ctx)
	s.flushMu.Unlock()
	s.mu.Lock()
	if err == nil {
		err = s.ackErr
	}
	s.ackErr = nil
	s.mu.Unlock()
	return err
}

// shutdown stops the consumer once: Next returns ErrClosed, the ack loop ends,
// the pending acks are flushed (flushAcks) and the consumer leaves. It
// reports whether this was the first call (later calls do nothing and
// return nil) and the errors of the flush and the leave.
func (s *session) shutdown(ctx context.Context, flushAcks, leave func(context.Context) error) (bool, error) {
	first := false
	s.closeOnce.Do(func() { first = true })
	if !first {
		return false, nil
	}
	close(s.closing)
	<-s.ackDone
	ackErr := flushAcks(ctx)
	leaveErr := leave(ctx)
	s.stop()
	return true, errors.Join(ackErr, leaveErr)
}
