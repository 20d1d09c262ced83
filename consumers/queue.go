package consumers

import (
	"errors"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/topology"
)

// This file is the queue group actor: one per queue subscription, sharing
// every unit of its topic between its consumers (DESIGN.md §2). Its state
// and WAL records are in queue_state.go and queue_record.go, delivery in
// queue_deliver.go.
//
// Per unit the group keeps a window of at most Queue.window offsets past the
// unit's cumulative point, and only there: what each offset is (ready,
// inflight with a consumer until its ack deadline, delayed after a nack,
// acked, on its way to the dead-letter topic) and how often it was
// delivered. A fetch takes, per unit, the ready entries first (redeliveries,
// oldest first), then extends the window with messages never delivered.
// Messages are read from the bucket log when they are handed out; the
// window holds no payload. A backlog of any size therefore costs at most
// units x window entries of memory; a message held without an answer for
// longer than it takes the consumers to work through a window stalls its
// unit (not the others) until it is acked, nacked or timed out.
//
// Every change is group-committed: the acks, nacks and deliveries in the
// mailbox are applied at once in memory, written as one update record, and
// answered once that record is durable. A delivery is therefore recorded
// before its fetch is answered, so delivery counts survive a restart; a
// message that was with a consumer when the group stopped is ready again
// after it, its count carried on.
//
// A message that must not be delivered again (its deliveries reached the
// policy's max) goes to the dead-letter topic through Queue.deadLetter and
// is acknowledged once that append is durable. The decision is not recorded
// on its own: it follows from the recorded delivery count, so a group that
// restarts before the append was confirmed makes it again (the dead-letter
// topic may then hold the message twice, never zero times).

// Queue-specific group messages (Fetch, Ack and Leave are shared with
// stream groups; for a queue group an Ack acknowledges each position alone
// and may come from any consumer of the subscription).
type (
	// queueJoin adds or refreshes a consumer, creating the subscription on
	// first join, and applies the policy fields that are set.
	queueJoin struct {
		Consumer       string
		Start          string
		SessionTimeout time.Duration
		Policy         queuePolicyUpdate
		Reply          func(api.JoinReply, error)
	}
	// queueNack delivers the positions again after Delay (< 0: the
	// subscription's backoff), if the consumer holds them.
	queueNack struct {
		Consumer string
		Nacks    []api.Position
		Delay    time.Duration
		Reply    func(error)
	}
	getQueueStats struct{ Reply func(QueueStats, error) }
	// deadLettered reports the outcome of one dead-letter append.
	deadLettered struct {
		incarnation uint64
		unit        topology.Unit
		offset      uint64
		err         error
	}
)

// queuePolicyUpdate holds the policy fields a join sets.
type queuePolicyUpdate struct {
	AckTimeout, NackDelay, MaxNackDelay *time.Duration
	NackBackoff                         *float64
	MaxDeliveries                       *uint32
	DeadLetterTopic                     *string
}

func (u queuePolicyUpdate) applyTo(p queuePolicy) queuePolicy {
	if u.AckTimeout != nil {
		p.AckTimeout = *u.AckTimeout
	}
	if u.NackDelay != nil {
		p.NackDelay = *u.NackDelay
	}
	if u.MaxNackDelay != nil {
		p.MaxNackDelay = *u.MaxNackDelay
	}
	if u.NackBackoff != nil {
		p.NackBackoff = *u.NackBackoff
	}
	if u.MaxDeliveries != nil {
		p.MaxDeliveries = *u.MaxDeliveries
	}
	if u.DeadLetterTopic != nil {
		p.DeadLetterTopic = *u.DeadLetterTopic
	}
	return p
}

func defaultQueuePolicy() queuePolicy {
	return queuePolicy{AckTimeout: DefaultAckTimeout, NackDelay: DefaultNackDelay, MaxNackDelay: DefaultMaxNackDelay, NackBackoff: 1}
}

// queueBatch is the group commit of a queue group: what changed since the
// last flush and the replies due once it is durable.
type queueBatch struct {
	// touched holds, per unit, the offsets whose recorded state changed;
	// units the units whose floor or read moved.
	touched   map[topology.Unit]map[uint64]bool
	units     map[topology.Unit]bool
	drained   []topology.SegmentID
	policy    bool
	replies   []func(error)
	scheduled bool
}

func newQueueBatch() queueBatch {
	return queueBatch{touched: make(map[topology.Unit]map[uint64]bool), units: make(map[topology.Unit]bool)}
}

func (b *queueBatch) empty() bool {
	return len(b.touched) == 0 && len(b.units) == 0 && len(b.drained) == 0 && !b.policy && len(b.replies) == 0
}

func (b *queueBatch) touch(u topology.Unit, off uint64) {
	m := b.touched[u]
	if m == nil {
		m = make(map[uint64]bool)
		b.touched[u] = m
	}
	m[off] = true
}

// queueGroup is the actor of one queue subscription. Everything is touched
// from its goroutine only.
type queueGroup struct {
	groupBase

	state queueState
	batch queueBatch
	epoch uint64 // the layout epoch refresh last saw

	rr int
	// due is expire's scratch list of the offsets due in one unit, kept so
	// that a fetch allocates none.
	due []uint64
	// deadLettered counts the messages sent to the dead-letter topic by
	// this incarnation.
	deadLettered uint64
}

func newQueueProps(cfg groupConfig) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor {
		return &queueGroup{groupBase: newGroupBase(cfg, cfg.Logger.With("subscription", cfg.Subscription, "kind", "queue"), "queue subscription")}
	}, actor.WithGuardian(groupSupervision), actor.WithDispatcher(groupLabels(cfg, "queue")))
}

// Receive implements actor.Actor.
func (q *queueGroup) Receive(ctx actor.Context) {
	switch ctx.Message().(type) {
	case *actor.Started:
		q.begin(ctx)
		q.load()
		return
	case *actor.Restarting:
		q.end(api.Errorf(api.CodeUnavailable, "subscription %q restarted", q.cfg.Subscription))
		return
	case *actor.Stopping:
		if q.broken == nil && q.log != nil && !q.batch.empty() {
			q.flushOrFail(false)
		}
		q.end(api.Errorf(api.CodeUnavailable, "subscription %q is stopping", q.cfg.Subscription))
		return
	case *actor.Stopped:
		if q.cfg.OnStopped != nil {
			q.cfg.OnStopped(ctx.Self())
		}
		return
	}
	if q.preAccept(ctx.Message()) {
		return
	}
	if !q.accept(q, ctx.Message()) {
		return
	}
	switch m := ctx.Message().(type) {
	case *queueJoin:
		q.onJoin(m)
	case *Fetch:
		q.onFetch(m)
	case *Ack:
		q.onAck(m)
	case *queueNack:
		q.onNack(m)
	case *Leave:
		if c := q.consumers[m.Consumer]; c != nil {
			q.removeConsumer(c, "left")
			q.serveParked()
		}
		replyErr(m.Reply, nil)
	case *getQueueStats:
		q.onStats(m)
	case *getInfo:
		q.onInfo(m)
	case *seekSub:
		q.onSeek(m)
	case flushNow:
		q.flushOrFail(true)
		q.serveParked()
	case deadLettered:
		q.onDeadLettered(m)
	case *Join:
		replyJoin(m, api.JoinReply{}, api.Errorf(api.CodeAlreadyExists, "subscription %q is a queue subscription", q.cfg.Subscription))
	default:
		q.onWake(q, m)
	}
	q.current = nil
	q.armTimer(q.nextDeadline())
}

// load resets the state and replays the log, if the subscription exists.
func (q *queueGroup) load() {
	q.state = newQueueState()
	q.batch = newQueueBatch()
	q.consumers = make(map[string]*consumerState)
	q.epoch = 0
	q.broken = nil
	if err := q.openLog(); err != nil {
		q.broken, q.brokenAt = err, q.clock.Now()
		q.logger.Error("queue subscription cannot load its state", "dir", q.cfg.Dir, "err", err)
	}
}

func (q *queueGroup) openLog() error {
	err := q.openStateLog(false, func(payload []byte) error {
		r, err := decodeQueueRecord(payload)
		if err != nil {
			return err
		}
		return q.state.apply(&r)
	})
	if err != nil || q.log == nil {
		return err // without a log: created by the first join
	}
	return q.maybeCompact()
}

func (q *queueGroup) appendRecord(r *queueRecord) (uint64, error) {
	return q.appendCounted(encodeQueueRecord(nil, r))
}

func (q *queueGroup) maybeCompact() error {
	return q.compactIfDue(q.state.Created, func() []byte { return encodeQueueRecord(nil, q.state.snapshot()) })
}

// end answers what is waiting with err (parked fetches empty) and releases
// this incarnation's timers and log.
func (q *queueGroup) end(err error) {
	if q.done == nil {
		return
	}
	replies := q.batch.replies
	q.batch = newQueueBatch()
	q.endIncarnation(q, err, replies, "closing queue subscription log")
}

func (q *queueGroup) refuse(msg any, err error) {
	switch m := msg.(type) {
	case *getQueueStats:
		if m.Reply != nil {
			m.Reply(QueueStats{}, err)
		}
	default:
		if !refuseAdmin(msg, err) {
			replyRequest(msg, err)
		}
	}
}

func (q *queueGroup) onJoin(m *queueJoin) {
	if !q.state.Created {
		if err := q.create(m); err != nil {
			m.Reply(api.JoinReply{}, err)
			return
		}
	} else if p := m.Policy.applyTo(q.state.Policy); p != q.state.Policy {
		q.state.Policy = p
		q.batch.policy = true
		q.logger.Info("queue policy changed", "consumer", m.Consumer, "policy", fmt.Sprintf("%+v", p))
	}
	c := q.consumers[m.Consumer]
	if c == nil {
		c = &consumerState{name: m.Consumer}
		q.consumers[m.Consumer] = c
		q.logger.Info("consumer joined", "consumer", m.Consumer, "consumers", len(q.consumers))
	}
	c.timeout = m.SessionTimeout
	if c.timeout <= 0 {
		c.timeout = q.cfg.DefaultSessionTimeout
	}
	c.lastSeen = q.clock.Now()
	reply := api.JoinReply{Subscription: q.cfg.Subscription, Consumer: m.Consumer, Consumers: len(q.consumers)}
	q.afterFlush(func(err error) {
		if m.Reply != nil {
			m.Reply(reply, err)
		}
	})
}

// create writes the subscription's first record: its policy and, starting
// at latest, the next offset of every active unit as its floor and every
// sealed segment as drained.
func (q *queueGroup) create(m *queueJoin) error {
	rec := &queueRecord{Kind: kindCreated, Start: startEarliest, Policy: m.Policy.applyTo(defaultQueuePolicy())}
	l := q.cfg.Source.Layout()
	for _, s := range l.Segments {
		if s.State == topology.StateDeleted || (m.Start == api.StartLatest && s.State == topology.StateSealed) {
			rec.Drained = append(rec.Drained, s.ID)
			continue
		}
		if m.Start != api.StartLatest {
			continue
		}
		rec.Start = startLatest
		for b := range s.Buckets {
			_, next, err := q.cfg.Source.Bounds(s.ID, b)
			if err != nil {
				return api.Errorf(api.CodeUnavailable, "subscription %q: reading the end of segment %d bucket %d: %v", q.cfg.Subscription, s.ID, b, err)
			}
			rec.Units = append(rec.Units, queueUnitRecord{Unit: topology.Unit{Segment: s.ID, Bucket: b}, Floor: next, Read: next})
		}
	}
	rec.normalize()
	if q.log == nil {
		if err := q.openStateLog(true, func([]byte) error { return errors.New("the log of a subscription being made holds records") }); err != nil {
			return api.Errorf(api.CodeUnavailable, "subscription %q: opening its log: %v", q.cfg.Subscription, err)
		}
	}
	if _, err := q.appendRecord(rec); err != nil {
		m.Reply(api.JoinReply{}, api.Errorf(api.CodeInternal, "subscription %q: writing its creation: %v", q.cfg.Subscription, err))
		q.failLog(err)
	}
	if err := q.state.apply(rec); err != nil {
		return api.Errorf(api.CodeInternal, "subscription %q: %v", q.cfg.Subscription, err)
	}
	q.logger.Info("queue subscription created", "start", rec.Start.String())
	return nil
}

// afterFlush queues reply for the end of the next flush.
func (q *queueGroup) afterFlush(reply func(error)) {
	q.batch.replies = append(q.batch.replies, reply)
	q.scheduleFlush()
}

func (q *queueGroup) scheduleFlush() {
	if q.batch.scheduled {
		return
	}
	q.batch.scheduled = true
	q.send(flushNow{})
}

// flushOrFail writes what changed since the last flush as one record (and
// the policy as another), then answers the replies waiting for it. A write
// failure answers them with the error and, with restart, restarts the
// actor, which reloads the durable state.
func (q *queueGroup) flushOrFail(restart bool) {
	q.batch.scheduled = false
	if q.batch.empty() {
		return
	}
	batch := q.batch
	q.batch = newQueueBatch()
	var recs []*queueRecord
	if batch.policy {
		recs = append(recs, &queueRecord{Kind: kindPolicy, Policy: q.state.Policy})
	}
	up := &queueRecord{Kind: kindUpdate, Drained: batch.drained}
	for unit := range batch.units {
		if _, ok := batch.touched[unit]; !ok {
			batch.touched[unit] = nil
		}
	}
	for unit, offsets := range batch.touched {
		if u := q.state.Units[unit]; u != nil {
			up.Units = append(up.Units, u.record(unit, offsets, false))
		}
	}
	if len(up.Units) > 0 || len(up.Drained) > 0 {
		up.normalize()
		recs = append(recs, up)
	}
	for _, r := range recs {
		if _, err := q.appendRecord(r); err != nil {
			failure := api.Errorf(api.CodeInternal, "subscription %q: writing its state: %v", q.cfg.Subscription, err)
			for _, reply := range batch.replies {
				reply(failure)
			}
			if !restart {
				q.logger.Error("queue subscription log write failed while stopping", "err", err)
				return
			}
			q.failLog(err)
		}
	}
	for _, reply := range batch.replies {
		reply(nil)
	}
	if err := q.maybeCompact(); err != nil {
		if !restart {
			q.logger.Error("compacting the queue subscription log while stopping", "err", err)
			return
		}
		q.failLog(err)
	}
}

// nextDeadline is the earliest of the consumers' deadlines (sessions,
// parked fetches), of the entries' (ack deadlines, redeliveries) and of
// the log's maintenance.
func (q *queueGroup) nextDeadline() time.Time {
	return earlier(earlier(consumersDeadline(q.consumers), queueDeadline(q.state.Units)), q.logDeadline())
}

// onDeadline declares dead the consumers silent past their session timeout
// (what they held is ready again), makes ready the entries past their ack
// deadline or redelivery time, serves the parked fetches with them, and
// answers empty those still parked whose wait is over.
func (q *queueGroup) onDeadline(now time.Time) {
	q.expireConsumers(now)
	q.expire(now.UnixMilli())
	q.serveParked()
	q.releaseParkedOver(q, now)
	q.maintainLog(now)
}

// expireConsumers declares dead every consumer silent for its session
// timeout.
func (q *queueGroup) expireConsumers(now time.Time) {
	dead := deadConsumers(q.consumers, now)
	for _, c := range dead {
		q.removeConsumer(c, "session timed out")
	}
	if len(dead) > 0 {
		q.serveParked()
	}
}

// removeConsumer takes c out: every message it holds is ready again at once.
func (q *queueGroup) removeConsumer(c *consumerState, why string) {
	if c.parked != nil {
		q.releaseParked(c, nil, nil)
	}
	redelivering, now := 0, q.clock.Now().UnixMilli()
	for unit, u := range q.state.Units {
		for i := range u.entries {
			if e := &u.entries[i]; e.state == entryInflight && e.owner == c.name {
				q.makeReady(unit, u, u.floor+uint64(i), e, now)
				redelivering++
			}
		}
	}
	delete(q.consumers, c.name)
	q.logger.Info("consumer removed", "consumer", c.name, "reason", why, "redelivering", redelivering, "consumers", len(q.consumers))
}
