package consumers

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/braidmq/braid/topology"
)

// subscriptionState is what the group's WAL holds: replaying every record
// in order through apply rebuilds it exactly.
type subscriptionState struct {
	// Created is false until the first join creates the subscription.
	Created bool
	Start   startPosition
	// Cursors holds the ack cursor (the next offset not yet acknowledged)
	// of every unit that has one recorded. A unit without an entry starts at
	// its first retained offset. Invariant: no entry belongs to a drained
	// segment.
	Cursors map[topology.Unit]uint64
	// Drained holds the segments this subscription has drained (or that
	// were sealed when it started at latest, or deleted).
	Drained map[topology.SegmentID]bool
	// Owners holds the consumer each unit was last given to, for the
	// units that have one. Invariant: no entry belongs to a drained
	// segment, and no value is "".
	Owners map[topology.Unit]string
	// Sessions holds the session timeout of consumers named in Owners
	// (the others get the group's default). Invariant: every key is a
	// value of Owners.
	Sessions map[string]time.Duration
}

func newSubscriptionState() subscriptionState {
	return subscriptionState{
		Cursors:  make(map[topology.Unit]uint64),
		Drained:  make(map[topology.SegmentID]bool),
		Owners:   make(map[topology.Unit]string),
		Sessions: make(map[string]time.Duration),
	}
}

// apply folds one record into s. created and the snapshots replace the
// state; update merges cursors (a cursor never moves back) and drained
// segments; owners sets or clears the owners of units and the sessions of
// consumers. An update or owners record before any created or snapshot is
// an error: the head of the log was lost.
func (s *subscriptionState) apply(r stateRecord) error {
	switch r.Kind {
	case kindCreated, kindSnapshot, kindSnapshotOwners:
		*s = newSubscriptionState()
		s.Created = true
		s.Start = r.Start
	case kindUpdate, kindOwners:
		if !s.Created {
			return fmt.Errorf("%w: record of kind %d before the subscription was created", ErrBadRecord, r.Kind)
		}
	default:
		return fmt.Errorf("%w: unknown kind %d", ErrBadRecord, r.Kind)
	}
	s.markDrained(r.Drained)
	for _, c := range r.Cursors {
		if !s.Drained[c.Unit.Segment] && c.Acked > s.Cursors[c.Unit] {
			s.Cursors[c.Unit] = c.Acked
		}
	}
	for _, o := range r.Owners {
		switch {
		case o.Owner == "":
			delete(s.Owners, o.Unit)
		case !s.Drained[o.Unit.Segment]:
			s.Owners[o.Unit] = o.Owner
		}
	}
	for _, c := range r.Sessions {
		s.Sessions[c.Consumer] = c.Timeout
	}
	if len(r.Owners) > 0 || len(r.Sessions) > 0 {
		s.pruneSessions()
	}
	return nil
}

// markDrained records segments as drained and drops what s keeps of their
// units.
func (s *subscriptionState) markDrained(ids []topology.SegmentID) {
	if len(ids) == 0 {
		return
	}
	for _, id := range ids {
		s.Drained[id] = true
	}
	maps.DeleteFunc(s.Cursors, func(u topology.Unit, _ uint64) bool { return s.Drained[u.Segment] })
	n := len(s.Owners)
	maps.DeleteFunc(s.Owners, func(u topology.Unit, _ string) bool { return s.Drained[u.Segment] })
	if len(s.Owners) < n {
		s.pruneSessions()
	}
}

// pruneSessions forgets the sessions of consumers that own nothing.
func (s *subscriptionState) pruneSessions() {
	if len(s.Sessions) == 0 {
		return
	}
	owning := make(map[string]bool, len(s.Sessions))
	for _, name := range s.Owners {
		owning[name] = true
	}
	maps.DeleteFunc(s.Sessions, func(name string, _ time.Duration) bool { return !owning[name] })
}

// snapshot returns the record that rebuilds s on its own.
func (s *subscriptionState) snapshot() stateRecord {
	r := stateRecord{Kind: kindSnapshotOwners, Start: s.Start}
	for u, acked := range s.Cursors {
		r.Cursors = append(r.Cursors, unitCursor{Unit: u, Acked: acked})
	}
	r.Drained = slices.Collect(maps.Keys(s.Drained))
	for u, name := range s.Owners {
		r.Owners = append(r.Owners, unitOwner{Unit: u, Owner: name})
	}
	for name, timeout := range s.Sessions {
		r.Sessions = append(r.Sessions, consumerSession{Consumer: name, Timeout: timeout})
	}
	r.normalize()
	return r
}

// isDrained is the predicate the ordering rule takes.
func (s *subscriptionState) isDrained(id topology.SegmentID) bool { return s.Drained[id] }

// segmentDrained reports whether seg is drained given, for each of its
// buckets, the subscription's ack cursor and the bucket's next offset: a
// deleted segment always is, an active one never (it can still grow), a
// sealed one when every bucket's cursor has reached its final next offset.
// An empty sealed segment is therefore drained at once; the ordering rule
// still holds its children until its own ancestors are drained.
func segmentDrained(seg topology.Segment, acked, next []uint64) bool {
	switch seg.State {
	case topology.StateDeleted:
		return true
	case topology.StateSealed:
	default:
		return false
	}
	if len(acked) != seg.Buckets || len(next) != seg.Buckets {
		return false
	}
	for b := range seg.Buckets {
		if acked[b] < next[b] {
			return false
		}
	}
	return true
}

// newlyDrained returns, ascending, the segments of l that are not in
// drained yet but are drained now: deleted ones, and sealed ones whose every
// bucket has its ack cursor at the bucket's final next offset. acked gives
// a unit's ack cursor; offsets below the unit's first retained offset count
// as acknowledged (retention removed them). bounds gives a unit's first and
// next offsets, ok false when they are unknown (then the segment is not
// drained). Every segment is judged on its own: an empty sealed segment is
// drained even while its ancestors are not, and the ordering rule, not this
// function, keeps its children waiting.
func newlyDrained(l topology.Layout, drained func(topology.SegmentID) bool,
	acked func(topology.Unit) uint64, bounds func(topology.Unit) (first, next uint64, ok bool)) []topology.SegmentID {
	var out []topology.SegmentID
	for _, s := range l.Segments {
		if s.State == topology.StateActive || drained(s.ID) {
			continue
		}
		if s.State == topology.StateDeleted {
			out = append(out, s.ID)
			continue
		}
		cursors := make([]uint64, s.Buckets)
		next := make([]uint64, s.Buckets)
		known := true
		for b := range s.Buckets {
			u := topology.Unit{Segment: s.ID, Bucket: b}
			first, end, ok := bounds(u)
			if !ok {
				known = false
				break
			}
			cursors[b], next[b] = max(acked(u), first), end
		}
		if known && segmentDrained(s, cursors, next) {
			out = append(out, s.ID)
		}
	}
	return out
}

// withheldUnits returns, sorted, the units the ordering rule holds back:
// those of segments that are neither deleted nor drained and are not
// readable yet because an ancestor is not done.
func withheldUnits(l topology.Layout, drained func(topology.SegmentID) bool) []topology.Unit {
	readable := make(map[topology.SegmentID]bool)
	for _, id := range topology.Readable(l, drained) {
		readable[id] = true
	}
	var out []topology.Unit
	for _, s := range l.Segments {
		if s.State == topology.StateDeleted || drained(s.ID) || readable[s.ID] {
			continue
		}
		for b := range s.Buckets {
			out = append(out, topology.Unit{Segment: s.ID, Bucket: b})
		}
	}
	return out
}

// deliveryCounts remembers how often the offsets of one unit past its ack
// cursor were handed out before the current delivery pass, so that a
// redelivery carries Deliveries = count + 1. Span i covers the offsets from
// the end of span i-1 (from the ack cursor for the first) up to end, which
// were delivered count times; offsets past the last span were never
// delivered. Invariant: ends strictly increase.
type deliveryCounts []deliverySpan

type deliverySpan struct {
	end   uint64
	count uint32
}

// at returns how often off was delivered before.
func (d deliveryCounts) at(off uint64) uint32 {
	i, _ := slices.BinarySearchFunc(d, off, func(s deliverySpan, off uint64) int {
		if s.end <= off {
			return -1
		}
		return 1
	})
	if i == len(d) {
		return 0
	}
	return d[i].count
}

// rewind records that the offsets in [acked, delivered) were delivered once
// more: they are about to be handed out again from acked.
func (d *deliveryCounts) rewind(acked, delivered uint64) {
	d.rewindFrom(acked, acked, delivered)
}

// rewindFrom records that the offsets in [from, delivered) were delivered
// once more, acked being the ack cursor (acked <= from): they are about to
// be handed out again from from.
func (d *deliveryCounts) rewindFrom(acked, from, delivered uint64) {
	d.trim(acked)
	if delivered <= from {
		return
	}
	if from > acked {
		d.boundary(from)
	}
	d.boundary(delivered)
	for j := range *d {
		if s := &(*d)[j]; s.end > from && s.end <= delivered {
			s.count++
		}
	}
}

// boundary makes a span end at off, splitting the span that contains it or
// adding one past the last (offsets there were never delivered).
func (d *deliveryCounts) boundary(off uint64) {
	spans := *d
	i, found := slices.BinarySearchFunc(spans, off, func(s deliverySpan, end uint64) int {
		switch {
		case s.end < end:
			return -1
		case s.end > end:
			return 1
		}
		return 0
	})
	if found {
		return
	}
	count := uint32(0)
	if i < len(spans) {
		count = spans[i].count
	}
	*d = slices.Insert(spans, i, deliverySpan{end: off, count: count})
}

// trim forgets the spans the ack cursor has passed.
func (d *deliveryCounts) trim(acked uint64) {
	spans := *d
	i := 0
	for i < len(spans) && spans[i].end <= acked {
		i++
	}
	if i > 0 {
		*d = slices.Delete(spans, 0, i)
	}
}
