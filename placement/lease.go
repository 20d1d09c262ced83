package placement

import "time"

// Standing is how a node stands, as another node sees its lease.
type Standing int

const (
	// Live: its lease holds.
	Live Standing = iota
	// Late: its lease ran out less than a third of a lease ago; a node
	// busy or paused for a renewal or two is not taken for lost.
	Late
	// Lapsed: its lease ran out a third of a lease ago or more.
	Lapsed
)

// Classify says how a node whose lease expires at expires stands at now,
// for leases of ttl.
func Classify(expires, now time.Time, ttl time.Duration) Standing {
	switch {
	case now.Before(expires):
		return Live
	case now.Add(-ttl / 3).Before(expires):
		return Late
	default:
		return Lapsed
	}
}

// Margin is how long before its lease lapses a node stops taking appends
// and requests: a sixth of the lease time (clocks of nodes may differ by
// less than that).
func Margin(ttl time.Duration) time.Duration { return ttl / 6 }

// RenewEvery is how often a node renews its lease: every third of its
// time, so that one renewal may fail without the lease lapsing.
func RenewEvery(ttl time.Duration) time.Duration { return ttl / 3 }

// Lease is the state machine of a node's own membership lease: what it
// may do, and until when, from what its renewals found. The zero Lease
// takes nothing.
type Lease struct {
	TTL time.Duration
	// Expires is when the lease as last written lapses.
	Expires time.Time
	// Rejoining says the lease had run out before a renewal landed: the
	// node may have lost its segments meanwhile, and takes nothing until
	// it has learned the layouts again (Rejoined).
	Rejoining bool
	// Lost says another run of the node's id took the lease: this one
	// must stop serving for good.
	Lost bool
}

// Taken is the lease as taken (or adopted) with expiry expires.
func (l *Lease) Taken(expires time.Time) { l.Expires = expires }

// Renewed records a renewal made at now that landed with expiry expires;
// it reports whether the node must rejoin first (its lease had lapsed
// before: others may have moved its segments).
func (l *Lease) Renewed(now, expires time.Time) (rejoin bool) {
	lapsed := !now.Before(l.Expires)
	l.Expires = expires
	if lapsed && !l.Rejoining {
		l.Rejoining = true
		return true
	}
	return false
}

// Rejoined ends a rejoin: the node takes appends again.
func (l *Lease) Rejoined() { l.Rejoining = false }

// TakenOver records that another run of the node's id took the lease.
func (l *Lease) TakenOver() { l.Lost = true }

// ValidUntil is when the node stops taking appends unless a renewal lands
// first: the lease's expiry less the margin, so that once the lease lapses
// and another node may take over, this one has stopped. Zero while it
// rejoins or after the lease was taken over.
func (l Lease) ValidUntil() time.Time {
	if l.Rejoining || l.Lost || l.Expires.IsZero() {
		return time.Time{}
	}
	return l.Expires.Add(-Margin(l.TTL))
}

// Fenced says the node must refuse appends at now.
func (l Lease) Fenced(now time.Time) bool { return !now.Before(l.ValidUntil()) }

// Rate is the byte rate a renewal at now records, from the bytes made
// durable then and at the last measure: measured over a sixth of a lease
// at least (a renewal asked for out of turn may come moments after the
// last), else the last rate is kept (measured false).
func Rate(ttl time.Duration, lastAt time.Time, lastBytes uint64, now time.Time, bytes uint64) (rate float64, measured bool) {
	elapsed := now.Sub(lastAt)
	if elapsed < ttl/6 {
		return 0, false
	}
	return float64(bytes-lastBytes) / elapsed.Seconds(), true
}

// Evict says whether a node must give up its active segments (move) and
// whether it is gone, from how it stands: a live node only while it
// drains; a gone one (its lease lapsed, read again to be sure) always.
func Evict(live, draining, gone bool) (move, isGone bool) {
	if live {
		return draining, false
	}
	return gone, gone
}
