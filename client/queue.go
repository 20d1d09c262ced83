package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/braidmq/braid/api"
)

// QueueConsumer reads a topic through a queue subscription: the server
// shares every message of every unit between the subscription's consumers,
// with no per-key order (DESIGN.md §2). Each message is acknowledged alone
// (QueueMessage.Ack) or negatively (Nack, NackAfter), which delivers it again
// after a delay. A message neither acked nor nacked within the ack timeout,
// or held by a consumer that leaves or dies, is delivered again too, with
// Deliveries counting every delivery; past the max deliveries it goes to the
// dead-letter topic instead, with headers naming where it came from
// (api.HeaderDLQOrigin...).
//
// Acks and nacks are batched: they go out every WithAckInterval, and on
// FlushAcks and Close. A QueueConsumer is safe for concurrent use; Next calls
// are served one at a time.
type QueueConsumer struct {
	nc           *nats.Conn
	cfg          queueConfig
	topic        string
	subscription string
	name         string
	subjects     struct{ join, fetch, ack, nack, leave string }

	// session holds the lifetime, the join generation and, guarded by its
	// mu, lastHeard, fetchActive and ackErr (here: the last background flush
	// error).
	session

	// nextMu serializes Next; it guards the fetch loop.
	nextMu sync.Mutex
	pull   pull

	// Guarded by mu: the acks and nacks not sent yet (nacks by delay, -1
	// for the subscription's backoff).
	toAck  []api.Position
	toNack map[time.Duration][]api.Position
}

// QueueMessage is one message delivered by a QueueConsumer.
type QueueMessage struct {
	ID         MessageID
	Key        []byte
	Payload    []byte
	Headers    []api.Header
	Time       time.Time
	Deliveries uint32 // 1 on first delivery

	consumer *QueueConsumer
}

// Ack acknowledges this message alone. It is sent at the next ack interval.
func (m *QueueMessage) Ack() {
	c := m.consumer
	c.mu.Lock()
	c.toAck = append(c.toAck, m.position())
	c.mu.Unlock()
}

// Nack asks for the message to be delivered again after the subscription's
// redelivery delay (WithNackDelay, WithNackBackoff).
func (m *QueueMessage) Nack() { m.nack(-1) }

// NackAfter asks for the message to be delivered again after d.
func (m *QueueMessage) NackAfter(d time.Duration) { m.nack(max(d, 0)) }

func (m *QueueMessage) nack(d time.Duration) {
	c := m.consumer
	c.mu.Lock()
	c.toNack[d] = append(c.toNack[d], m.position())
	c.mu.Unlock()
}

func (m *QueueMessage) position() api.Position {
	return api.Position{Segment: m.ID.Segment, Bucket: m.ID.Bucket, Offset: m.ID.Offset}
}

// Header returns the value of the first header named name, or nil.
func (m *QueueMessage) Header(name string) []byte {
	for _, h := range m.Headers {
		if h.Name == name {
			return h.Value
		}
	}
	return nil
}

// NewQueueConsumer joins the queue subscription of topicURI (created at its
// start position on the first join) and returns a consumer of it. The
// policy options (WithAckTimeout, WithMaxDeliveries, WithDeadLetterTopic,
// WithNackDelay, WithNackBackoff) are the subscription's: they apply to all
// its consumers, and the last consumer to set one wins. It returns
// api.ErrInvalidName for a malformed name, ErrInvalidOption for a bad
// option, api.ErrAlreadyExists when the name is a stream subscription of the
// topic, and the server's error for any other refused join.
func NewQueueConsumer(nc *nats.Conn, topicURI, subscription string, opts ...QueueOption) (*QueueConsumer, error) {
	cfg := queueConfig{consumerConfig: defaultConsumerConfig()}
	for _, o := range opts {
		o.applyQueue(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	name, err := subscriptionTopic(topicURI, subscription, &cfg.consumerConfig)
	if err != nil {
		return nil, err
	}
	c := &QueueConsumer{
		session: newSession(),
		nc:      nc, cfg: cfg, topic: topicURI, subscription: subscription, name: cfg.name,
		toNack: make(map[time.Duration][]api.Position),
	}
	c.subjects.join = api.QueueSubject(api.QueueJoin, name.Tenant, name.Namespace, name.Name)
	c.subjects.fetch = api.QueueSubject(api.QueueFetch, name.Tenant, name.Namespace, name.Name)
	c.subjects.ack = api.QueueSubject(api.QueueAck, name.Tenant, name.Namespace, name.Name)
	c.subjects.nack = api.QueueSubject(api.QueueNack, name.Tenant, name.Namespace, name.Name)
	c.subjects.leave = api.QueueSubject(api.QueueLeave, name.Tenant, name.Namespace, name.Name)
	if err := c.join(c.ctx, true); err != nil {
		c.stop()
		return nil, err
	}
	heartbeat := func(ctx context.Context) error { return c.join(ctx, false) }
	keep := func(err error) bool { return err != nil }
	go c.ackLoop(c.cfg.ackInterval, c.cfg.sessionTimeout, c.flush, keep, heartbeat)
	return c, nil
}

// Name returns the consumer's name within its subscription.
func (c *QueueConsumer) Name() string { return c.name }

// join joins the subscription; withPolicy sends the policy options (the
// first join does; heartbeats and re-joins do not, so that a consumer does
// not undo a later consumer's policy change).
func (c *QueueConsumer) join(ctx context.Context, withPolicy bool) error {
	req := api.QueueJoinRequest{Subscription: c.subscription, Consumer: c.name, Start: c.cfg.start,
		SessionTimeout: c.cfg.sessionTimeout.String()}
	if withPolicy {
		c.cfg.policy(&req)
	}
	if err := requestJSON(ctx, c.nc, c.cfg.requestTimeout, c.subjects.join, req, nil); err != nil {
		return fmt.Errorf("join queue %s of %s: %w", c.subscription, c.topic, err)
	}
	c.heard()
	return nil
}

func (c *QueueConsumer) rejoin(ctx context.Context, gen uint64) error {
	return c.session.rejoin(gen, func() error { return c.join(ctx, false) })
}

// Next returns the next message, waiting as long as ctx allows. It returns
// ctx.Err() when ctx ends, ErrClosed after Close, and a fetch's error
// (ErrTimeout, ErrNoServer, an *api.Error); calling Next again retries. A
// consumer the server has forgotten joins again by itself.
func (c *QueueConsumer) Next(ctx context.Context) (*QueueMessage, error) {
	c.nextMu.Lock()
	defer c.nextMu.Unlock()
	m, err := c.pull.next(ctx, c.closing, c.fetch, c.rejoin, nil)
	if err != nil {
		return nil, err
	}
	out := &QueueMessage{ID: MessageID{Segment: m.Segment, Bucket: m.Bucket, Offset: m.Offset},
		Key: m.Key, Payload: m.Payload, Headers: m.Headers, Deliveries: m.Deliveries, consumer: c}
	if m.Time != 0 {
		out.Time = time.UnixMilli(m.Time)
	}
	return out, nil
}

func (c *QueueConsumer) fetch() fetchResult {
	gen := c.currentGeneration()
	body, err := json.Marshal(api.FetchRequest{Subscription: c.subscription, Consumer: c.name,
		Max: c.cfg.fetchMax, MaxBytes: c.cfg.fetchMaxBytes, Wait: c.cfg.fetchWait.String()})
	if err != nil {
		return fetchResult{err: err}
	}
	c.mu.Lock()
	c.fetchActive = true
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(c.ctx, c.cfg.fetchWait+c.cfg.requestTimeout)
	m, err := request(ctx, c.nc, 0, &nats.Msg{Subject: c.subjects.fetch, Data: body})
	cancel()
	c.mu.Lock()
	c.fetchActive = false
	c.lastHeard = time.Now()
	c.mu.Unlock()
	if err != nil {
		return fetchResult{generation: gen, err: fmt.Errorf("fetch queue %s of %s: %w", c.subscription, c.topic, err)}
	}
	msgs, err := api.DecodeMessages(m.Data)
	if err != nil {
		return fetchResult{generation: gen, err: fmt.Errorf("braid/client: fetch reply from %s: %w", c.topic, err)}
	}
	return fetchResult{msgs: msgs, generation: gen}
}

// FlushAcks sends the acks and nacks recorded so far and waits for the
// server to make them durable. It returns the error of that request or, when
// there was nothing to send, the last background flush error since the
// previous FlushAcks.
func (c *QueueConsumer) FlushAcks(ctx context.Context) error {
	return c.flushAcks(ctx, c.flush)
}

// flush sends the pending acks, then the pending nacks. Positions that
// failed in a way a retry may cure go back for the next flush; positions
// refused as invalid are dropped and reported.
func (c *QueueConsumer) flush(ctx context.Context) error {
	c.mu.Lock()
	acks := c.toAck
	c.toAck = nil
	nacks := c.toNack
	c.toNack = make(map[time.Duration][]api.Position)
	c.mu.Unlock()
	var errs []error
	for len(acks) > 0 {
		n := min(len(acks), maxQueuePositions)
		batch := acks[:n]
		acks = acks[n:]
		err := c.send(ctx, c.subjects.ack, api.AckRequest{Subscription: c.subscription, Consumer: c.name, Acks: batch})
		if c.retry(err) {
			c.mu.Lock()
			c.toAck = append(c.toAck, batch...)
			c.toAck = append(c.toAck, acks...)
			c.mu.Unlock()
			return err
		}
		errs = append(errs, err)
	}
	for d, ps := range nacks {
		req := api.NackRequest{Subscription: c.subscription, Consumer: c.name, Nacks: ps}
		if d >= 0 {
			req.Delay = d.String()
		}
		err := c.send(ctx, c.subjects.nack, req)
		if c.retry(err) {
			c.mu.Lock()
			c.toNack[d] = append(c.toNack[d], ps...)
			c.mu.Unlock()
			errs = append(errs, err)
			continue
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// maxQueuePositions is the most positions one ack request carries.
const maxQueuePositions = 10_000

// retry reports whether positions that failed with err should be sent again.
func (c *QueueConsumer) retry(err error) bool {
	return err != nil && !errors.Is(err, api.ErrInvalidArgument) && !errors.Is(err, api.ErrBadRequest)
}

// send sends one ack or nack request; on CONSUMER_UNKNOWN it joins again
// and resends once (the server takes acks of any message it has delivered,
// from any consumer of the subscription).
func (c *QueueConsumer) send(ctx context.Context, subject string, req any) error {
	gen := c.currentGeneration()
	err := requestJSON(ctx, c.nc, c.cfg.requestTimeout, subject, req, nil)
	if errors.Is(err, api.ErrConsumerUnknown) {
		if err = c.rejoin(ctx, gen); err == nil {
			err = requestJSON(ctx, c.nc, c.cfg.requestTimeout, subject, req, nil)
		}
	}
	if err != nil {
		return fmt.Errorf("%s: %w", subject, err)
	}
	c.heard()
	return nil
}

// Close stops the consumer: Next returns ErrClosed, the pending acks and
// nacks are sent and the consumer leaves its subscription, so that what it
// holds unacknowledged is delivered to the others at once.
func (c *QueueConsumer) Close(ctx context.Context) error {
	_, err := c.shutdown(ctx, c.FlushAcks, func(ctx context.Context) error {
		err := requestJSON(ctx, c.nc, c.cfg.requestTimeout, c.subjects.leave,
			api.LeaveRequest{Subscription: c.subscription, Consumer: c.name}, nil)
		if err != nil {
			return fmt.Errorf("leave queue %s of %s: %w", c.subscription, c.topic, err)
		}
		return nil
	})
	return err
}
