package workload

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/braidmq/braid/client"
)

// AckQueueBraid reads n messages with consumers queue consumers of a new
// queue subscription, acking each one alone, and returns the rate at which
// the acks became durable: the clock stops when every consumer's acks are
// flushed.
func AckQueueBraid(ctx context.Context, nc *nats.Conn, uri, sub string, n, consumers int) (Result, error) {
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var got atomic.Int64
	cs := make([]*client.QueueConsumer, consumers)
	for i := range cs {
		c, err := client.NewQueueConsumer(nc, uri, sub, client.WithConsumerName(fmt.Sprintf("bench-%d", i)),
			client.WithFetch(2000, 4<<20, 100*time.Millisecond), client.WithAckInterval(2*time.Millisecond))
		if err != nil {
			return Result{}, err
		}
		cs[i] = c
		defer c.Close(context.Background())
	}
	start := time.Now()
	var wg sync.WaitGroup
	errc := make(chan error, consumers)
	for _, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for got.Load() < int64(n) {
				m, err := c.Next(cctx)
				if err != nil {
					if cctx.Err() == nil {
						errc <- err
					}
					return
				}
				m.Ack()
				if got.Add(1) >= int64(n) {
					cancel()
				}
			}
		}()
	}
	wg.Wait()
	var errs []error
	for _, c := range cs {
		errs = append(errs, c.FlushAcks(ctx))
	}
	el := time.Since(start)
	close(errc)
	for err := range errc {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return Result{}, err
	}
	// Outside the clock: the server must have every ack.
	st, err := client.NewAdmin(nc).Stats(ctx, uri)
	if err != nil {
		return Result{}, err
	}
	for _, s := range st.Subscriptions {
		if s.Name == sub && s.Backlog != 0 {
			return Result{}, fmt.Errorf("queue subscription %s: backlog %d after every ack was flushed", sub, s.Backlog)
		}
	}
	return Result{Messages: int(got.Load()), Elapsed: el}, nil
}

// ReplayCheckpointBraid reads n messages from the earliest with a
// checkpoint consumer.
func ReplayCheckpointBraid(ctx context.Context, nc *nats.Conn, uri string, n int) (Result, error) {
	c, err := client.NewCheckpointConsumer(nc, uri, client.WithFetch(5000, 4<<20, 100*time.Millisecond))
	if err != nil {
		return Result{}, err
	}
	defer c.Close()
	start := time.Now()
	for i := 0; i < n; i++ {
		if _, err := c.Next(ctx); err != nil {
			return Result{}, fmt.Errorf("after %d of %d: %w", i, n, err)
		}
	}
	el := time.Since(start)
	if cp := c.Checkpoint(); len(cp.Positions) == 0 {
		return Result{}, errors.New("checkpoint consumer read but its checkpoint is empty")
	}
	return Result{Messages: n, Elapsed: el}, nil
}

// AckDurable reads n messages with consumers pull subscribers of one new
// durable consumer with explicit acks, acking each (AckSync on the last one
// of each subscriber, so the clock stops once the server has them).
func (j *JetStream) AckDurable(ctx context.Context, durable string, n, consumers int) (Result, error) {
	cons, err := j.JS.CreateOrUpdateConsumer(ctx, StreamName, jetstream.ConsumerConfig{
		Durable: durable, AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 50_000,
	})
	if err != nil {
		return Result{}, err
	}
	start := time.Now()
	var got atomic.Int64
	finished := make(chan struct{})
	var once sync.Once
	var ccs []jetstream.ConsumeContext
	for range consumers {
		cc, err := cons.Consume(func(m jetstream.Msg) {
			if got.Add(1) >= int64(n) {
				_ = m.DoubleAck(ctx)
				once.Do(func() { close(finished) })
				return
			}
			_ = m.Ack()
		}, jetstream.PullMaxMessages(2000))
		if err != nil {
			return Result{}, err
		}
		ccs = append(ccs, cc)
	}
	defer func() {
		for _, cc := range ccs {
			cc.Stop()
		}
	}()
	select {
	case <-finished:
	case <-ctx.Done():
		return Result{}, ctx.Err()
	}
	el := time.Since(start)
	return Result{Messages: int(got.Load()), Elapsed: el}, nil
}

// Fill writes spec's messages (subject bench.k<key>) in chunks, waiting for
// each chunk's acks: the data for a consume benchmark, written without the
// stalls of an unbounded async publish on a busy machine.
func (j *JetStream) Fill(ctx context.Context, spec Spec) error {
	payload := make([]byte, spec.Size)
	const chunk = 5000
	for i := 0; i < spec.Messages; {
		for end := min(i+chunk, spec.Messages); i < end; i++ {
			subject := "bench.unkeyed"
			if spec.Keys > 0 {
				subject = "bench.k" + spec.Key(i)
			}
			if _, err := j.JS.PublishAsync(subject, payload); err != nil {
				return err
			}
		}
		select {
		case <-j.JS.PublishAsyncComplete():
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}
