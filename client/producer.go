package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/routing"
)

// maxReroutes bounds how many times in a row one record may be rejected with
// SEGMENT_SEALED and re-routed before it fails with ErrRerouteLimit. Each
// re-route waits for a layout at least as new as the rejection's epoch, so
// only a server whose layouts keep routing into sealed segments reaches it.
const maxReroutes = 16

// Producer appends records to one topic. It routes each record itself, by
// the topic's layout: a keyed record to the unit (segment, entry bucket) that
// owns its key hash, an unkeyed one round robin over every unit. Segments
// never show in its API.
//
// Records are queued per unit and sent as batches, many units at once,
// through the connection's multiplexer: the batches of every producer of a
// connection that wait at the same time go out together in one
// produce-multi request (see produceMux). A unit has one batch in flight
// at a time, and up to WithUnitPipeline full batches when its queue holds
// that much: NATS keeps the requests of one connection in order, and the
// server appends a request's batches in order, so the records of one key
// reach the server in the order Send was called. Replies are processed in
// send order per unit.
//
// Layout changes: the server absorbs them (DESIGN.md §1): a batch that meets
// a sealed segment is appended to the successors that own its keys, ahead
// of anything sent there later, so the producer never resends. When it
// learns of a newer layout (from the layout push), it stops sending, waits
// for every batch in flight to be answered, re-routes what it queued by the
// new layout, and goes on: batches follow the new segments and each key's
// callbacks keep their Send order.
//
// With WithEpochRouting(true) the producer keeps the contract from before
// servers absorbed layout changes: every batch names the layout epoch it
// was routed by (api.HeaderEpoch), the server refuses with SEGMENT_SEALED
// what meets a seal or whose key moved since, and the producer refreshes
// the layout until it has reached the epoch the rejection named, waits for
// every batch in flight, and re-routes the rejected records, in front of
// everything queued behind them, by the new layout. Keys keep their order
// either way, across any number of splits, merges and rebuckets. If a
// change that refused records is rolled back on the server (its layout
// never commits, and the segment takes appends again), the producer
// resends by the layout in force once the refused records have waited 30 s.
//
// A record whose batch fails in any other way (ErrTimeout, ErrNoServer, an
// api error) is reported to its callback and never resent by the producer:
// after a timeout the record may have been appended, and a resend could
// append it twice. Records behind it in the same unit still go, so an
// application that resends after an error may reorder that key.
//
// A Producer is safe for concurrent use.
type Producer struct {
	nc                *nats.Conn
	cfg               producerConfig
	topic             string
	tenant, namespace string
	name              string
	mux               *produceMux // sends the batches (see produceMux)
	layoutSub         *nats.Subscription

	// window holds a place per pending record (queued, in flight or being
	// reported); Send blocks while it is full.
	window *window
	// kick wakes the sender loop; capacity 1, sent to without blocking.
	kick chan struct{}
	// ctx ends when Close has abandoned what was left; it stops the sender
	// loop and cancels layout refreshes.
	ctx        context.Context
	stop       context.CancelFunc
	senderDone chan struct{}

	// cbMu serializes callbacks, so the application sees one at a time.
	cbMu sync.Mutex

	// pubMu is held from cutting batches (under mu) until they are handed
	// to the mux, so that they reach it in the order they were cut: a
	// unit's batches, and so each key's records, stay in Send order.
	// Lock order: mu, then pubMu.
	pubMu sync.Mutex

	mu sync.Mutex
	// Guarded by mu:
	router *router // the layout records are routed by
	// ownerDown is set when a batch sent straight to the owner found no
	// node there: batches go through any node until the next layout.
	ownerDown atomic.Bool
	next      *router             // a newer layout, applied once nothing is in flight
	units     map[unit]*unitQueue // per-unit queues under router
	inFlight  map[uint64]*batch   // batches sent and not answered, by id
	lastID    uint64              // the last batch id used
	// unsettled counts batches sent whose outcome is not fully processed
	// (answered batches leave inFlight before their callbacks run).
	// Invariant: unsettled >= len(inFlight).
	unsettled int
	// paused is set while a layout change is under way: no batch is sent
	// until the new layout is applied. wantEpoch is the epoch to reach.
	paused     bool
	wantEpoch  uint64
	refreshing bool                // a refresh goroutine is running
	rejected   map[unit][]*pending // rejected as sealed, by the unit they were sent to, in order
	// rejectedSince is when the records in rejected started waiting.
	rejectedSince time.Time
	// outstanding counts records accepted by Send whose callback has not
	// returned yet; idle, when not nil, is closed when it drops to 0.
	outstanding int
	idle        chan struct{}
	// wakeAt is when the sender loop, asleep, wakes by itself (zero while
	// it runs, or sleeps with no deadline).
	wakeAt time.Time
	// sleeping says the sender sleeps with no deadline: a Send that starts
	// a linger then registers the producer with the mux's lingerer
	// (linger.go) instead of waking it.
	sleeping bool
	flushing int   // Flush calls waiting: send without lingering
	closed   bool  // Close was called: Send refuses
	stopped  bool  // Close abandoned what was left
	fatal    error // the topic is gone: every Send fails with it
}

// unitQueue is the queue of one unit.
type unitQueue struct {
	records []*pending
	bytes   int       // sum of records' sizes
	since   time.Time // when the oldest queued record arrived (zero: long ago)
	// sent holds the unit's batches whose outcome is not processed yet, in
	// send order; outcomes are processed from its head only.
	sent []*batch
	// settling is set while one settle call processes the unit's outcomes
	// (and runs their callbacks); other calls leave theirs to it.
	settling bool
}

// batch is one produce-batch request in flight.
type batch struct {
	id      uint64
	unit    unit
	records []*pending
	epoch   uint64 // the layout epoch the batch was routed by, with WithEpochRouting
	owner   string // the node the batch goes straight to ("": any node)
	// answered is set with the outcome (results or err) once known.
	answered bool
	results  []api.Result
	err      error
}

// completion is the outcome of one record, for its callback.
type completion struct {
	p   *pending
	id  MessageID
	err error
}

// NewProducer returns a producer for the scalable topic topicURI
// ("topic://tenant/namespace/name"). It subscribes to the topic's layout
// pushes and fetches the layout with topic.describe, within the request
// timeout; an unknown topic returns api.ErrTopicNotFound, a malformed URI
// api.ErrInvalidName, a bad option ErrInvalidOption.
func NewProducer(nc *nats.Conn, topicURI string, opts ...ProducerOption) (*Producer, error) {
	cfg := defaultProducerConfig()
	cfg.batchBytes = defaultBatchBytes(nc.MaxPayload())
	for _, o := range opts {
		o.applyProducer(&cfg)
	}
	if err := cfg.validate(nc.MaxPayload()); err != nil {
		return nil, err
	}
	name, err := parseTopic(topicURI)
	if err != nil {
		return nil, err
	}
	ctx, stop := context.WithCancel(context.Background())
	p := &Producer{
		nc:         nc,
		cfg:        cfg,
		topic:      topicURI,
		tenant:     name.Tenant,
		namespace:  name.Namespace,
		name:       name.Name,
		window:     newWindow(cfg.maxInFlight),
		kick:       make(chan struct{}, 1),
		ctx:        ctx,
		stop:       stop,
		senderDone: make(chan struct{}),
		units:      make(map[unit]*unitQueue),
		inFlight:   make(map[uint64]*batch),
		rejected:   make(map[unit][]*pending),
	}
	fail := func(err error) (*Producer, error) {
		stop()
		if p.layoutSub != nil {
			_ = p.layoutSub.Unsubscribe()
		}
		if p.mux != nil {
			p.mux.release()
		}
		return nil, err
	}
	if p.mux, err = acquireMux(nc); err != nil {
		return fail(err)
	}
	// Subscribe to pushes before describing, so no change falls in between.
	layoutSubject := api.TopicSubject(api.LayoutPrefix, name.Tenant, name.Namespace, name.Name)
	if p.layoutSub, err = nc.Subscribe(layoutSubject, p.onLayout); err != nil {
		return fail(fmt.Errorf("braid/client: subscribing to %s: %w", layoutSubject, err))
	}
	d, err := describe(ctx, nc, cfg.requestTimeout, topicURI)
	if err != nil {
		return fail(err)
	}
	r, err := newRouter(d)
	if err != nil {
		return fail(err)
	}
	p.mu.Lock()
	if p.next == nil || p.next.epoch <= r.epoch {
		p.router = r
	} else {
		p.router = p.next
	}
	p.next, p.paused, p.wantEpoch = nil, false, 0
	p.mu.Unlock()
	go p.sendLoop()
	return p, nil
}

// parseTopic parses a topic URI; the error matches both api.ErrInvalidName
// and routing.ErrInvalidName.
func parseTopic(uri string) (routing.TopicName, error) {
	name, err := routing.ParseTopic(uri)
	if err != nil {
		return name, fmt.Errorf("%w: %w", api.ErrInvalidName, err)
	}
	return name, nil
}

// Topic returns the topic URI the producer appends to.
func (p *Producer) Topic() string { return p.topic }

// Send queues rec for the topic and returns at once, unless the producer
// already holds WithMaxInFlight records: then it blocks until one is done,
// ctx ends (ctx.Err()) or the producer is closed (ErrClosed). When Send
// returns nil, cb (if not nil) is called exactly once with the record's
// MessageID or its error; when it returns an error, cb is never called.
//
// The producer keeps rec's slices until cb is called: do not modify them
// before. Callbacks are called one at a time, for the records of one key in
// Send order; they must be quick and must not call Flush, SendSync or Close
// (which wait for callbacks), and a Send from a callback may block.
func (p *Producer) Send(ctx context.Context, rec api.Record, cb func(MessageID, error)) error {
	if err := p.window.acquire(ctx, p.ctx.Done()); err != nil {
		return err
	}
	if cb == nil {
		cb = func(MessageID, error) {}
	}
	pd := newPending(rec, cb)
	p.mu.Lock()
	if p.closed || p.fatal != nil {
		err := p.fatal
		if p.closed {
			err = ErrClosed
		}
		p.mu.Unlock()
		p.window.release(1)
		return err
	}
	p.outstanding++
	u := p.router.route(pd)
	wake := p.enqueue(u, pd)
	var now *batch
	switch {
	case wake && p.cfg.linger == 0 && !p.paused && !p.stopped:
		// Nothing to wait for: send it from here, without a hand-over to
		// the sender. A unit with a batch in flight is not ready: the
		// reply wakes the sender for it.
		now, _ = p.cutLocked(u, p.units[u], time.Now())
		wake = false
	case wake && len(p.units[u].records) == 1 && !p.wakeAt.IsZero() && p.cfg.linger > 0 &&
		!p.wakeAt.After(p.units[u].since.Add(p.cfg.linger)):
		// The sender sleeps until before this record's linger ends, and
		// will then see it: no need to wake it now.
		wake = false
	case wake && len(p.units[u].records) == 1 && p.sleeping && p.cfg.linger > 0 && !p.paused && !p.stopped:
		// The sender sleeps with nothing to wait for: the connection's
		// lingerer cuts this record's batch when its linger ends (and
		// whatever else of this producer is ready then).
		p.sleeping = false
		p.wakeAt = p.units[u].since.Add(p.cfg.linger)
		p.mux.lingerer.add(p, p.wakeAt)
		wake = false
	}
	if now == nil {
		p.mu.Unlock()
	} else {
		p.pubMu.Lock() // before mu goes: batches reach the mux in cut order
		p.mu.Unlock()
		_, failed := p.publish(now, nil)
		p.pubMu.Unlock()
		settleFailed(failed)
	}
	if wake {
		p.wakeSender()
	}
	return nil
}

// enqueue appends pd to unit u and reports whether the sender should wake:
// the queue was empty (a linger deadline starts) or it is now full.
// p.mu must be held.
func (p *Producer) enqueue(u unit, pd *pending) bool {
	q := p.units[u]
	if q == nil {
		q = &unitQueue{}
		p.units[u] = q
	}
	if len(q.records) == 0 {
		q.since = time.Now()
	}
	q.records = append(q.records, pd)
	q.bytes += pd.size
	return len(q.records) == 1 || len(q.records) == p.cfg.batchRecords ||
		(q.bytes >= p.cfg.batchBytes && q.bytes-pd.size < p.cfg.batchBytes)
}

// SendSync sends rec and waits for its outcome. If ctx ends first it
// returns ctx.Err() and the record stays queued: it may still be appended.
func (p *Producer) SendSync(ctx context.Context, rec api.Record) (MessageID, error) {
	type outcome struct {
		id  MessageID
		err error
	}
	done := make(chan outcome, 1)
	if err := p.Send(ctx, rec, func(id MessageID, err error) { done <- outcome{id, err} }); err != nil {
		return MessageID{}, err
	}
	select {
	case o := <-done:
		return o.id, o.err
	case <-ctx.Done():
		return MessageID{}, ctx.Err()
	}
}

// Flush sends every queued record without lingering and waits until no
// record is pending: each has been acknowledged or failed, and its callback
// has returned. Records sent while Flush waits are waited for too. It
// returns ctx.Err() if ctx ends first; failed records do not make it fail.
func (p *Producer) Flush(ctx context.Context) error {
	p.mu.Lock()
	if p.outstanding == 0 {
		p.mu.Unlock()
		return nil
	}
	if p.idle == nil {
		p.idle = make(chan struct{})
	}
	idle := p.idle
	p.flushing++
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.flushing--
		p.mu.Unlock()
	}()
	p.wakeSender()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close refuses new records, flushes the pending ones and releases the
// producer's subscriptions. If ctx ends before every record is done, the
// records left fail with ErrClosed (those in flight may still be appended)
// and Close returns ctx.Err(). Close is idempotent; later calls return nil.
func (p *Producer) Close(ctx context.Context) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()

	err := p.Flush(ctx)

	p.mu.Lock()
	p.stopped = true
	var left []completion
	for _, b := range p.inFlight {
		for _, pd := range b.records {
			left = append(left, completion{p: pd, err: ErrClosed})
		}
	}
	for _, rs := range p.rejected {
		for _, pd := range rs {
			left = append(left, completion{p: pd, err: ErrClosed})
		}
	}
	for _, q := range p.units {
		for _, b := range q.sent {
			if b.answered {
				// Its outcome waits behind an earlier batch still in
				// flight (counted above): it will not be processed now.
				for _, pd := range b.records {
					left = append(left, completion{p: pd, err: ErrClosed})
				}
			}
		}
		q.sent = nil // a settle under way stops at what it took
		for _, pd := range q.records {
			left = append(left, completion{p: pd, err: ErrClosed})
		}
	}
	p.inFlight, p.rejected, p.units = map[uint64]*batch{}, map[unit][]*pending{}, map[unit]*unitQueue{}
	p.mu.Unlock()
	p.complete(left)

	p.stop()
	<-p.senderDone
	p.mux.release()
	_ = p.layoutSub.Unsubscribe()
	return err
}

// complete reports outcomes to their callbacks, then frees their places in
// the window.
func (p *Producer) complete(done []completion) {
	if len(done) == 0 {
		return
	}
	p.cbMu.Lock()
	for _, c := range done {
		c.p.cb(c.id, c.err)
	}
	p.cbMu.Unlock()
	p.window.release(len(done))
	p.mu.Lock()
	p.outstanding -= len(done)
	if p.outstanding == 0 && p.idle != nil {
		close(p.idle)
		p.idle = nil
	}
	p.mu.Unlock()
}

func (p *Producer) wakeSender() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// onLayout handles a layout push.
func (p *Producer) onLayout(m *nats.Msg) {
	var d api.TopicDescription
	if err := json.Unmarshal(m.Data, &d); err != nil {
		return // a malformed push changes nothing; a sealed rejection will refresh
	}
	p.offerLayout(d, false)
}

// offerLayout considers a layout from a push or a refresh. A layout newer
// than any the producer has pauses sending and is applied once nothing is
// in flight. A refresh also offers a layout of the current epoch when a
// rejection named no newer one, so the rejected records are re-routed (and
// fail with ErrRerouteLimit if the server keeps rejecting them).
func (p *Producer) offerLayout(d api.TopicDescription, fromRefresh bool) {
	r, err := newRouter(d)
	if err != nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return
	}
	known := uint64(0)
	if p.router != nil {
		known = p.router.epoch
	}
	if p.next != nil {
		known = max(known, p.next.epoch)
	}
	switch {
	case d.Epoch > known:
		p.next = r
		if p.router != nil { // before NewProducer has a router, it picks the newest
			p.paused = true
			p.wantEpoch = max(p.wantEpoch, d.Epoch)
		}
	case fromRefresh && p.paused && p.next == nil && d.Epoch == known && d.Epoch >= p.wantEpoch:
		p.next = r
	case fromRefresh && p.paused && p.next == nil && d.Epoch == known && p.rolledBack(r):
		// The change that sealed the segments never committed: it was
		// rolled back, and the epoch it named will not come. Resend by
		// the layout in force.
		p.next, p.wantEpoch = r, d.Epoch
	}
	p.tryApply()
}

// needLayout starts a layout change after a SEGMENT_SEALED rejection that
// names epoch. p.mu must be held.
func (p *Producer) needLayout(epoch uint64) {
	if len(p.rejected) > 0 && p.rejectedSince.IsZero() {
		p.rejectedSince = time.Now()
	}
	p.paused = true
	p.wantEpoch = max(p.wantEpoch, epoch)
	if !p.refreshing && (p.next == nil || p.next.epoch < p.wantEpoch) {
		p.refreshing = true
		go p.refresh()
	}
}

// refresh describes the topic, with backoff, until the paused producer has a
// layout at the epoch it waits for. A topic that no longer exists fails
// every pending record and every later Send.
func (p *Producer) refresh() {
	backoff := 5 * time.Millisecond
	for {
		p.mu.Lock()
		if p.stopped || !p.paused || p.fatal != nil || (p.next != nil && p.next.epoch >= p.wantEpoch) {
			p.refreshing = false
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()

		d, err := describe(p.ctx, p.nc, p.cfg.requestTimeout, p.topic)
		switch {
		case err == nil:
			p.offerLayout(d, true)
			continue // check at once whether that was enough
		case errors.Is(err, api.ErrTopicNotFound) || errors.Is(err, &api.Error{Code: api.CodeTopicDeleted}):
			p.failAll(err)
			continue
		}
		select {
		case <-time.After(backoff):
		case <-p.ctx.Done():
		}
		backoff = min(2*backoff, time.Second)
	}
}

// failAll fails every queued and rejected record with err and makes every
// later Send return it: the topic is gone.
func (p *Producer) failAll(err error) {
	var left []completion
	p.mu.Lock()
	p.fatal = err
	for _, rs := range p.rejected {
		for _, pd := range rs {
			left = append(left, completion{p: pd, err: err})
		}
	}
	for _, q := range p.units {
		for _, pd := range q.records {
			left = append(left, completion{p: pd, err: err})
		}
		q.records, q.bytes = nil, 0
	}
	p.rejected = make(map[unit][]*pending)
	p.rejectedSince = time.Time{}
	p.paused, p.wantEpoch, p.next = false, 0, nil
	p.mu.Unlock()
	p.complete(left)
}

// sealRollbackAfter is how long the producer waits for the layout a
// SEGMENT_SEALED named before it takes the segments being active again, at
// the old epoch, as a rolled-back change (its seal, compare-and-swap and
// publish take well under sealTimeout plus the store's timeout on the server).
var sealRollbackAfter = 30 * time.Second

// rolledBack reports whether the records rejected as sealed met a layout
// change that was rolled back: they have waited sealRollbackAfter, and r,
// at the epoch they were routed by, still has every segment they were sent
// to active. p.mu must be held.
func (p *Producer) rolledBack(r *router) bool {
	if len(p.rejected) == 0 || p.rejectedSince.IsZero() || time.Since(p.rejectedSince) < sealRollbackAfter {
		return false
	}
	for u := range p.rejected {
		if !r.active[u.segment] {
			return false
		}
	}
	return true
}

// tryApply applies the next layout once the producer is paused, nothing is
// in flight and the layout is recent enough: the rejected records and every
// queued one are re-routed (see reroute) and sending resumes. p.mu must be
// held.
func (p *Producer) tryApply() {
	if !p.paused || p.unsettled > 0 || p.next == nil || p.next.epoch < p.wantEpoch || p.stopped {
		return
	}
	old := make(map[unit][]*pending, len(p.units)+len(p.rejected))
	for u, rs := range p.rejected {
		old[u] = rs
	}
	for u, q := range p.units {
		old[u] = append(old[u], q.records...)
	}
	p.router, p.next = p.next, nil
	p.ownerDown.Store(false)
	p.paused, p.wantEpoch = false, 0
	p.rejected = make(map[unit][]*pending)
	p.rejectedSince = time.Time{}
	p.units = make(map[unit]*unitQueue)
	for u, rs := range reroute(old, p.router) {
		q := &unitQueue{records: rs} // since is zero: these records waited long enough
		for _, pd := range rs {
			q.bytes += pd.size
		}
		p.units[u] = q
	}
	p.wakeSender()
}
