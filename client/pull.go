package client

import (
	"context"
	"errors"

	"github.com/braidmq/braid/api"
)

// pull is the fetch loop of the subscription consumers (stream and queue):
// a buffer of fetched messages not returned yet, and at most one fetch in
// flight (with prefetch, started as soon as the previous one brought
// messages). A fetch outlives the Next that started it: when that Next gives
// up (its context ends), the result is kept for the next call, so messages
// the server has handed out are never lost. The owner serializes calls.
type pull struct {
	buf      []api.Message
	fetching chan fetchResult
	// prefetch starts the next fetch as soon as one brings messages. The
	// stream consumer sets it; the queue consumer does not, since a message
	// fetched ahead counts as delivered (towards max deliveries and the ack
	// timeout) before the application has seen it.
	prefetch bool
}

// start begins a fetch unless one is in flight.
func (p *pull) start(fetch func() fetchResult) {
	if p.fetching != nil {
		return
	}
	ch := make(chan fetchResult, 1)
	p.fetching = ch
	go func() { ch <- fetch() }()
}

// next returns the next buffered message that admit accepts (nil: all),
// fetching when the buffer is empty. A fetch refused with CONSUMER_UNKNOWN
// joins again (rejoin) and fetches again; any other fetch error is returned.
func (p *pull) next(ctx context.Context, closing <-chan struct{}, fetch func() fetchResult,
	rejoin func(context.Context, uint64) error, admit func(*api.Message) bool) (api.Message, error) {
	for {
		select {
		case <-closing:
			return api.Message{}, ErrClosed
		default:
		}
		for len(p.buf) > 0 {
			m := p.buf[0]
			p.buf[0] = api.Message{}
			p.buf = p.buf[1:]
			if admit == nil || admit(&m) {
				return m, nil
			}
		}
		p.start(fetch)
		select {
		case r := <-p.fetching:
			p.fetching = nil
			if r.err == nil {
				p.buf = r.msgs
				if p.prefetch && len(r.msgs) > 0 {
					// Fetch the next batch while this one is consumed: one
					// request in flight behind the buffer, not a round trip
					// of idle time per batch.
					p.start(fetch)
				}
				continue
			}
			if !errors.Is(r.err, api.ErrConsumerUnknown) {
				return api.Message{}, r.err
			}
			if err := rejoin(ctx, r.generation); err != nil {
				return api.Message{}, err
			}
		case <-ctx.Done():
			return api.Message{}, ctx.Err()
		case <-closing:
			return api.Message{}, ErrClosed
		}
	}
}
