package placement

import "time"

// Sightings judge the leases that other nodes renew (their membership
// leases, the entry role) by this node's own clock: a lease is taken to
// run a TTL from when this node first read its record at the revision it
// has now, never until the expiry its writer's clock put in it. The
// nodes' clocks may then differ by any amount, and step: only their
// rates must agree to within the margin. A holder stops a margin before a
// TTL from when it sent its renewal (Lease, Entry), which is before any
// other node read it, so it has stopped before any other node takes its
// lease for lapsed.
//
// Times given to Sightings, and to Lease and Entry, are on a clock that
// never steps (the cluster passes clock.Elapsed as times from an origin).
// The zero Sightings takes its TTL at the first See.
type Sightings struct {
	TTL  time.Duration
	seen map[string]sighting
}

type sighting struct {
	rev uint64
	at  time.Time
}

// Expiry records that the record of key was read at revision rev at now,
// and returns when its lease runs out by this node's clock: a TTL after
// this node first read that revision. A read of an older revision than
// one seen already (a stale copy) changes nothing.
func (s *Sightings) Expiry(key string, rev uint64, now time.Time) time.Time {
	if s.seen == nil {
		s.seen = map[string]sighting{}
	}
	cur, ok := s.seen[key]
	if !ok || rev > cur.rev {
		cur = sighting{rev: rev, at: now}
		s.seen[key] = cur
	}
	return cur.at.Add(s.TTL)
}

// GivenUp reports whether a lease record says its holder gave it up (a
// clean stop): its expiry written no later than its renewal, both by the
// holder's clock at one write. Nobody need wait for it to run out.
func GivenUp(renewedMs, expiresMs int64) bool { return expiresMs <= renewedMs }
