package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/routing"
)

// StreamConsumer reads a topic through a subscription, in order: the
// subscription's group on the server assigns units (segment, entry bucket)
// to the consumers that joined it, delivers each unit in offset order, and
// holds back a segment until every ancestor is drained (the ordering rule of
// DESIGN.md §1). So every key is read in the order it was produced, across
// splits and merges. Several StreamConsumers with the same subscription share
// its units; more consumers than units leave some idle (Assigned reports 0).
//
// Acknowledgements are cumulative per unit: Message.Ack acknowledges that
// message and every earlier one of its unit. They are batched: the highest
// position per unit is sent every WithAckInterval, and on FlushAcks and Close.
// Unacknowledged messages are delivered again after this consumer leaves,
// dies or the server restarts (at-least-once).
//
// The consumer drops messages it has already returned from Next when the
// server delivers them again to it (after a server restart, or a re-join):
// it remembers, per unit, the highest offset it returned, for its lifetime.
// So one StreamConsumer never returns the same message twice; a message can
// still reach two consumers of the subscription when its unit moves before
// the message was acknowledged. After a server restart the units a consumer
// held wait for it to join again (which it does by itself) for its session
// timeout, so its acknowledged messages do not reach another consumer.
//
// Requests in flight when the NATS connection drops are abandoned at once
// (their replies cannot arrive) rather than after the request timeout.
//
// A StreamConsumer is safe for concurrent use; Next calls are served one at a
// time.
type StreamConsumer struct {
	nc           *nats.Conn
	cfg          consumerConfig
	topic        string
	subscription string
	name         string
	subjects     struct{ join, fetch, ack, leave string }

	// session holds the lifetime, the join generation and, guarded by its
	// mu, lastHeard, fetchActive and ackErr (here: the last error of a
	// background ack flush that dropped positions, refused as invalid; a
	// failure a retry may cure is not kept, its positions go back for the
	// next flush, whose outcome counts).
	session

	// nextMu serializes Next; it guards the fetch loop.
	nextMu sync.Mutex
	pull   pull

	// statuses reports the connection dropping. connLost is closed, then
	// replaced, each time it does: the requests in flight then are
	// abandoned (see whileConnected). Guarded by connMu.
	statuses chan nats.Status
	connMu   sync.Mutex
	connLost chan struct{}

	// Guarded by mu: the positions in each unit (see unitPos).
	pos unitPositions
	// admitted is the unit of the message admit accepted last, for Next.
	// Guarded by nextMu.
	admitted *unitPos
	// resync is set when a fetch failed: its reply may have been lost with
	// messages the server counts as delivered. The next fetch asks the
	// server to deliver again from received (api.FetchRequest.Resync).
	resync    bool
	assigned  int  // units held after the last fetch (Braid-Assigned)
	fetched   bool // a fetch has succeeded: assigned is known
	consumers int  // consumers in the group at the last join
}

type fetchResult struct {
	msgs       []api.Message
	generation uint64
	err        error
}

// Message is one message delivered by a StreamConsumer.
type Message struct {
	ID         MessageID
	Key        []byte // nil for an unkeyed message
	Payload    []byte
	Headers    []api.Header
	Time       time.Time // the append time (or the producer's Braid-Time)
	Deliveries uint32    // 1 on first delivery, more when delivered again

	consumer *StreamConsumer
	pos      *unitPos
}

// Ack acknowledges the message and, cumulatively, every earlier message of
// its unit. It only records the position; the ack is sent at the next ack
// interval (or FlushAcks, or Close). Acking a message older than one already
// acked does nothing.
func (m *Message) Ack() {
	c, p := m.consumer, m.pos
	c.mu.Lock()
	if next := m.ID.Offset + 1; next > p.acked {
		p.acked = next
		c.pos.setToAck(p, next)
	}
	c.mu.Unlock()
}

// NewStreamConsumer joins subscription (created at its start position on
// the first join) of the topic topicURI as a stream consumer. The join is one
// request bounded by the request timeout. It returns api.ErrInvalidName for
// a malformed topic, subscription or consumer name, ErrInvalidOption for a
// bad option, and the server's error (api.ErrTopicNotFound...) for a refused
// join.
func NewStreamConsumer(nc *nats.Conn, topicURI, subscription string, opts ...ConsumerOption) (*StreamConsumer, error) {
	cfg := defaultConsumerConfig()
	for _, o := range opts {
		o.applyConsumer(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	name, err := subscriptionTopic(topicURI, subscription, &cfg)
	if err != nil {
		return nil, err
	}
	c := &StreamConsumer{
		session:      newSession(),
		nc:           nc,
		pull:         pull{prefetch: true},
		cfg:          cfg,
		topic:        topicURI,
		subscription: subscription,
		name:         cfg.name,
		pos:          newUnitPositions(),
		statuses:     nc.StatusChanged(nats.RECONNECTING, nats.DISCONNECTED, nats.CLOSED),
		connLost:     make(chan struct{}),
	}
	go c.watchConnection()
	c.subjects.join = api.ConsumeSubject(api.ConsumeJoin, name.Tenant, name.Namespace, name.Name)
	c.subjects.fetch = api.ConsumeSubject(api.ConsumeFetch, name.Tenant, name.Namespace, name.Name)
	c.subjects.ack = api.ConsumeSubject(api.ConsumeAck, name.Tenant, name.Namespace, name.Name)
	c.subjects.leave = api.ConsumeSubject(api.ConsumeLeave, name.Tenant, name.Namespace, name.Name)
	if err := c.join(c.ctx); err != nil {
		c.stop()
		nc.RemoveStatusListener(c.statuses)
		return nil, err
	}
	go c.ackLoop(c.cfg.ackInterval, c.cfg.sessionTimeout, c.flushAcks, droppedPositions, c.join)
	return c, nil
}

// watchConnection closes connLost each time the connection drops, until
// the status listener is removed.
func (c *StreamConsumer) watchConnection() {
	for range c.statuses {
		c.connMu.Lock()
		close(c.connLost)
		c.connLost = make(chan struct{})
		c.connMu.Unlock()
	}
}

// errConnectionLost is returned for a request abandoned because the NATS
// connection dropped while it waited for its reply: a reply sent to the
// dropped connection is lost, so waiting for the request timeout (after a
// server restart, say) would only stall fetches, acks and handoffs. It
// matches ErrNoServer: the request may be retried.
var errConnectionLost = fmt.Errorf("braid/client: connection lost while waiting for a reply: %w", ErrNoServer)

// whileConnected runs do with ctx, also cancelled when the connection drops,
// and reports that cancellation as errConnectionLost.
func (c *StreamConsumer) whileConnected(ctx context.Context, do func(context.Context) error) error {
	c.connMu.Lock()
	lost := c.connLost
	c.connMu.Unlock()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case <-lost:
			cancel(errConnectionLost)
		case <-ctx.Done():
		}
	}()
	err := do(ctx)
	if err != nil && errors.Is(context.Cause(ctx), errConnectionLost) {
		return errConnectionLost
	}
	return err
}

// subscriptionTopic parses the topic of a new subscription consumer, checks
// the subscription's name, and names the consumer (cfg.name) when it has no
// name.
func subscriptionTopic(topicURI, subscription string, cfg *consumerConfig) (routing.TopicName, error) {
	name, err := parseTopic(topicURI)
	if err != nil {
		return name, err
	}
	if err := routing.ValidateName(subscription); err != nil {
		return name, fmt.Errorf("%w: subscription: %w", api.ErrInvalidName, err)
	}
	if cfg.name == "" {
		cfg.name = randomName()
	}
	return name, nil
}

func randomName() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "c-" + hex.EncodeToString(b[:])
}

// Name returns the consumer's name within its subscription.
func (c *StreamConsumer) Name() string { return c.name }

// Subscription returns the subscription's name.
func (c *StreamConsumer) Subscription() string { return c.subscription }

// Assigned returns how many units the server had assigned to this consumer at
// its last fetch. 0 while other consumers hold every unit means the consumer
// is idle: the subscription has more consumers than the topic has units.
func (c *StreamConsumer) Assigned() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.assigned
}

// Idle reports whether the consumer holds no unit while its subscription
// has other consumers, as of its last fetch and join: the subscription has
// more consumers than the topic has units, and this one receives nothing
// until a unit frees up.
func (c *StreamConsumer) Idle() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fetched && c.assigned == 0 && c.consumers > 1
}

func (c *StreamConsumer) join(ctx context.Context) error {
	req := api.JoinRequest{
		Subscription:   c.subscription,
		Consumer:       c.name,
		Start:          c.cfg.start,
		ReadCompacted:  c.cfg.readCompacted,
		SessionTimeout: c.cfg.sessionTimeout.String(),
	}
	var reply api.JoinReply
	err := c.whileConnected(ctx, func(ctx context.Context) error {
		return requestJSON(ctx, c.nc, c.cfg.requestTimeout, c.subjects.join, req, &reply)
	})
	if err != nil {
		return fmt.Errorf("join %s of %s: %w", c.subscription, c.topic, err)
	}
	c.mu.Lock()
	c.consumers = reply.Consumers
	c.lastHeard = time.Now()
	c.mu.Unlock()
	return nil
}

// rejoin joins again after the server answered CONSUMER_UNKNOWN to a request
// made at generation gen, unless another request has re-joined since.
func (c *StreamConsumer) rejoin(ctx context.Context, gen uint64) error {
	return c.session.rejoin(gen, func() error {
		if err := c.join(ctx); err != nil {
			return err
		}
		c.mu.Lock()
		c.pos.clearReceived()
		c.mu.Unlock()
		return nil
	})
}

// Next returns the next message, waiting for one as long as ctx allows. It
// fetches batches from the server and returns their messages one by one, in
// offset order per unit. It returns ctx.Err() when ctx ends, ErrClosed after
// Close, and a fetch's error (ErrTimeout, ErrNoServer, an *api.Error) when
// one fails; calling Next again retries. A consumer the server has forgotten
// (CONSUMER_UNKNOWN: its session expired, or the server restarted) joins
// again by itself.
func (c *StreamConsumer) Next(ctx context.Context) (*Message, error) {
	c.nextMu.Lock()
	defer c.nextMu.Unlock()
	m, err := c.pull.next(ctx, c.closing, c.fetch, c.rejoin, c.admit)
	if err != nil {
		return nil, err
	}
	return c.message(&m, c.admitted), nil
}

// admit reports whether m is new to the application, and records it as
// delivered. A message below what was delivered is a redelivery and is
// dropped; if the application had acked it, the ack goes again (the server
// redelivers it because that ack never became durable).
func (c *StreamConsumer) admit(m *api.Message) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.pos.get(unit{m.Segment, m.Bucket})
	if p.hasDelivered && m.Offset < p.delivered {
		if p.acked > m.Offset {
			c.pos.setToAck(p, p.acked)
			p.ackSent = min(p.ackSent, m.Offset)
		}
		return false
	}
	p.delivered, p.hasDelivered = m.Offset+1, true
	c.admitted = p
	return true
}

func (c *StreamConsumer) message(m *api.Message, p *unitPos) *Message {
	out := &Message{
		ID:         MessageID{Segment: m.Segment, Bucket: m.Bucket, Offset: m.Offset},
		Key:        m.Key,
		Payload:    m.Payload,
		Headers:    m.Headers,
		Deliveries: m.Deliveries,
		consumer:   c,
		pos:        p,
	}
	if m.Time != 0 {
		out.Time = time.UnixMilli(m.Time)
	}
	return out
}

// maxReceivedPositions is the server's bound on FetchRequest.Received.
const maxReceivedPositions = 10_000

// fetch runs one fetch request. It is bounded by the fetch wait plus the
// request timeout, and by Close, not by the caller of Next (see pull).
func (c *StreamConsumer) fetch() fetchResult {
	gen := c.currentGeneration()
	req := api.FetchRequest{
		Subscription: c.subscription,
		Consumer:     c.name,
		Max:          c.cfg.fetchMax,
		MaxBytes:     c.cfg.fetchMaxBytes,
		Wait:         c.cfg.fetchWait.String(),
	}
	c.mu.Lock()
	c.fetchActive = true
	resync := c.resync
	if resync {
		req.Resync = true
		for _, p := range c.pos.byUnit {
			if p.received > 0 {
				req.Received = append(req.Received, api.Position{Segment: p.unit.segment, Bucket: p.unit.bucket, Offset: p.received})
			}
		}
		if len(req.Received) > maxReceivedPositions {
			// Units left out restart at the ack cursor: more duplicates,
			// nothing missed.
			req.Received = nil
		}
	}
	c.mu.Unlock()
	body, err := json.Marshal(req)
	if err != nil {
		return fetchResult{err: err}
	}
	ctx, cancel := context.WithTimeout(c.ctx, c.cfg.fetchWait+c.cfg.requestTimeout)
	var m *nats.Msg
	err = c.whileConnected(ctx, func(ctx context.Context) (err error) {
		m, err = request(ctx, c.nc, 0, &nats.Msg{Subject: c.subjects.fetch, Data: body})
		return err
	})
	cancel()
	c.mu.Lock()
	c.fetchActive = false
	c.lastHeard = time.Now()
	switch {
	case err == nil && resync:
		c.resync = false
	case err != nil && !errors.Is(err, api.ErrConsumerUnknown):
		// The server may have handed out messages in a reply that
		// never arrived (a re-join rewinds by itself).
		c.resync = true
	}
	if err == nil {
		if n, perr := strconv.Atoi(m.Header.Get(api.FetchReplyHeaderAssigned)); perr == nil {
			c.assigned, c.fetched = n, true
		}
	}
	c.mu.Unlock()
	if err != nil {
		return fetchResult{generation: gen, err: fmt.Errorf("fetch %s of %s: %w", c.subscription, c.topic, err)}
	}
	msgs, err := api.DecodeMessages(m.Data)
	if err != nil {
		c.mu.Lock()
		c.resync = true // what the reply held counts as delivered
		c.mu.Unlock()
		return fetchResult{generation: gen, err: fmt.Errorf("braid/client: fetch reply from %s: %w", c.topic, err)}
	}
	if gen == c.currentGeneration() {
		c.mu.Lock()
		for i := range msgs {
			u := unit{msgs[i].Segment, msgs[i].Bucket}
			p := c.pos.get(u)
			p.received = max(p.received, msgs[i].Offset+1)
		}
		c.mu.Unlock()
	}
	return fetchResult{msgs: msgs, generation: gen}
}

// FlushAcks sends the acks recorded so far and waits for the server to make
// them durable. It returns the error of that request or, if it succeeded
// (or there was nothing to send), the error of the last background flush
// since the previous FlushAcks that dropped acks (refused as invalid). A
// background failure that a retry may cure (timeout, no server) is not
// reported: its acks are sent again, by later flushes and this one.
// Acks of messages the server has not handed out again since a re-join
// wait until it has (the server refuses them before).
func (c *StreamConsumer) FlushAcks(ctx context.Context) error {
	return c.session.flushAcks(ctx, c.flushAcks)
}

// droppedPositions reports whether an ack flush's error says positions were
// refused for good (not put back for a retry); see ackOutcome.
func droppedPositions(err error) bool {
	return errors.Is(err, api.ErrInvalidArgument) || errors.Is(err, api.ErrBadRequest)
}

// flushAcks sends the pending acks that the server can take (see received).
// A position refused with NOT_OWNER is dropped: the unit has moved and its
// new owner gets the messages again. A position that failed in a way a
// retry may cure (timeout, no server, unavailable) goes back for the next
// flush; one refused as invalid is dropped and reported.
func (c *StreamConsumer) flushAcks(ctx context.Context) error {
	c.mu.Lock()
	var positions []api.Position
	held := c.pos.pending[:0]
	for _, p := range c.pos.pending {
		n := min(p.toAck, p.received)
		if n > p.ackSent {
			positions = append(positions, api.Position{Segment: p.unit.segment, Bucket: p.unit.bucket, Offset: n - 1})
		}
		if n == p.toAck {
			p.pending, p.toAck = false, 0
		} else {
			held = append(held, p) // beyond what the server handed out
		}
	}
	clear(c.pos.pending[len(held):])
	c.pos.pending = held
	c.mu.Unlock()
	if len(positions) == 0 {
		return nil
	}
	err := c.sendAcks(ctx, positions)
	if len(positions) > 1 && refusedPosition(err) {
		// The server refuses a request as a whole for one bad position:
		// find which, and let the others count.
		var errs []error
		for _, p := range positions {
			errs = append(errs, c.ackOutcome([]api.Position{p}, c.sendAcks(ctx, []api.Position{p})))
		}
		return errors.Join(errs...)
	}
	return c.ackOutcome(positions, err)
}

// refusedPosition reports whether err refuses an ack for one of its
// positions rather than for the request as a whole.
func refusedPosition(err error) bool {
	return errors.Is(err, &api.Error{Code: api.CodeNotOwner}) || errors.Is(err, api.ErrInvalidArgument)
}

// ackOutcome records the outcome of one ack request and returns the error
// to report.
func (c *StreamConsumer) ackOutcome(positions []api.Position, err error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case err == nil:
		for _, p := range positions {
			up := c.pos.get(unit{p.Segment, p.Bucket})
			up.ackSent = max(up.ackSent, p.Offset+1)
		}
		return nil
	case errors.Is(err, &api.Error{Code: api.CodeNotOwner}):
		return nil
	case droppedPositions(err):
		return err
	}
	for _, p := range positions {
		c.pos.setToAck(c.pos.get(unit{p.Segment, p.Bucket}), p.Offset+1)
	}
	if errors.Is(err, errRejoined) {
		return nil
	}
	return err
}

// sendAcks sends one ack request; on CONSUMER_UNKNOWN it re-joins and
// returns errRejoined.
func (c *StreamConsumer) sendAcks(ctx context.Context, positions []api.Position) error {
	req := api.AckRequest{Subscription: c.subscription, Consumer: c.name, Acks: positions}
	gen := c.currentGeneration()
	err := c.whileConnected(ctx, func(ctx context.Context) error {
		return requestJSON(ctx, c.nc, c.cfg.requestTimeout, c.subjects.ack, req, nil)
	})
	if err == nil {
		c.heard()
		return nil
	}
	if !errors.Is(err, api.ErrConsumerUnknown) {
		return fmt.Errorf("ack %s of %s: %w", c.subscription, c.topic, err)
	}
	if jerr := c.rejoin(ctx, gen); jerr != nil {
		return jerr
	}
	// The server has rewound to its durable cursors: these positions
	// become acceptable once it has handed the messages out again.
	return errRejoined
}

// errRejoined says an ack found the consumer forgotten and re-joined; its
// positions wait for the next flush.
var errRejoined = errors.New("braid/client: re-joined")

// Close stops the consumer: Next returns ErrClosed, the pending acks are sent
// and the consumer leaves its subscription, so its units move to the other
// consumers at once. Messages returned by Next and not acknowledged will be
// delivered again. Close returns the error of the last ack flush or of the
// leave; it is idempotent, and later calls return nil.
func (c *StreamConsumer) Close(ctx context.Context) error {
	first, err := c.shutdown(ctx, c.flushForClose, func(ctx context.Context) error {
		err := requestJSON(ctx, c.nc, c.cfg.requestTimeout, c.subjects.leave,
			api.LeaveRequest{Subscription: c.subscription, Consumer: c.name}, nil)
		if err != nil {
			return fmt.Errorf("leave %s of %s: %w", c.subscription, c.topic, err)
		}
		return nil
	})
	if first {
		c.nc.RemoveStatusListener(c.statuses)
	}
	return err
}

// maxCloseCatchUp bounds the fetches Close makes to get acks accepted.
const maxCloseCatchUp = 8

// flushForClose sends the pending acks. Acks held back because the server
// has not handed their messages out again since a re-join (a restart) are
// made acceptable first by fetching up to them, within ctx and a few
// fetches: otherwise the units would go to another consumer with messages
// this one acknowledged. The messages fetched are not returned: after the
// leave, the server delivers them to the units' next owners.
func (c *StreamConsumer) flushForClose(ctx context.Context) error {
	err := c.FlushAcks(ctx)
	for range maxCloseCatchUp {
		if !c.acksHeldBack() || ctx.Err() != nil {
			break
		}
		r := c.fetch()
		if errors.Is(r.err, api.ErrConsumerUnknown) {
			if c.rejoin(ctx, r.generation) != nil {
				break
			}
			continue
		}
		if r.err != nil || len(r.msgs) == 0 {
			break
		}
		err = c.FlushAcks(ctx)
	}
	return err
}

// acksHeldBack reports whether acks wait for the server to hand their
// messages out again.
func (c *StreamConsumer) acksHeldBack() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.pos.pending {
		if p.toAck > p.received {
			return true
		}
	}
	return false
}
