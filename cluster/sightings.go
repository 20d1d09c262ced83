package cluster

import (
	"context"
	"time"

	"github.com/braidmq/braid/meta"
)

// Leases by this node's clock (placement.Sightings): the others' leases
// and the entry role are judged from when this node saw each revision of
// their records, on its clock that never steps, never by the expiries
// their writers' clocks put in them. A watch of the records notes each
// revision within moments of its write, so that the nodes judge a lease
// alike; the reads of the records (countNodes, NodeLease) note what the
// watch has not.

// monoOrigin is the origin of the times on the node's clock that never
// steps (clock.Elapsed), which leases are measured by: the wall clock may
// step (an operator, NTP), and the nodes' wall clocks may differ by any
// amount, without two nodes holding one lease at once.
var monoOrigin = time.Unix(0, 0)

// mono is the time now on the node's clock that never steps.
func (n *Member) mono() time.Time { return monoOrigin.Add(n.clock.Elapsed()) }

// leaseExpiry is when node r's lease runs out by this node's clock: a
// lease time after this node first read the record's revision; long past
// for a lease given up.
func (m *membership) leaseExpiry(r meta.NodeRecord) time.Time {
	if r.GivenUp() {
		return monoOrigin
	}
	return m.sighted(r.LeaseKey(), r.Rev)
}

// sighted notes that the lease record key is at revision rev now and
// returns when its lease runs out by this node's clock.
func (m *membership) sighted(key string, rev uint64) time.Time {
	m.sightMu.Lock()
	defer m.sightMu.Unlock()
	return m.sightings.Expiry(key, rev, m.n.mono())
}

// holds reports whether node r's lease holds now, by this node's clock.
func (m *membership) holds(r meta.NodeRecord) bool { return m.n.mono().Before(m.leaseExpiry(r)) }

// entryExpiry is when the entry role as recorded in rec runs out by this
// node's clock (see leaseExpiry).
func (m *membership) entryExpiry(rec meta.EntryRecord) time.Time {
	if rec.Node == "" || rec.GivenUp() {
		return monoOrigin
	}
	return m.sighted(rec.LeaseKey(), rec.Rev)
}

// watchLeases notes the revisions of the lease records as they are
// written (meta.WatchLeases), until the membership stops; a watch the
// store loses is made again a second later.
func (m *membership) watchLeases() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-m.stop
		cancel()
	}()
	for ctx.Err() == nil {
		if ch, err := m.n.meta.WatchLeases(ctx); err == nil {
			for c := range ch {
				m.sighted(c.Key, c.Rev)
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}
