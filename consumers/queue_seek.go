package consumers

import (
	"cmp"
	"maps"
	"slices"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/topology"
)

// The queue group's side of subscription management (subscriptions.go):
// its positions, a seek, a delete.

// preAccept is group.preAccept for a queue group.
func (q *queueGroup) preAccept(msg any) bool {
	if m, ok := msg.(*deleteSub); ok {
		q.current = m
		q.onDelete(m)
		q.current = nil
		return true
	}
	return q.screen(q, msg)
}

// attached returns the live consumers, by name.
func (q *queueGroup) attached() []attachedConsumer {
	var out []attachedConsumer
	for _, c := range q.consumers {
		out = append(out, attachedConsumer{name: c.name, timeout: c.timeout})
	}
	return sortAttached(out)
}

func (q *queueGroup) onInfo(m *getInfo) {
	if !q.state.Created {
		m.Reply(api.SubscriptionInfo{}, q.errNoSubscription())
		return
	}
	m.Reply(q.info(), nil)
}

// info is the subscription's positions now: per unit its cumulative point
// as acked, per consumer the messages it holds.
func (q *queueGroup) info() api.SubscriptionInfo {
	q.refresh()
	inf := api.SubscriptionInfo{
		Name: q.cfg.Subscription, Kind: api.SubscriptionQueue, Start: q.state.Start.String(), Epoch: q.epoch,
		Consumers: []api.SubscriptionConsumer{}, Units: []api.SubscriptionUnit{}, Drained: []uint64{},
	}
	held := make(map[string]int)
	for _, unit := range slices.SortedFunc(maps.Keys(q.state.Units), compareUnits) {
		u := q.state.Units[unit]
		info := q.unitInfo(unit, u)
		inf.Units = append(inf.Units, info)
		inf.Backlog += info.Lag - min(info.Lag, info.AckedAhead)
		for i := range u.entries {
			if e := &u.entries[i]; e.state == entryInflight {
				held[e.owner]++
			}
		}
	}
	for _, c := range q.consumers {
		inf.Consumers = append(inf.Consumers, api.SubscriptionConsumer{Name: c.name, Inflight: held[c.name], SessionTimeout: c.timeout.String()})
	}
	slices.SortFunc(inf.Consumers, func(a, b api.SubscriptionConsumer) int { return cmp.Compare(a.Name, b.Name) })
	for _, id := range slices.Sorted(maps.Keys(q.state.Drained)) {
		inf.Drained = append(inf.Drained, uint64(id))
	}
	return inf
}

// unitInfo is the position of one unit: acked is its floor (or its first
// retained offset, when retention removed more), and the entries of its
// window past that are counted as acked ahead or inflight.
func (q *queueGroup) unitInfo(unit topology.Unit, u *queueUnit) api.SubscriptionUnit {
	info := api.SubscriptionUnit{Segment: uint64(unit.Segment), Bucket: unit.Bucket, Acked: u.floor}
	first, next, err := q.cfg.Source.Bounds(unit.Segment, unit.Bucket)
	if err != nil {
		info.Unavailable = true
	} else {
		info.Acked, info.Next = max(u.floor, first), next
		if next > info.Acked {
			info.Lag = next - info.Acked
		}
	}
	for i := range u.entries {
		if u.floor+uint64(i) < info.Acked {
			continue
		}
		switch u.entries[i].state {
		case entryAcked:
			info.AckedAhead++
		case entryInflight:
			info.Inflight++
		}
	}
	return info
}

// onSeek moves the subscription's positions: what is pending is made
// durable, the plan is written as a snapshot of the whole state, and the
// units it moves start over from their new positions, their windows
// forgotten. Consumers stay (forced): the units it keeps keep what they
// hold, and they are delivered from the new positions.
func (q *queueGroup) onSeek(m *seekSub) {
	fail := func(err error) { m.Reply(api.SubscriptionSeekReply{}, err) }
	if !q.state.Created {
		fail(q.errNoSubscription())
		return
	}
	if attached := q.attached(); len(attached) > 0 && !m.Force {
		fail(q.errAttached("seek", attached))
		return
	}
	if !q.batch.empty() {
		q.flushOrFail(true)
	}
	plan, err := planSeek(q.cfg.Source, q.cfg.Source.Layout(), m.Target, q.state.Drained)
	if err != nil {
		fail(err)
		return
	}
	next := plan.applyToQueue(q.state)
	if err := q.compactTo(encodeQueueRecord(nil, next.snapshot())); err != nil {
		fail(api.Errorf(api.CodeInternal, "subscription %q: writing its new positions: %v", q.cfg.Subscription, err))
		q.failLog(err)
	}
	q.state = next
	q.logger.Info("queue subscription moved by an admin", "target", m.Target.String(), "consumers", len(q.consumers))
	m.Reply(api.SubscriptionSeekReply{SubscriptionInfo: q.info(), Detached: []string{}}, nil)
	q.serveParked()
}

// applyToQueue returns the queue subscription state cur becomes: its
// start and policy, the plan's drained segments, the units it keeps as
// they are (their windows too), the units it sets at their new floor with
// an empty window; the others start at their first retained offset.
func (p seekPlan) applyToQueue(cur queueState) queueState {
	next := newQueueState()
	next.Created, next.Start, next.Policy = true, cur.Start, cur.Policy
	maps.Copy(next.Drained, p.drained)
	for unit, u := range cur.Units {
		if p.keeps(unit) {
			next.Units[unit] = u
		}
	}
	for unit, off := range p.set {
		if !next.Drained[unit.Segment] {
			next.Units[unit] = &queueUnit{floor: off}
		}
	}
	return next
}

// onDelete is group.onDelete for a queue group.
func (q *queueGroup) onDelete(m *deleteSub) {
	switch {
	case q.retired != nil:
		m.Reply(nil, q.retired)
		return
	case q.broken == nil && !q.state.Created:
		m.Reply(nil, q.errNoSubscription())
		return
	}
	attached := q.attached()
	if len(attached) > 0 && !m.Force {
		m.Reply(nil, q.errAttached("delete", attached))
		return
	}
	if err := q.retire(); err != nil {
		m.Reply(nil, err)
		return
	}
	notice := q.deletedNotice()
	for _, reply := range q.batch.replies {
		reply(notice)
	}
	q.batch = newQueueBatch()
	for _, c := range q.consumers {
		if c.parked != nil {
			q.releaseParked(c, nil, notice)
		}
	}
	q.notify(attached, notice)
	clear(q.consumers)
	q.retired = notice
	m.Reply(attachedNames(attached), nil)
}
