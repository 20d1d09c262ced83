package consumers

import (
	"cmp"
	"fmt"
	"maps"
	"slices"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/topology"
)

// Where a seek puts a subscription (api.SubscriptionSeekRequest), for both
// kinds of group: planSeek turns a target into a seekPlan over the layout
// and the bucket logs, and the group applies it to its own state.

// seekPlan is the subscription's positions after a seek.
type seekPlan struct {
	// drained is the whole set of drained segments after the seek.
	drained map[topology.SegmentID]bool
	// set puts units at an offset: their next offset not acknowledged,
	// nothing past it acknowledged.
	set map[topology.Unit]uint64
	// all: every unit not in set starts at its first retained offset.
	// Otherwise the units in reset do, and every other unit keeps its
	// state.
	all   bool
	reset map[topology.Unit]bool
}

// planSeek plans a seek of a subscription whose drained segments are
// drained, over layout l of src. It reads the bounds of the units it
// moves, and their records for a time (a binary search). A message
// position of no unit is refused (SEGMENT_NOT_FOUND for a segment the
// layout does not have, INVALID_ARGUMENT otherwise), a read that fails
// with UNAVAILABLE.
func planSeek(src Source, l topology.Layout, t seekTarget, drained map[topology.SegmentID]bool) (seekPlan, error) {
	p := seekPlan{drained: make(map[topology.SegmentID]bool), set: make(map[topology.Unit]uint64), reset: make(map[topology.Unit]bool)}
	if t.message != nil {
		return planSeekMessage(src, l, *t.message, drained, p)
	}
	p.all = true
	for _, s := range l.Segments {
		if s.State == topology.StateDeleted {
			p.drained[s.ID] = true
			continue
		}
		switch {
		case t.to == api.SeekEarliest:
		case t.to == api.SeekLatest:
			if s.State == topology.StateSealed {
				p.drained[s.ID] = true
				continue
			}
			for b := range s.Buckets {
				_, next, err := unitBounds(src, s.ID, b)
				if err != nil {
					return seekPlan{}, err
				}
				p.set[topology.Unit{Segment: s.ID, Bucket: b}] = next
			}
		default: // a time
			offsets := make([]uint64, s.Buckets)
			done := s.State == topology.StateSealed
			for b := range s.Buckets {
				first, next, err := unitBounds(src, s.ID, b)
				if err != nil {
					return seekPlan{}, err
				}
				if offsets[b], err = offsetAtTime(src, s.ID, b, first, next, t.time); err != nil {
					return seekPlan{}, err
				}
				done = done && offsets[b] >= next
			}
			if done {
				p.drained[s.ID] = true // nothing of it is at or after the time
				continue
			}
			for b, off := range offsets {
				p.set[topology.Unit{Segment: s.ID, Bucket: b}] = off
			}
		}
	}
	return p, nil
}

// planSeekMessage plans a seek to a message: its unit at its offset, the
// ancestors of its segment drained, its descendants at their start and
// not drained, the other buckets of its segment at their next offset if
// the segment was drained, every other unit as it was.
func planSeekMessage(src Source, l topology.Layout, m api.Position, drained map[topology.SegmentID]bool, p seekPlan) (seekPlan, error) {
	s, ok := l.Segment(topology.SegmentID(m.Segment))
	switch {
	case !ok:
		return seekPlan{}, api.Errorf(api.CodeSegmentNotFound, "message of segment %d: the topic has no such segment", m.Segment)
	case s.State == topology.StateDeleted:
		return seekPlan{}, api.Errorf(api.CodeInvalidArgument, "message of segment %d: the segment was deleted by retention", m.Segment)
	case m.Bucket < 0 || m.Bucket >= s.Buckets:
		return seekPlan{}, api.Errorf(api.CodeInvalidArgument, "message of segment %d bucket %d: the segment has buckets 0 to %d", m.Segment, m.Bucket, s.Buckets-1)
	}
	first, next, err := unitBounds(src, s.ID, m.Bucket)
	if err != nil {
		return seekPlan{}, err
	}
	if m.Offset < first || m.Offset > next {
		return seekPlan{}, api.Errorf(api.CodeInvalidArgument, "message of segment %d bucket %d at offset %d: the unit holds offsets %d to %d (its first retained offset to its next offset)",
			m.Segment, m.Bucket, m.Offset, first, next)
	}
	maps.Copy(p.drained, drained)
	wasDrained := drained[s.ID]
	delete(p.drained, s.ID)
	for _, a := range l.Ancestors(s.ID) {
		p.drained[a] = true
	}
	for _, d := range descendants(l, s.ID) {
		if ds, _ := l.Segment(d); ds.State != topology.StateDeleted {
			delete(p.drained, d)
			for b := range ds.Buckets {
				p.reset[topology.Unit{Segment: d, Bucket: b}] = true
			}
		}
	}
	for b := range s.Buckets {
		u := topology.Unit{Segment: s.ID, Bucket: b}
		switch {
		case b == m.Bucket:
			p.set[u] = m.Offset
		case wasDrained:
			_, end, err := unitBounds(src, s.ID, b)
			if err != nil {
				return seekPlan{}, err
			}
			p.set[u] = end
		}
	}
	return p, nil
}

// descendants returns every descendant of id, ascending.
func descendants(l topology.Layout, id topology.SegmentID) []topology.SegmentID {
	seen := make(map[topology.SegmentID]bool)
	stack := []topology.SegmentID{id}
	for len(stack) > 0 {
		s, _ := l.Segment(stack[len(stack)-1])
		stack = stack[:len(stack)-1]
		for _, c := range s.Children {
			if !seen[c] {
				seen[c] = true
				stack = append(stack, c)
			}
		}
	}
	return slices.Sorted(maps.Keys(seen))
}

// keeps reports whether a unit keeps its state through the seek.
func (p seekPlan) keeps(u topology.Unit) bool {
	_, set := p.set[u]
	return !p.all && !set && !p.reset[u] && !p.drained[u.Segment]
}

// unitBounds is Source.Bounds, failing with UNAVAILABLE.
func unitBounds(src Source, seg topology.SegmentID, bucket int) (first, next uint64, err error) {
	first, next, err = src.Bounds(seg, bucket)
	if err != nil {
		return 0, 0, api.Errorf(api.CodeUnavailable, "reading the offsets of segment %d bucket %d: %v", seg, bucket, err)
	}
	return first, next, nil
}

// offsetAtTime binary-searches [first, next) of a unit for the first
// offset whose record time is at or after ts (next when none is), as
// read.offsets does: exact when times do not decrease along the unit.
func offsetAtTime(src Source, seg topology.SegmentID, bucket int, first, next uint64, ts int64) (uint64, error) {
	lo, hi := first, next
	for lo < hi {
		mid := lo + (hi-lo)/2
		recs, err := src.Read(seg, bucket, mid, 1, 0)
		if err != nil {
			return 0, api.Errorf(api.CodeUnavailable, "reading segment %d bucket %d at offset %d: %v", seg, bucket, mid, err)
		}
		if len(recs) == 0 || recs[0].Timestamp >= ts {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo, nil
}

// applyTo returns the stream subscription state cur becomes: its start,
// the plan's drained segments and cursors, no owners.
func (p seekPlan) applyTo(cur subscriptionState) subscriptionState {
	next := newSubscriptionState()
	next.Created, next.Start = true, cur.Start
	maps.Copy(next.Drained, p.drained)
	for u, c := range cur.Cursors {
		if p.keeps(u) {
			next.Cursors[u] = c
		}
	}
	for u, off := range p.set {
		if !next.Drained[u.Segment] {
			next.Cursors[u] = off
		}
	}
	return next
}

// The stream group's side.

// preAccept handles what comes before a request is accepted: a delete
// (also of a group whose log does not load), and what screen refuses. It
// reports whether msg was handled.
func (g *group) preAccept(msg any) bool {
	if m, ok := msg.(*deleteSub); ok {
		g.current = m
		g.onDelete(m)
		g.current = nil
		return true
	}
	return g.screen(g, msg)
}

// attached returns the consumers a seek or a delete would detach: the live
// ones and the previous owners awaited since a restart, by name.
func (g *group) attached() []attachedConsumer {
	var out []attachedConsumer
	for _, c := range g.consumers {
		out = append(out, attachedConsumer{name: c.name, timeout: c.timeout})
	}
	for name := range g.awaiting {
		if g.consumers[name] == nil {
			timeout := g.state.Sessions[name]
			if timeout <= 0 {
				timeout = g.cfg.DefaultSessionTimeout
			}
			out = append(out, attachedConsumer{name: name, timeout: timeout})
		}
	}
	return sortAttached(out)
}

// detach takes every attached consumer out, telling it err (its parked
// fetch at once, its later requests by a notice).
func (g *group) detach(as []attachedConsumer, err *api.Error) {
	for _, a := range as {
		if c := g.consumers[a.name]; c != nil && c.parked != nil {
			g.releaseParked(c, nil, err)
		}
	}
	g.notify(as, err)
	clear(g.consumers)
	clear(g.awaiting)
}

func (g *group) onInfo(m *getInfo) {
	if !g.state.Created {
		m.Reply(api.SubscriptionInfo{}, g.errNoSubscription())
		return
	}
	m.Reply(g.info(), nil)
}

// info is the subscription's positions now.
func (g *group) info() api.SubscriptionInfo {
	g.refresh()
	inf := api.SubscriptionInfo{
		Name: g.cfg.Subscription, Kind: api.SubscriptionStream, Start: g.state.Start.String(),
		ReadCompacted: g.state.Start.compacted(), Epoch: g.layout.Epoch,
		Consumers: []api.SubscriptionConsumer{}, Drained: []uint64{},
	}
	inf.Units = g.unitInfos()
	byName := make(map[string]*api.SubscriptionConsumer, len(g.consumers))
	for _, c := range g.consumers {
		inf.Consumers = append(inf.Consumers, api.SubscriptionConsumer{Name: c.name, SessionTimeout: c.timeout.String()})
	}
	slices.SortFunc(inf.Consumers, func(a, b api.SubscriptionConsumer) int { return cmp.Compare(a.Name, b.Name) })
	for i := range inf.Consumers {
		byName[inf.Consumers[i].Name] = &inf.Consumers[i]
	}
	for _, u := range inf.Units {
		inf.Backlog += u.Lag
		if c := byName[u.Owner]; c != nil {
			c.Units = append(c.Units, api.UnitID{Segment: u.Segment, Bucket: u.Bucket})
			c.Lag += u.Lag
		}
	}
	for _, id := range slices.Sorted(maps.Keys(g.state.Drained)) {
		inf.Drained = append(inf.Drained, uint64(id))
	}
	return inf
}

// unitInfos returns the position of every unit of the segments neither
// drained nor deleted, by segment then bucket: what Stats sums as the
// backlog. Call it after refresh.
func (g *group) unitInfos() []api.SubscriptionUnit {
	out := []api.SubscriptionUnit{}
	for _, s := range g.layout.Segments {
		if s.State == topology.StateDeleted || g.state.Drained[s.ID] {
			continue
		}
		for b := range s.Buckets {
			u := topology.Unit{Segment: s.ID, Bucket: b}
			info := api.SubscriptionUnit{Segment: uint64(s.ID), Bucket: b, Acked: g.state.Cursors[u], Withheld: true}
			if us := g.units[u]; us != nil {
				info.Acked, info.Owner, info.Withheld = us.acked, us.owner, false
			}
			first, next, err := g.cfg.Source.Bounds(s.ID, b)
			if err != nil {
				info.Unavailable = true
				out = append(out, info)
				continue
			}
			info.Acked, info.Next = max(info.Acked, first), next
			if next > info.Acked {
				info.Lag = next - info.Acked
			}
			out = append(out, info)
		}
	}
	return out
}

// onSeek moves the subscription's positions: the pending acks are made
// durable, the plan is written as a snapshot of the whole state (it
// replaces what the log held), and the group starts over from it: every
// unit without an owner, delivery from the new positions.
func (g *group) onSeek(m *seekSub) {
	fail := func(err error) { m.Reply(api.SubscriptionSeekReply{}, err) }
	if !g.state.Created {
		fail(g.errNoSubscription())
		return
	}
	attached := g.attached()
	if len(attached) > 0 && !m.Force {
		fail(g.errAttached("seek", attached))
		return
	}
	if !g.batch.empty() {
		g.flushOrFail(true)
	}
	plan, err := planSeek(g.cfg.Source, g.cfg.Source.Layout(), m.Target, g.state.Drained)
	if err != nil {
		fail(err)
		return
	}
	next := plan.applyTo(g.state)
	if err := g.compactTo(encodeRecord(nil, next.snapshot())); err != nil {
		fail(api.Errorf(api.CodeInternal, "subscription %q: writing its new positions: %v", g.cfg.Subscription, err))
		g.failLog(err)
	}
	g.state = next
	g.detach(attached, g.seekNotice())
	clear(g.units)
	clear(g.targets)
	clear(g.restoredUntil)
	g.ownersChanged, g.dirty, g.layout = false, true, topology.Layout{}
	g.logger.Info("subscription moved by an admin", "target", m.Target.String(), "detached", attachedNames(attached))
	m.Reply(api.SubscriptionSeekReply{SubscriptionInfo: g.info(), Detached: attachedNames(attached)}, nil)
}

// onDelete retires the group: refused while consumers are attached (unless
// forced) and for a subscription that does not exist; otherwise its log is
// closed and its directory moved aside, the acks waiting for a flush are
// answered with the notice of the deletion, and the attached consumers are
// detached with it.
func (g *group) onDelete(m *deleteSub) {
	switch {
	case g.retired != nil:
		m.Reply(nil, g.retired)
		return
	case g.broken == nil && !g.state.Created:
		m.Reply(nil, g.errNoSubscription())
		return
	}
	attached := g.attached()
	if len(attached) > 0 && !m.Force {
		m.Reply(nil, g.errAttached("delete", attached))
		return
	}
	if err := g.retire(); err != nil {
		m.Reply(nil, err)
		return
	}
	notice := g.deletedNotice()
	for _, reply := range g.batch.replies {
		reply(notice)
	}
	g.batch = ackBatch{cursors: make(map[topology.Unit]uint64)}
	g.detach(attached, notice)
	g.retired = notice
	m.Reply(attachedNames(attached), nil)
}

// String describes a seek target for logs.
func (t seekTarget) String() string {
	switch {
	case t.message != nil:
		return fmt.Sprintf("message %d/%d/%d", t.message.Segment, t.message.Bucket, t.message.Offset)
	case t.hasTime:
		return fmt.Sprintf("time %d", t.time)
	}
	return t.to
}
