package cluster

import (
	"context"
	"errors"
	"time"

	"github.com/braidmq/braid/meta"
	"github.com/braidmq/braid/placement"
)

// The entry role: one node at a time takes the clients' requests (see
// forward.go for why one); it holds a lease on the role in the KV
// (cluster.entry), renewed with its membership lease. When its holder
// goes, the first live node to see the lease lapsed takes the role and
// starts the client services; a holder that cannot renew refuses produce
// requests from before its lease lapses (the same margin as appends) until
// a renewal lands, and one whose role another node took stops its client
// services (it takes the role again when it is next free).

// tryEntry renews the entry role when this node holds it, or takes it when
// it is free or has lapsed. It runs at start and at each renewal: now is
// the time by the wall clock (written in the record), sent on the clock
// that never steps (how long the role holds: a lease time, less the
// margin, from when the write was sent).
func (m *membership) tryEntry(now, sent time.Time) {
	n := m.n
	ctx, cancel := context.WithTimeout(context.Background(), m.ttl/3)
	defer cancel()
	e := &m.entryRole
	if e.Held && !n.entry.Load() {
		e.Lost() // its client services stopped: it takes the role again
	}
	expires := e.Expiry(now)
	if e.Next() == placement.RenewEntry {
		rev, err := n.meta.RenewEntry(ctx, n.nodeID, now, expires, e.Rev)
		switch {
		case err == nil:
			e.Renewed(rev, e.Expiry(sent))
			m.entryUntil.Store(e.Until.UnixNano())
		case errors.Is(err, meta.ErrConflict):
			n.log.Error("another node took the entry role: this node stops taking clients' requests", "node", n.nodeID)
			e.Lost()
			n.loseEntry()
		case e.Fenced(n.mono()):
			// Fenced (fenceEntry refuses produce requests) until a renewal
			// lands, or finds that another node took the role. The store
			// may be electing a leader: every node waits alike.
			n.log.Warn("the entry role could not be renewed in time: produce requests are refused until it is", "node", n.nodeID, "err", err)
		}
		return
	}
	lapsed, free := m.entryFree(ctx)
	if !free || m.deferEntry(ctx) {
		return
	}
	rev, err := n.meta.TakeEntry(ctx, n.nodeID, now, expires, lapsed)
	if err != nil {
		if !errors.Is(err, meta.ErrEntryHeld) {
			n.log.Warn("taking the entry role failed", "node", n.nodeID, "err", err)
		}
		return
	}
	e.Took(rev, e.Expiry(sent))
	m.entryUntil.Store(e.Until.UnixNano())
	if err := n.becomeEntry(); err != nil {
		n.log.Error("this node took the entry role but could not start the client services", "node", n.nodeID, "err", err)
	}
	if !n.entry.Load() {
		// Not serving (the services failed, or the node closes): take the
		// role again at the next round, and start them then.
		e.Lost()
	}
}

// entryFree reads the entry role's record and says whether this node may
// take it: there is none, its holder gave it up, it is this node's, or
// it lapsed by this node's clock (placement.Sightings) at revision
// lapsed, which the take replaces.
func (m *membership) entryFree(ctx context.Context) (lapsed uint64, free bool) {
	n := m.n
	rec, err := n.meta.Entry(ctx)
	switch {
	case errors.Is(err, meta.ErrNotFound):
		return 0, true
	case err != nil:
		return 0, false // not known: the next round reads it again
	case rec.Node == n.nodeID || !n.mono().Before(m.entryExpiry(rec)):
		return rec.Rev, true
	}
	return 0, false
}

// deferEntry says whether this round leaves the entry role, free, to the
// other nodes (placement.Entry.Defer): this node leads the metadata
// stream, and others that may take the role are live.
func (m *membership) deferEntry(ctx context.Context) bool {
	n := m.n
	others := 0
	for _, r := range m.liveNodes(placementViewAge) {
		if r.ID != n.nodeID && !r.Starting {
			others++
		}
	}
	leads := false
	if others > 0 {
		leader, err := n.meta.Leader(ctx)
		leads = err == nil && leader == n.nodeID
	}
	if !m.entryRole.Defer(leads, others) {
		return false
	}
	n.log.Info("leaving the free entry role to another node: this node leads the metadata stream", "node", n.nodeID,
		"round", m.entryRole.Deferred)
	return true
}

// becomeEntry starts the client services (Config.Clients).
func (n *Member) becomeEntry() error {
	started, err := n.cfg.Clients()
	if err != nil || !started {
		return err
	}
	n.entry.Store(true)
	n.log.Info("this node is the entry node: it takes the clients' requests", "node", n.nodeID)
	return nil
}

// loseEntry stops taking the clients' requests (the cluster service, the
// forwarded requests and what other nodes ask stay); the node may take
// the role again once it is free.
func (n *Member) loseEntry() {
	n.entry.Store(false)
	n.cfg.Unclients()
}

// LoseEntry gives the entry role up as if another node had taken it: the
// node stops taking the clients' requests, and takes the role again at a
// later round once it is free (its own record lapses first).
func (n *Member) LoseEntry() { n.loseEntry() }
