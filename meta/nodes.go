package meta

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/braidmq/braid/routing"
)

// NodeRecord is a node's lease on membership. The node renews it (a
// compare-and-swap on its revision) every few seconds; the others take it
// for gone once a lease time passes, by their own clocks, without a
// renewal (placement.Sightings), or at once when it gave the lease up
// (Expires no later than Renewed). Expires, by the holder's clock, is for
// people to read.
type NodeRecord struct {
	ID string `json:"id"`
	// Rev is the record's revision in the store, as read (not stored):
	// each renewal makes a new one.
	Rev uint64 `json:"-"`
	// Incarnation is the node's data directory's (a random id made when
	// the directory was first used): a node back under its id with
	// another directory is another member ("" in leases of earlier
	// releases).
	Incarnation string `json:"incarnation,omitempty"`
	// Addresses others reach it at: its NATS client URL (embedded) and
	// its actor address (protoactor remote), when it has them.
	NATSURL   string `json:"nats_url,omitempty"`
	ActorAddr string `json:"actor_addr,omitempty"`
	// Started is when this run of the node took its lease; Renewed and
	// Expires when it last renewed it and when it lapses (unix ms).
	Started int64 `json:"started"`
	Renewed int64 `json:"renewed"`
	Expires int64 `json:"expires"`
	// The node's load at its last renewal, for placement and operators:
	// the active segments it owns and the bytes/s it made durable since
	// the renewal before.
	Segments    int     `json:"segments"`
	BytesPerSec float64 `json:"bytes_per_sec"`
	// UnderReplicated counts the segments of the topics it is the home of
	// with fewer live copies than their replication factor; CopyBytesLeft
	// the bytes left of the copies of sealed units it is making again.
	UnderReplicated int   `json:"under_replicated,omitempty"`
	CopyBytesLeft   int64 `json:"copy_bytes_left,omitempty"`
	// GroupsShort counts the consumer groups homed on it whose state is
	// not on the replicas their topic's home segment has (a lost copy not
	// made again yet).
	GroupsShort int `json:"groups_short,omitempty"`
	// Draining says the node is being drained: placement passes it by.
	Draining bool `json:"draining,omitempty"`
	// Starting says the node took its lease but does not serve yet (it is
	// recovering its topics): placement passes it by until its first
	// renewal, made as soon as it serves.
	Starting bool `json:"starting,omitempty"`
}

// Live reports whether the lease holds at now by the expiry its holder
// wrote: a view for people, or of a node's own record. Whether another
// node's lease holds is judged by placement.Sightings.
func (r NodeRecord) Live(now time.Time) bool { return now.UnixMilli() < r.Expires }

// GivenUp reports whether the holder gave the lease up (a clean stop):
// nobody need wait for it to lapse.
func (r NodeRecord) GivenUp() bool { return r.Expires <= r.Renewed }

func nodeKey(id string) string { return "node." + id }

// LeaseKey is the record's key: the Key a LeaseChange of it carries.
func (r NodeRecord) LeaseKey() string { return nodeKey(r.ID) }

// ErrNodeIDInUse is returned by TakeNodeLease when another process holds a
// live lease on the node id.
var ErrNodeIDInUse = errors.New("braid/meta: node id in use by a live node")

// TakeNodeLease takes the lease of node rec.ID for a new run of it: it
// creates the record, or replaces one given up, or one still at revision
// lapsed (which the caller saw unchanged for a lease time: its run died).
// Another run's lease fails with ErrNodeIDInUse. It returns the revision
// to renew from.
func (s *Store) TakeNodeLease(ctx context.Context, rec NodeRecord, lapsed uint64) (uint64, error) {
	if err := routing.ValidateName(rec.ID); err != nil {
		return 0, fmt.Errorf("node id: %w", err)
	}
	rev, err := s.create(ctx, nodeKey(rec.ID), rec)
	if !errors.Is(err, ErrExists) {
		return rev, err
	}
	var old NodeRecord
	oldRev, err := s.get(ctx, nodeKey(rec.ID), &old)
	if err != nil {
		return 0, err
	}
	if !old.GivenUp() && oldRev != lapsed {
		return 0, fmt.Errorf("%w: %s holds it at revision %d (renewed %s by its clock)", ErrNodeIDInUse, rec.ID, oldRev,
			time.UnixMilli(old.Renewed).UTC().Format(time.RFC3339Nano))
	}
	return s.update(ctx, nodeKey(rec.ID), rec, oldRev)
}

// RenewNodeLease renews a lease taken at revision rev; ErrConflict means
// another run took it since (this one must stop serving).
func (s *Store) RenewNodeLease(ctx context.Context, rec NodeRecord, rev uint64) (uint64, error) {
	return s.update(ctx, nodeKey(rec.ID), rec, rev)
}

// NodeLease returns node id's record and its revision.
func (s *Store) NodeLease(ctx context.Context, id string) (NodeRecord, uint64, error) {
	var r NodeRecord
	rev, err := s.get(ctx, nodeKey(id), &r)
	r.Rev = rev
	return r, rev, err
}

// ReleaseNodeLease ends a lease held at revision rev at once (a clean
// stop), so that the others need not wait for it to lapse.
func (s *Store) ReleaseNodeLease(ctx context.Context, rec NodeRecord, rev uint64) error {
	rec.Expires = rec.Renewed
	_, err := s.update(ctx, nodeKey(rec.ID), rec, rev)
	return err
}

// Nodes returns every node record, live or not, by id.
func (s *Store) Nodes(ctx context.Context) ([]NodeRecord, error) {
	keys, err := s.keys(ctx, "node.*")
	if err != nil {
		return nil, err
	}
	out := make([]NodeRecord, 0, len(keys))
	for _, k := range keys {
		var r NodeRecord
		rev, err := s.get(ctx, k, &r)
		if err != nil {
			if errors.Is(err, ErrNotFound) {
				continue
			}
			return nil, err
		}
		if r.ID != strings.TrimPrefix(k, "node.") {
			return nil, fmt.Errorf("%w: %s holds the record of node %q", ErrCorrupt, k, r.ID)
		}
		r.Rev = rev
		out = append(out, r)
	}
	return out, nil
}

// LeaseChange is a new revision of a lease record (a node's, or the entry
// role's), as WatchLeases sees it: its key and revision.
type LeaseChange struct {
	Key string
	Rev uint64
}

// WatchLeases sends every revision of the lease records (node.<id> and
// cluster.entry) as it is written, the current ones first, until ctx
// ends: its readers note when they saw each (placement.Sightings) within
// moments of its write, not at their next read. The channel closes when
// the watch stops (ctx ended, or the store lost it: watch again).
func (s *Store) WatchLeases(ctx context.Context) (<-chan LeaseChange, error) {
	w, err := s.kv.WatchFiltered(ctx, []string{"node.*", entryKey}, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, timedOut(ctx, fmt.Errorf("braid/meta: watching the leases: %w", err))
	}
	out := make(chan LeaseChange, 64)
	go func() {
		defer close(out)
		defer w.Stop()
		for {
			select {
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				if e == nil {
					continue // the current values are in
				}
				select {
				case out <- LeaseChange{Key: e.Key(), Rev: e.Revision()}:
				case <-ctx.Done():
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}
