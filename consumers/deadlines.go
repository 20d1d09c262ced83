package consumers

import (
	"cmp"
	"slices"
	"time"

	"github.com/braidmq/braid/topology"
)

// This file holds the groups' time-driven decisions. Time is an input
// (doc.go, "Time"): each decision is a function of plain data and now that
// says what is due; none reads a clock. The actor shell keeps one timer per
// group, armed through the group's clock.Clock for the earliest deadline
// these functions return (groupBase.armTimer), and when it fires applies
// what they decide at the clock's now (onDeadline). A timer that fires
// before anything is due — a consumer was heard from since it was armed —
// finds nothing to do and is armed again for the next deadline.
//
// Every deadline here is the first instant at which its decision holds:
// checked at that instant or later, it finds the thing due; checked
// earlier, not.

// loadRetryEvery is how often, at most, a broken group tries to load its
// log again (the cause may be passing, such as too many open files).
const loadRetryEvery = time.Second

// sessionExpired reports whether c has been silent for longer than its
// session timeout at now. A parked fetch keeps a consumer alive whatever
// its lastSeen says.
func sessionExpired(c *consumerState, now time.Time) bool {
	return c.parked == nil && now.Sub(c.lastSeen) > c.timeout
}

// parkOver reports whether c's parked fetch has waited its Wait at now.
func parkOver(c *consumerState, now time.Time) bool {
	return c.parked != nil && !now.Before(c.parked.until)
}

// consumerDeadline is when a check next finds something to do about c: the
// end of its parked fetch's wait or, with none parked, the first instant
// it has been silent for longer than its session timeout (a nanosecond,
// time's resolution, past it).
func consumerDeadline(c *consumerState) time.Time {
	if c.parked != nil {
		return c.parked.until
	}
	return c.lastSeen.Add(c.timeout + time.Nanosecond)
}

// deadConsumers returns, by name, the consumers whose session expired at
// now.
func deadConsumers(consumers map[string]*consumerState, now time.Time) []*consumerState {
	return consumersWhere(consumers, now, sessionExpired)
}

// parkedOver returns, by name, the consumers whose parked fetch's wait is
// over at now: they are answered empty.
func parkedOver(consumers map[string]*consumerState, now time.Time) []*consumerState {
	return consumersWhere(consumers, now, parkOver)
}

// consumersWhere returns the consumers due at now by name: the group acts
// on them in that order, the same on every run.
func consumersWhere(consumers map[string]*consumerState, now time.Time, due func(*consumerState, time.Time) bool) []*consumerState {
	var out []*consumerState
	for _, c := range consumers {
		if due(c, now) {
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(a, b *consumerState) int { return cmp.Compare(a.name, b.name) })
	return out
}

// consumersDeadline is the earliest consumerDeadline of consumers (zero
// for none).
func consumersDeadline(consumers map[string]*consumerState) time.Time {
	var at time.Time
	for _, c := range consumers {
		at = earlier(at, consumerDeadline(c))
	}
	return at
}

// graceEnd is when a previous owner named by the log, awaited from start
// (the group's start), is declared dead if it has not joined again: its
// recorded session timeout later, or the group's default without one.
func graceEnd(start time.Time, recorded, fallback time.Duration) time.Time {
	if recorded <= 0 {
		recorded = fallback
	}
	return start.Add(recorded)
}

// graceOver returns, sorted, the awaited previous owners whose grace has
// ended at now.
func graceOver(awaiting map[string]time.Time, now time.Time) []string {
	var out []string
	for name, end := range awaiting {
		if !now.Before(end) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// graceDeadline is the earliest end of a grace in awaiting (zero for none).
func graceDeadline(awaiting map[string]time.Time) time.Time {
	var at time.Time
	for _, end := range awaiting {
		at = earlier(at, end)
	}
	return at
}

// loadRetryDue reports whether a group broken at brokenAt may try to load
// its log again at now.
func loadRetryDue(brokenAt, now time.Time) bool {
	return now.Sub(brokenAt) >= loadRetryEvery
}

// earlier returns the earlier of two deadlines; zero is none.
func earlier(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

// Queue groups keep their deadlines in unix milliseconds, as their window
// entries and records do; 0 is none. An entry is due once now (in unix ms)
// reaches its due.

// ackDeadline is the ack deadline of an entry delivered at now: the
// policy's ack timeout later, or none without one.
func (p queuePolicy) ackDeadline(now int64) int64 {
	if p.AckTimeout <= 0 {
		return 0
	}
	return now + p.AckTimeout.Milliseconds()
}

// redeliverAt is when an entry nacked at now after its deliveries-th
// delivery is to be delivered again: 0 for at once (and, past the max
// deliveries, to go to the dead-letter topic at once). delay is the nack's
// own; below zero it is the policy's backoff for that delivery.
func (p queuePolicy) redeliverAt(deliveries uint32, delay time.Duration, now time.Time) int64 {
	if delay < 0 {
		delay = p.delayFor(deliveries)
	}
	if delay <= 0 || (p.MaxDeliveries > 0 && deliveries >= p.MaxDeliveries) {
		return 0
	}
	return now.Add(delay).UnixMilli()
}

// mayBeDue reports whether an entry of u may be due at now; when not,
// dueOffsets would find nothing (minDue is at most the earliest due).
func (u *queueUnit) mayBeDue(now int64) bool {
	return u.minDue != 0 && u.minDue <= now
}

// dueOffsets appends to due the offsets of u's entries whose time has come
// at now: inflight entries past their ack deadline and delayed entries
// whose redelivery time came, in offset order. It returns them with the
// earliest due of the entries still waiting (0: none), u's exact minDue
// once the due ones are made ready.
func (u *queueUnit) dueOffsets(now int64, due []uint64) ([]uint64, int64) {
	next := int64(0)
	for i := range u.entries {
		e := &u.entries[i]
		if (e.state != entryInflight && e.state != entryDelayed) || e.due == 0 {
			continue
		}
		if e.due <= now {
			due = append(due, u.floor+uint64(i))
		} else if next == 0 || e.due < next {
			next = e.due
		}
	}
	return due, next
}

// queueDeadline is the earliest minDue of units, as a time (zero: none):
// no entry is due before it.
func queueDeadline(units map[topology.Unit]*queueUnit) time.Time {
	earliest := int64(0)
	for _, u := range units {
		if u.minDue > 0 && (earliest == 0 || u.minDue < earliest) {
			earliest = u.minDue
		}
	}
	if earliest == 0 {
		return time.Time{}
	}
	return time.UnixMilli(earliest)
}
