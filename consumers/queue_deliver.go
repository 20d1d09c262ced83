package consumers

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/topology"
	"github.com/braidmq/braid/wal"
)

// This file is the delivery side of the queue group: which units exist,
// fetches, acks, nacks, expiry of deadlines and dead letters.

// QueueStats describes one queue subscription at one moment.
type QueueStats struct {
	Topic        string
	Subscription string
	Created      bool
	Start        string
	Epoch        uint64
	Consumers    []ConsumerStats // sorted by name; Assigned counts the messages the consumer holds
	// Backlog counts the messages not acknowledged, over every unit.
	Backlog uint64
	// Units is the number of units of segments neither drained nor deleted.
	Units int
	// InWindow counts the offsets the group keeps in memory (every unit's
	// window): at most Units x the window size, whatever the backlog.
	InWindow int
	// Inflight, Delayed and Ready count the window's entries held by a
	// consumer, waiting after a nack, and waiting for a (re)delivery.
	Inflight, Delayed, Ready int
	// DeadLettered counts the messages sent to the dead-letter topic since
	// the group started.
	DeadLettered uint64
	Drained      []topology.SegmentID
	// Policy is the subscription's redelivery policy.
	AckTimeout      time.Duration
	MaxDeliveries   int
	DeadLetterTopic string
	NackDelay       time.Duration
	MaxNackDelay    time.Duration
	NackBackoff     float64
}

// refresh brings the set of units up to date with the layout: every unit of
// a segment that is neither deleted nor drained, all at once (a queue
// subscription has no ordering rule). A sealed segment whose units are all
// acknowledged up to their final next offset, and a deleted one, become
// drained.
func (q *queueGroup) refresh() {
	if !q.state.Created {
		return
	}
	l := q.cfg.Source.Layout()
	q.epoch = l.Epoch
	var newly []topology.SegmentID
	for _, s := range l.Segments {
		if q.state.Drained[s.ID] {
			continue
		}
		if s.State == topology.StateDeleted {
			newly = append(newly, s.ID)
			continue
		}
		done := s.State == topology.StateSealed
		for b := range s.Buckets {
			unit := topology.Unit{Segment: s.ID, Bucket: b}
			u := q.state.Units[unit]
			if u == nil {
				u = &queueUnit{}
				q.state.Units[unit] = u
			}
			if !done {
				continue
			}
			first, next, err := q.cfg.Source.Bounds(s.ID, b)
			if err != nil {
				done = false
				continue
			}
			q.skipRetained(unit, u, first)
			done = u.floor >= next
		}
		if done {
			newly = append(newly, s.ID)
		}
	}
	if len(newly) == 0 {
		return
	}
	for _, id := range newly {
		q.state.Drained[id] = true
	}
	maps.DeleteFunc(q.state.Units, func(u topology.Unit, _ *queueUnit) bool { return q.state.Drained[u.Segment] })
	q.batch.drained = append(q.batch.drained, newly...)
	q.scheduleFlush()
	q.logger.Debug("segments drained", "segments", newly)
}

// skipRetained moves a unit's floor over offsets retention removed.
func (q *queueGroup) skipRetained(unit topology.Unit, u *queueUnit, first uint64) {
	if first > u.floor {
		u.raiseFloor(first)
		q.batch.units[unit] = true
	}
}

func (q *queueGroup) onFetch(m *Fetch) {
	c := q.consumers[m.Consumer]
	if c == nil {
		replyFetch(m, nil, 0, api.Errorf(api.CodeConsumerUnknown, "consumer %q is not in queue subscription %q (expired or never joined); join again", m.Consumer, q.cfg.Subscription))
		return
	}
	c.lastSeen = q.clock.Now()
	if c.parked != nil {
		q.releaseParked(c, nil, nil)
	}
	appended := q.cfg.Source.Appended()
	q.refresh()
	msgs, err := q.collect(c, m.Max, m.MaxBytes)
	if len(msgs) > 0 {
		q.replyFetchDurable(m, msgs)
		return
	}
	if err != nil || m.Wait <= 0 {
		replyFetch(m, nil, 0, err)
		return
	}
	q.park(c, m)
	q.watch(appended)
}

// replyFetchDurable answers a fetch once its deliveries are recorded.
func (q *queueGroup) replyFetchDurable(m *Fetch, msgs []api.Message) {
	q.afterFlush(func(err error) {
		if err != nil {
			replyFetch(m, nil, 0, err)
			return
		}
		replyFetch(m, msgs, 0, nil)
	})
}

func (q *queueGroup) releaseParked(c *consumerState, msgs []api.Message, err error) {
	p := c.parked
	c.parked = nil
	c.lastSeen = q.clock.Now()
	replyFetch(p.req, msgs, 0, err)
}

// serveParked retries every parked fetch.
func (q *queueGroup) serveParked() {
	parked := q.parkedConsumers()
	if len(parked) == 0 {
		return
	}
	appended := q.cfg.Source.Appended()
	q.refresh()
	waiting := false
	for _, c := range parked {
		msgs, err := q.collect(c, c.parked.req.Max, c.parked.req.MaxBytes)
		switch {
		case len(msgs) > 0:
			p := c.parked
			c.parked = nil
			c.lastSeen = q.clock.Now()
			q.replyFetchDurable(p.req, msgs)
		case err != nil:
			q.releaseParked(c, nil, err)
		default:
			waiting = true
		}
	}
	if waiting {
		q.watch(appended)
	}
}

// expire makes ready again the entries whose time has come at now (unix
// ms), as dueOffsets decides: inflight past their ack deadline, delayed
// whose redelivery time came.
func (q *queueGroup) expire(now int64) {
	for unit, u := range q.state.Units {
		if !u.mayBeDue(now) {
			continue
		}
		due, next := u.dueOffsets(now, q.due[:0])
		u.minDue = next // before makeReady, which may note a dead-letter retry
		for _, off := range due {
			q.makeReady(unit, u, off, u.entry(off), now)
		}
		q.due = due
	}
}

// makeReady makes an entry ready to deliver again or, past the max
// deliveries, sends it to the dead-letter topic at once.
func (q *queueGroup) makeReady(unit topology.Unit, u *queueUnit, off uint64, e *queueEntry, now int64) {
	if limit := q.state.Policy.MaxDeliveries; limit > 0 && e.deliveries >= limit {
		q.deadLetter(unit, u, off, e, now)
		return
	}
	u.setState(e, entryReady, 0)
}

// collect hands out up to maxMsgs messages and about maxBytes of payload to
// c, round-robin over every unit in fair shares, starting from a different
// unit each fetch.
func (q *queueGroup) collect(c *consumerState, maxMsgs, maxBytes int) ([]api.Message, error) {
	if len(q.state.Units) == 0 {
		return nil, nil
	}
	now := q.clock.Now().UnixMilli()
	q.expire(now)
	units := slices.SortedFunc(maps.Keys(q.state.Units), compareUnits)
	start := q.rr % len(units)
	q.rr++
	active := slices.Concat(units[start:], units[:start])
	var out []api.Message
	bytes := 0
	full := func() bool { return len(out) >= maxMsgs || (len(out) > 0 && bytes >= maxBytes) }
	firstErr := FairShares(active, maxMsgs, func() int { return len(out) }, full, func(unit topology.Unit, n int) (bool, error) {
		left, err := q.take(c, unit, n, maxBytes, now, &out, &bytes)
		if err != nil {
			q.logger.Warn("reading a unit for a queue fetch", "segment", unit.Segment, "bucket", unit.Bucket, "err", err)
		}
		return left, err
	})
	if len(out) == 0 && firstErr != nil {
		return nil, api.Errorf(api.CodeUnavailable, "reading queue subscription %q: %v", q.cfg.Subscription, firstErr)
	}
	return out, nil
}

// take hands up to n messages of one unit to c: ready entries first, in
// offset order, then messages never delivered while the window has room. It
// reports whether the unit may have more for this fetch.
func (q *queueGroup) take(c *consumerState, unit topology.Unit, n, maxBytes int, now int64, out *[]api.Message, bytes *int) (bool, error) {
	u := q.state.Units[unit]
	first, next, err := q.cfg.Source.Bounds(unit.Segment, unit.Bucket)
	if err != nil {
		return false, err
	}
	q.skipRetained(unit, u, first)
	due := q.state.Policy.ackDeadline(now)
	taken := 0
	fits := func(payload int) bool { return len(*out) == 0 || *bytes+payload <= maxBytes }
	for i := 0; u.ready > 0 && i < len(u.entries) && taken < n; i++ {
		e := &u.entries[i]
		if e.state != entryReady {
			continue
		}
		off := u.floor + uint64(i)
		if limit := q.state.Policy.MaxDeliveries; limit > 0 && e.deliveries >= limit {
			q.deadLetter(unit, u, off, e, now)
			continue
		}
		recs, err := q.cfg.Source.Read(unit.Segment, unit.Bucket, off, 1, max(maxBytes-*bytes, 1))
		if h, ok := holeAt(err, off); ok {
			q.skipLostEntry(unit, u, off, e, h)
			continue
		}
		if err != nil || len(recs) == 0 {
			return false, err
		}
		if !fits(len(recs[0].Payload)) {
			return false, nil
		}
		e.deliveries++
		u.setState(e, entryInflight, due)
		e.owner = c.name
		q.batch.touch(unit, off)
		*out = append(*out, queueMessage(unit, off, e.deliveries, &recs[0]))
		*bytes += len(recs[0].Payload)
		taken++
	}
	limit := min(next, u.floor+uint64(q.cfg.Queue.window))
	if taken >= n || u.read() >= limit {
		return taken >= n && (u.ready > 0 || u.read() < limit), nil
	}
	from := u.read()
	recs, err := q.cfg.Source.Read(unit.Segment, unit.Bucket, from, min(n-taken, int(limit-from)), max(maxBytes-*bytes, 1))
	if len(recs) == 0 {
		if h, ok := holeAt(err, from); ok {
			q.skipLost(unit, u, h, limit)
			return u.read() < next, nil
		}
		return false, err
	}
	for i := range recs {
		if !fits(len(recs[i].Payload)) {
			break
		}
		off := u.read()
		u.extend(off+1, entryInflight, due, c.name)
		*out = append(*out, queueMessage(unit, off, 1, &recs[i]))
		*bytes += len(recs[i].Payload)
		taken++
	}
	q.batch.units[unit] = true
	return taken == n && u.read() < limit, nil
}

func queueMessage(unit topology.Unit, off uint64, deliveries uint32, rec *wal.Record) api.Message {
	return api.Message{
		Segment: uint64(unit.Segment), Bucket: unit.Bucket, Offset: off, Deliveries: deliveries,
		Time: rec.Timestamp, Key: rec.Key, Headers: apiHeaders(rec.Headers), Payload: rec.Payload,
	}
}

// deadLetter sends the message at off, which must not be delivered again,
// to the dead-letter topic; it is acknowledged once that append is durable.
func (q *queueGroup) deadLetter(unit topology.Unit, u *queueUnit, off uint64, e *queueEntry, now int64) {
	recs, err := q.cfg.Source.Read(unit.Segment, unit.Bucket, off, 1, 0)
	if h, ok := holeAt(err, off); ok {
		q.skipLostEntry(unit, u, off, e, h)
		return
	}
	if err != nil || len(recs) == 0 {
		q.logger.Warn("reading a message for the dead-letter topic", "segment", unit.Segment, "bucket", unit.Bucket, "offset", off, "err", err)
		u.setState(e, entryDelayed, now+deadLetterRetry.Milliseconds())
		return
	}
	u.setState(e, entryDead, 0)
	topic := q.state.Policy.DeadLetterTopic
	if topic == "" {
		topic, err = DefaultDeadLetterTopic(q.cfg.Source.Topic())
	}
	send := q.cfg.Queue.deadLetter
	if send == nil || err != nil {
		q.logger.Warn("no dead-letter topic; the message is dropped", "segment", unit.Segment, "bucket", unit.Bucket, "offset", off, "err", err)
		q.send(deadLettered{incarnation: q.incarnation, unit: unit, offset: off})
		return
	}
	rec := recs[0]
	hs := apiHeaders(rec.Headers)
	hs = append(hs,
		api.Header{Name: api.HeaderDLQOrigin, Value: []byte(q.cfg.Source.Topic())},
		api.Header{Name: api.HeaderDLQSubscription, Value: []byte(q.cfg.Subscription)},
		api.Header{Name: api.HeaderDLQPosition, Value: fmt.Appendf(nil, "%d/%d/%d", unit.Segment, unit.Bucket, off)},
		api.Header{Name: api.HeaderDLQReason, Value: []byte(api.DLQReasonMaxDeliveries)},
		api.Header{Name: api.HeaderDLQDeliveries, Value: strconv.AppendUint(nil, uint64(e.deliveries), 10)},
	)
	out := api.Record{Key: rec.Key, Time: rec.Timestamp, Headers: hs, Payload: rec.Payload}
	inc := q.incarnation
	go send(topic, out, func(err error) {
		q.send(deadLettered{incarnation: inc, unit: unit, offset: off, err: err})
	})
}

func (q *queueGroup) onDeadLettered(m deadLettered) {
	if m.incarnation != q.incarnation {
		return
	}
	u := q.state.Units[m.unit]
	if u == nil {
		return
	}
	e := u.entry(m.offset)
	if e == nil || e.state != entryDead {
		return
	}
	if m.err != nil {
		q.logger.Warn("dead-letter append failed; retrying", "segment", m.unit.Segment, "bucket", m.unit.Bucket, "offset", m.offset, "err", m.err)
		u.setState(e, entryDelayed, q.clock.Now().Add(deadLetterRetry).UnixMilli())
		return
	}
	u.setState(e, entryAcked, 0)
	q.deadLettered++
	q.batch.touch(m.unit, m.offset)
	q.batch.units[m.unit] = true
	u.advanceFloor()
	q.scheduleFlush()
}

// checkPositions refuses, with INVALID_ARGUMENT, the first position that
// was never delivered: of no unit of the subscription, at or past its
// unit's next offset to deliver, or at or past the final end of its unit
// when the segment is drained.
func (q *queueGroup) checkPositions(ps []api.Position) error {
	for _, p := range ps {
		if q.state.Drained[topology.SegmentID(p.Segment)] {
			if err := q.drainedPosition(p); err != nil {
				return err
			}
			continue
		}
		if _, _, _, err := q.positionEntry(p); err != nil {
			return err
		}
	}
	return nil
}

// positionEntry finds the window entry of a position. It fails for a
// position of a segment not drained that was never delivered; a position
// already acknowledged (below the floor, or of a drained segment: see
// drainedPosition) gives a nil entry and no error.
func (q *queueGroup) positionEntry(p api.Position) (topology.Unit, *queueUnit, *queueEntry, error) {
	unit := topology.Unit{Segment: topology.SegmentID(p.Segment), Bucket: p.Bucket}
	if q.state.Drained[unit.Segment] {
		return unit, nil, nil, nil
	}
	u := q.state.Units[unit]
	switch {
	case u == nil:
		return unit, nil, nil, api.Errorf(api.CodeInvalidArgument, "segment %d bucket %d is not a unit of queue subscription %q", p.Segment, p.Bucket, q.cfg.Subscription)
	case p.Offset < u.floor:
		return unit, nil, nil, nil
	case p.Offset >= u.read():
		return unit, nil, nil, api.Errorf(api.CodeInvalidArgument, "segment %d bucket %d offset %d was never delivered (next offset to deliver is %d)", p.Segment, p.Bucket, p.Offset, u.read())
	}
	return unit, u, u.entry(p.Offset), nil
}

// drainedPosition checks a position of a drained segment: every offset
// below its unit's final next offset was delivered (or removed by
// retention) and acknowledged, and none at or past it ever existed. A
// segment whose bounds are no longer known (deleted) is taken on trust, as
// it holds nothing left to deliver.
func (q *queueGroup) drainedPosition(p api.Position) error {
	s, ok := q.cfg.Source.Layout().Segment(topology.SegmentID(p.Segment))
	if !ok || s.State == topology.StateDeleted {
		return nil
	}
	if p.Bucket < 0 || p.Bucket >= s.Buckets {
		return api.Errorf(api.CodeInvalidArgument, "segment %d bucket %d is not a unit of queue subscription %q", p.Segment, p.Bucket, q.cfg.Subscription)
	}
	_, next, err := q.cfg.Source.Bounds(s.ID, p.Bucket)
	if err != nil {
		return nil
	}
	if p.Offset >= next {
		return api.Errorf(api.CodeInvalidArgument, "segment %d bucket %d offset %d was never delivered (the segment is drained; the unit ends at offset %d)", p.Segment, p.Bucket, p.Offset, next)
	}
	return nil
}

func (q *queueGroup) knownConsumer(name string) (*consumerState, error) {
	c := q.consumers[name]
	if c == nil {
		return nil, api.Errorf(api.CodeConsumerUnknown, "consumer %q is not in queue subscription %q (expired or never joined); join again", name, q.cfg.Subscription)
	}
	c.lastSeen = q.clock.Now()
	return c, nil
}

// onAck acknowledges each position alone, whoever holds it: the work is
// done. Every position is checked before any is taken.
func (q *queueGroup) onAck(m *Ack) {
	if _, err := q.knownConsumer(m.Consumer); err != nil {
		replyErr(m.Reply, err)
		return
	}
	q.refresh()
	if err := q.checkPositions(m.Acks); err != nil {
		replyErr(m.Reply, err)
		return
	}
	for _, p := range m.Acks {
		unit, u, e, _ := q.positionEntry(p)
		if e == nil || e.state == entryAcked {
			continue
		}
		u.setState(e, entryAcked, 0)
		q.batch.touch(unit, p.Offset)
		q.batch.units[unit] = true
		u.advanceFloor()
	}
	if m.Reply != nil {
		q.afterFlush(m.Reply)
	} else {
		q.scheduleFlush()
	}
}

// onNack schedules the redelivery of each position the consumer holds;
// positions it does not hold (acked, timed out, never its) are ignored.
func (q *queueGroup) onNack(m *queueNack) {
	c, err := q.knownConsumer(m.Consumer)
	if err != nil {
		replyErr(m.Reply, err)
		return
	}
	q.refresh()
	if err := q.checkPositions(m.Nacks); err != nil {
		replyErr(m.Reply, err)
		return
	}
	now := q.clock.Now()
	for _, p := range m.Nacks {
		unit, u, e, _ := q.positionEntry(p)
		if e == nil || e.state != entryInflight || e.owner != c.name {
			continue
		}
		if at := q.state.Policy.redeliverAt(e.deliveries, m.Delay, now); at == 0 {
			q.makeReady(unit, u, p.Offset, e, now.UnixMilli())
		} else {
			u.setState(e, entryDelayed, at)
		}
		q.batch.touch(unit, p.Offset)
	}
	if m.Reply != nil {
		q.afterFlush(m.Reply)
	} else {
		q.scheduleFlush()
	}
	q.serveParked()
}

func (q *queueGroup) onStats(m *getQueueStats) {
	q.refresh()
	p := q.state.Policy
	st := QueueStats{
		Topic: q.cfg.Source.Topic(), Subscription: q.cfg.Subscription, Created: q.state.Created,
		Start: q.state.Start.String(), Epoch: q.cfg.Source.Layout().Epoch, Units: len(q.state.Units),
		DeadLettered: q.deadLettered, Drained: slices.Sorted(maps.Keys(q.state.Drained)),
		AckTimeout: p.AckTimeout, MaxDeliveries: int(p.MaxDeliveries), DeadLetterTopic: p.DeadLetterTopic,
		NackDelay: p.NackDelay, MaxNackDelay: p.MaxNackDelay, NackBackoff: p.NackBackoff,
	}
	if st.DeadLetterTopic == "" {
		st.DeadLetterTopic, _ = DefaultDeadLetterTopic(st.Topic)
	}
	held := make(map[string]int)
	for unit, u := range q.state.Units {
		st.InWindow += len(u.entries)
		for i := range u.entries {
			switch e := &u.entries[i]; e.state {
			case entryInflight:
				st.Inflight++
				held[e.owner]++
			case entryDelayed:
				st.Delayed++
			case entryReady:
				st.Ready++
			}
		}
		info := q.unitInfo(unit, u) // queue_seek.go: as subscription.list shows it
		st.Backlog += info.Lag - min(info.Lag, info.AckedAhead)
	}
	for _, c := range q.consumers {
		st.Consumers = append(st.Consumers, ConsumerStats{Name: c.name, Assigned: held[c.name], Idle: held[c.name] == 0,
			SessionTimeout: c.timeout, LastSeen: c.lastSeen, Parked: c.parked != nil})
	}
	slices.SortFunc(st.Consumers, func(a, b ConsumerStats) int { return cmp.Compare(a.Name, b.Name) })
	if m.Reply != nil {
		m.Reply(st, nil)
	}
}
