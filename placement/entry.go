package placement

import "time"

// Entry is the state machine of the entry role as one node holds it: one
// node at a time takes the clients' requests (so that a connection's
// requests reach each owner in order), holding a lease on the role that
// it renews with its membership lease. The zero Entry does not hold it.
type Entry struct {
	TTL time.Duration
	// Held says this node holds the role; Rev is the revision of the
	// role's record it last wrote.
	Held bool
	Rev  uint64
	// Until is when it stops taking requests unless a renewal lands: the
	// role's expiry less the margin.
	Until time.Time
	// Deferred counts the rounds in a row this node left the free role to
	// the others (Defer).
	Deferred int
}

// MaxDeferred is how many rounds in a row a node that leads the metadata
// stream leaves a free entry role to the others before it takes the role
// itself (none of them did).
const MaxDeferred = 2

// Defer says whether the node should leave the free entry role to the
// others at this round: it leads the metadata stream (leadsMeta), other
// nodes that may take the role are live, and it has not left it to them
// MaxDeferred rounds in a row already. The entry node and the metadata
// leader on one node make the loss of that node the slowest there is:
// JetStream elects a new metadata leader (seconds) before any node can
// take the role; apart, a kill of either costs only its own part.
func (e *Entry) Defer(leadsMeta bool, others int) bool {
	if !leadsMeta || others == 0 || e.Deferred >= MaxDeferred {
		e.Deferred = 0
		return false
	}
	e.Deferred++
	return true
}

// EntryStep is what a node does with the role at a renewal round.
type EntryStep int

const (
	// TakeEntry: try to take the role (it is free, or lapsed).
	TakeEntry EntryStep = iota
	// RenewEntry: renew the role this node holds.
	RenewEntry
)

// Next is what the node does with the role at this round.
func (e Entry) Next() EntryStep {
	if e.Held {
		return RenewEntry
	}
	return TakeEntry
}

// Expiry is the expiry a take or renewal at now writes.
func (e Entry) Expiry(now time.Time) time.Time { return now.Add(e.TTL) }

// Took records that the node took the role at revision rev, with expiry
// expires: it starts the client services.
func (e *Entry) Took(rev uint64, expires time.Time) {
	e.Held, e.Rev, e.Until, e.Deferred = true, rev, expires.Add(-Margin(e.TTL)), 0
}

// Renewed records a renewal that landed at revision rev with expiry
// expires.
func (e *Entry) Renewed(rev uint64, expires time.Time) {
	e.Rev, e.Until = rev, expires.Add(-Margin(e.TTL))
}

// Lost records that another node took the role (a renewal met another
// revision): the node stops its client services, and may take the role
// again once it is free.
func (e *Entry) Lost() { e.Held = false }

// Released is the expiry that hands the role over at now: the record
// lapses at once, and the others take the role at their next round
// rather than when the lease runs out.
func Released(now time.Time) time.Time { return now.Add(-time.Millisecond) }

// Fenced says the node, holding the role, must refuse clients' requests at
// now: its renewals failed past the margin, and another node may hold the
// role now (requests taken by both could reach an owner out of order).
func (e Entry) Fenced(now time.Time) bool { return e.Held && !now.Before(e.Until) }
