package consumers

import (
	"fmt"
	"maps"
	"slices"

	"github.com/braidmq/braid/topology"
)

// queueEntry is the state of one offset in a unit's window.
type queueEntry struct {
	state      entryState
	deliveries uint32
	// due is, in unix ms, the ack deadline of an inflight entry or the
	// redelivery time of a delayed one.
	due   int64
	owner string // the consumer holding an inflight entry
}

// queueUnit is one unit of a queue subscription: its cumulative point and
// the window of offsets delivered at least once past it.
//
// Invariant: every offset below floor is acknowledged (or removed by
// retention); entries[i] is the state of offset floor+i; floor+len(entries)
// is the next offset never delivered; entries[0], when there is one, is not
// acked (advanceFloor pops acked entries at once).
type queueUnit struct {
	floor   uint64
	entries []queueEntry
	// ready counts the entries in state ready.
	ready int
	// minDue is at most the smallest due of the inflight and delayed
	// entries (0: none); expire recomputes it exactly.
	minDue int64
}

// read is the next offset never delivered.
func (u *queueUnit) read() uint64 { return u.floor + uint64(len(u.entries)) }

// entry returns the entry of off, or nil outside the window.
func (u *queueUnit) entry(off uint64) *queueEntry {
	if off < u.floor || off >= u.read() {
		return nil
	}
	return &u.entries[off-u.floor]
}

// setState moves e to state s, keeping the ready count and minDue.
func (u *queueUnit) setState(e *queueEntry, s entryState, due int64) {
	if e.state == entryReady {
		u.ready--
	}
	if s == entryReady {
		u.ready++
	}
	e.state, e.due = s, due
	if s != entryInflight {
		e.owner = ""
	}
	u.noteDue(s, due)
}

// noteDue lowers minDue to due when an entry in state s waits for it.
func (u *queueUnit) noteDue(s entryState, due int64) {
	if (s == entryInflight || s == entryDelayed) && due > 0 && (u.minDue == 0 || due < u.minDue) {
		u.minDue = due
	}
}

// extend adds the window entries up to read, delivered once each, in
// state s.
func (u *queueUnit) extend(read uint64, s entryState, due int64, owner string) {
	for u.read() < read {
		u.entries = append(u.entries, queueEntry{state: s, deliveries: 1, due: due, owner: owner})
		if s == entryReady {
			u.ready++
		}
	}
	u.noteDue(s, due)
}

// advanceFloor pops the acked entries at the head of the window.
func (u *queueUnit) advanceFloor() {
	i := 0
	for i < len(u.entries) && u.entries[i].state == entryAcked {
		i++
	}
	if i == 0 {
		return
	}
	u.floor += uint64(i)
	if i == len(u.entries) {
		u.entries = u.entries[:0]
		return
	}
	u.entries = u.entries[i:]
}

// raiseFloor drops every offset below floor (acknowledged elsewhere, or
// removed by retention).
func (u *queueUnit) raiseFloor(floor uint64) {
	if floor <= u.floor {
		return
	}
	if floor >= u.read() {
		u.floor, u.entries, u.ready = floor, u.entries[:0], 0
		return
	}
	for i := range u.entries[:floor-u.floor] {
		if u.entries[i].state == entryReady {
			u.ready--
		}
	}
	u.entries = u.entries[floor-u.floor:]
	u.floor = floor
	u.advanceFloor()
}

// record returns the recorded form of u: floor, read and the entries that
// are not "ready, delivered once" (every one of them when all is set; only
// those of offsets when not).
func (u *queueUnit) record(unit topology.Unit, offsets map[uint64]bool, all bool) queueUnitRecord {
	r := queueUnitRecord{Unit: unit, Floor: u.floor, Read: u.read()}
	add := func(off uint64, e *queueEntry) {
		rec := queueEntryRecord{Offset: off, State: entryReady, Deliveries: e.deliveries}
		switch e.state {
		case entryAcked:
			rec.State, rec.Deliveries = entryAcked, 0
		case entryDelayed:
			rec.State, rec.Due = entryDelayed, e.due
		}
		if all && rec.State == entryReady && rec.Deliveries == 1 {
			return
		}
		r.Entries = append(r.Entries, rec)
	}
	if all {
		for i := range u.entries {
			add(u.floor+uint64(i), &u.entries[i])
		}
		return r
	}
	for off := range offsets {
		if e := u.entry(off); e != nil {
			add(off, e)
		}
	}
	return r
}

// queueState is what a queue subscription's WAL holds: replaying every
// record in order through apply rebuilds it (inflight and dead entries
// come back as ready).
type queueState struct {
	Created bool
	Start   startPosition
	Policy  queuePolicy
	// Units holds every unit with a recorded position. A unit of a readable
	// segment without an entry starts at its first retained offset.
	// Invariant: no unit of a drained segment.
	Units   map[topology.Unit]*queueUnit
	Drained map[topology.SegmentID]bool
}

func newQueueState() queueState {
	return queueState{Units: make(map[topology.Unit]*queueUnit), Drained: make(map[topology.SegmentID]bool)}
}

// apply folds one record into s.
func (s *queueState) apply(r *queueRecord) error {
	switch r.Kind {
	case kindCreated, kindSnapshot:
		*s = newQueueState()
		s.Created, s.Start, s.Policy = true, r.Start, r.Policy
	case kindUpdate, kindPolicy:
		if !s.Created {
			return fmt.Errorf("%w: kind %d before the subscription was created", ErrBadRecord, r.Kind)
		}
		if r.Kind == kindPolicy {
			s.Policy = r.Policy
			return nil
		}
	default:
		return fmt.Errorf("%w: unknown kind %d", ErrBadRecord, r.Kind)
	}
	for _, id := range r.Drained {
		s.Drained[id] = true
	}
	for i := range r.Units {
		ur := &r.Units[i]
		if s.Drained[ur.Unit.Segment] {
			continue
		}
		u := s.Units[ur.Unit]
		if u == nil {
			u = &queueUnit{floor: ur.Floor}
			s.Units[ur.Unit] = u
		}
		u.raiseFloor(ur.Floor)
		u.extend(ur.Read, entryReady, 0, "")
		for _, er := range ur.Entries {
			e := u.entry(er.Offset)
			if e == nil {
				continue // below a floor raised since
			}
			e.deliveries = er.Deliveries
			u.setState(e, er.State, er.Due)
		}
		u.advanceFloor()
	}
	if len(r.Drained) > 0 {
		maps.DeleteFunc(s.Units, func(u topology.Unit, _ *queueUnit) bool { return s.Drained[u.Segment] })
	}
	return nil
}

// snapshot returns the record that rebuilds s on its own.
func (s *queueState) snapshot() *queueRecord {
	r := &queueRecord{Kind: kindSnapshot, Start: s.Start, Policy: s.Policy}
	for unit, u := range s.Units {
		r.Units = append(r.Units, u.record(unit, nil, true))
	}
	r.Drained = slices.Collect(maps.Keys(s.Drained))
	r.normalize()
	return r
}
