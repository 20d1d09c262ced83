package crashtest

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/client"
)

// The workload: one Go producer sending keyed messages at a steady rate,
// and one stream consumer speaking the consume subjects itself, so that it
// sees every delivery (the Go StreamConsumer hides redeliveries) and knows
// exactly which ack requests the server answered.

func keyName(k uint32) []byte { return fmt.Appendf(nil, "k%03d", k) }

func payload(id msgID) []byte {
	return binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(nil, id.key), id.seq)
}

// decode returns the id a stored message carries, checking that its key
// agrees with its payload.
func decode(m *api.Message) (msgID, error) {
	if len(m.Payload) != 8 {
		return msgID{}, fmt.Errorf("%d/%d/%d: payload of %d bytes, want 8", m.Segment, m.Bucket, m.Offset, len(m.Payload))
	}
	id := msgID{binary.BigEndian.Uint32(m.Payload), binary.BigEndian.Uint32(m.Payload[4:])}
	if string(m.Key) != string(keyName(id.key)) {
		return msgID{}, fmt.Errorf("%d/%d/%d: key %q carries the payload of %v", m.Segment, m.Bucket, m.Offset, m.Key, id)
	}
	return id, nil
}

// producer sends keys round robin, each with its own sequence numbers, and
// records a message as acknowledged only once its callback has the id.
type producer struct {
	p    *client.Producer
	keys uint32

	mu     sync.Mutex
	next   []uint32 // per key: the next sequence number
	sent   int
	acked  map[msgID]api.Position
	failed int
	errs   map[string]int // failure messages, counted (the first few kinds)
}

func newProducer(p *client.Producer, keys uint32) *producer {
	return &producer{p: p, keys: keys, next: make([]uint32, keys), acked: map[msgID]api.Position{}, errs: map[string]int{}}
}

// run sends perTick messages every tick until ctx ends.
func (pr *producer) run(ctx context.Context, tick time.Duration, perTick int) {
	t := time.NewTicker(tick)
	defer t.Stop()
	k := uint32(0)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for range perTick {
			pr.mu.Lock()
			id := msgID{k, pr.next[k]}
			pr.next[k]++ // never reused: a failed send is not resent under its id
			pr.mu.Unlock()
			k = (k + 1) % pr.keys
			rec := api.Record{Key: keyName(id.key), Payload: payload(id)}
			if err := pr.p.Send(ctx, rec, func(mid client.MessageID, err error) { pr.settled(id, mid, err) }); err != nil {
				return // ctx ended while the window was full
			}
			pr.mu.Lock()
			pr.sent++
			pr.mu.Unlock()
		}
	}
}

func (pr *producer) settled(id msgID, mid client.MessageID, err error) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if err != nil {
		pr.failed++
		if msg := errorKind(err); len(pr.errs) < 8 || pr.errs[msg] > 0 {
			pr.errs[msg]++
		}
		return
	}
	pr.acked[id] = api.Position{Segment: mid.Segment, Bucket: mid.Bucket, Offset: mid.Offset}
}

// errorKind strips the per-request detail off an error so they can be
// counted by kind.
func errorKind(err error) string {
	var e *api.Error
	switch {
	case errors.Is(err, client.ErrTimeout), errors.Is(err, nats.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, client.ErrNoServer), errors.Is(err, nats.ErrNoResponders):
		return "no responders"
	case errors.As(err, &e):
		return e.Code.Symbol
	}
	return err.Error()
}

// ackedCopy returns a copy of the acknowledged sends.
func (pr *producer) ackedCopy() map[msgID]api.Position {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return maps.Clone(pr.acked)
}

func (pr *producer) stats() (sent, acked, failed int, errs map[string]int) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	errs = make(map[string]int, len(pr.errs))
	for k, v := range pr.errs {
		errs[k] = v
	}
	return pr.sent, len(pr.acked), pr.failed, errs
}

// consumer is one stream consumer of a durable subscription, on the wire
// protocol: join, fetch (with resync after a failed fetch), cumulative ack.
type consumer struct {
	nc               *nats.Conn
	sub, name        string
	join, fetch, ack string
	rng              *rand.Rand
	kills            func() int // the kills so far, stamped on each event
	// acking receives (without blocking the consumer) each time an ack
	// request is about to go out: the kill scheduler waits on it.
	acking chan struct{}
	// fetches counts the fetch requests answered.
	fetches atomic.Int64

	mu        sync.Mutex
	events    []consumerEvent
	delivered map[msgID]bool
	errs      map[string]int
}

func newConsumer(nc *nats.Conn, topic, sub, name string, seed uint64, kills func() int) *consumer {
	subject := func(verb string) string { return api.ConsumeSubject(verb, "public", "default", topic) }
	return &consumer{nc: nc, sub: sub, name: name,
		join: subject(api.ConsumeJoin), fetch: subject(api.ConsumeFetch), ack: subject(api.ConsumeAck),
		rng: newRand(seed, 2), kills: kills, acking: make(chan struct{}),
		delivered: map[msgID]bool{}, errs: map[string]int{}}
}

// request sends req as JSON to subject and returns the reply body, or the
// wire error. Without a deadline in ctx it waits at most 5s.
func request(ctx context.Context, nc *nats.Conn, subject string, req any) ([]byte, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
	}
	m, err := nc.RequestMsgWithContext(ctx, &nats.Msg{Subject: subject, Data: body})
	if err != nil {
		return nil, err
	}
	if e := api.ParseError(m.Header.Get(micro.ErrorCodeHeader), m.Header.Get(micro.ErrorHeader)); e != nil {
		return nil, e
	}
	return m.Data, nil
}

// requestJSON is request with a JSON reply decoded into reply.
func requestJSON(ctx context.Context, nc *nats.Conn, subject string, req, reply any) error {
	data, err := request(ctx, nc, subject, req)
	if err != nil {
		return err
	}
	return json.Unmarshal(data, reply)
}

// request sends one consume request, waiting at most timeout.
func (c *consumer) request(subject string, req any, timeout time.Duration) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return request(ctx, c.nc, subject, req)
}

func (c *consumer) failure(what string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.errs[what+": "+errorKind(err)]++
}

// run consumes until ctx ends. A failed request is retried after a pause;
// what it may have lost comes back as redeliveries.
func (c *consumer) run(ctx context.Context) {
	joined, resync := false, false
	received := map[unit]uint64{} // per unit: one past the highest offset received
	toAck := map[unit]uint64{}    // per unit: the highest offset received and not acknowledged yet
	pause := func() {
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
	for ctx.Err() == nil {
		if !joined {
			_, err := c.request(c.join, api.JoinRequest{Subscription: c.sub, Consumer: c.name, Start: api.StartEarliest}, time.Second)
			if err != nil {
				c.failure("join", err)
				pause()
				continue
			}
			// A join rewinds the consumer to the durable cursors: what
			// it received or meant to ack before comes again.
			joined, resync = true, false
			clear(received)
			clear(toAck)
		}
		req := api.FetchRequest{Subscription: c.sub, Consumer: c.name, Max: 500, Wait: "100ms", Resync: resync}
		if resync {
			for u, next := range received {
				req.Received = append(req.Received, api.Position{Segment: u.segment, Bucket: u.bucket, Offset: next})
			}
		}
		data, err := c.request(c.fetch, req, time.Second)
		var msgs []api.Message
		if err == nil {
			msgs, err = api.DecodeMessages(data)
		}
		if err != nil {
			c.failure("fetch", err)
			if errors.Is(err, api.ErrConsumerUnknown) {
				joined = false
			} else {
				resync = true // the lost reply may have held messages the server counts as delivered
			}
			pause()
			continue
		}
		resync = false
		c.fetches.Add(1)
		c.delivered1(msgs, received, toAck)
		if len(toAck) > 0 && c.rng.IntN(5) > 0 { // now and then let acks pile up over two fetches
			if c.sendAcks(toAck) {
				joined = false
			}
		}
	}
}

// delivered1 records the messages of one fetch reply.
func (c *consumer) delivered1(msgs []api.Message, received, toAck map[unit]uint64) {
	kills := c.kills()
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range msgs {
		m := &msgs[i]
		id, err := decode(m)
		if err != nil {
			c.errs["malformed delivery: "+err.Error()]++
			continue
		}
		u := unit{m.Segment, m.Bucket}
		c.events = append(c.events, consumerEvent{unit: u, offset: m.Offset, id: id, deliveries: m.Deliveries, kills: kills})
		c.delivered[id] = true
		received[u] = max(received[u], m.Offset+1)
		toAck[u] = max(toAck[u], m.Offset)
	}
}

// sendAcks acknowledges, cumulatively, the highest offset received in each
// unit, and records the acks once the server has answered OK. It reports
// whether the server had forgotten the consumer (join again).
func (c *consumer) sendAcks(toAck map[unit]uint64) (rejoin bool) {
	req := api.AckRequest{Subscription: c.sub, Consumer: c.name}
	for u, off := range toAck {
		req.Acks = append(req.Acks, api.Position{Segment: u.segment, Bucket: u.bucket, Offset: off})
	}
	select {
	case c.acking <- struct{}{}: // a kill is waiting for this moment
	default:
	}
	_, err := c.request(c.ack, req, time.Second)
	switch {
	case err == nil:
		kills := c.kills()
		c.mu.Lock()
		for _, p := range req.Acks {
			c.events = append(c.events, consumerEvent{ack: true, unit: unitOf(p), cursor: p.Offset + 1, kills: kills})
		}
		c.mu.Unlock()
		clear(toAck)
		return false
	case errors.Is(err, api.ErrConsumerUnknown):
		c.failure("ack", err)
		clear(toAck) // the join rewinds: the server delivers them again
		return true
	case errors.Is(err, &api.Error{Code: api.CodeNotOwner}), errors.Is(err, api.ErrInvalidArgument):
		// The server restarted (it rewound to the durable cursors and
		// has not handed these out again) or moved the unit: it
		// delivers them again.
		c.failure("ack", err)
		clear(toAck)
		return false
	}
	c.failure("ack", err) // no answer: the same acks go again, with the next ones
	return false
}

// snapshot returns a copy of the consumer's events and its failures.
func (c *consumer) snapshot() ([]consumerEvent, map[string]int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	errs := make(map[string]int, len(c.errs))
	for k, v := range c.errs {
		errs[k] = v
	}
	return append([]consumerEvent(nil), c.events...), errs
}

// undelivered counts the acknowledged sends the consumer has not been
// delivered yet.
func (c *consumer) undelivered(acked map[msgID]api.Position) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for id := range acked {
		if !c.delivered[id] {
			n++
		}
	}
	return n
}
