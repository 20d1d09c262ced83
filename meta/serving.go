package meta

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ServingRecord names the node that serves the topics whose layouts name
// no owner (written before nodes had ids: their bucket logs are on the
// disk of the node that ran alone then). It is claimed once, by the first
// node that starts, and stays with that node id across its restarts.
type ServingRecord struct {
	Node  string `json:"node"`
	Since int64  `json:"since"` // unix ms
}

const servingKey = "cluster.serving"

// ClaimServing claims the serving role for node if nobody holds it, and
// returns the holder (node itself, or the node that claimed it first).
func (s *Store) ClaimServing(ctx context.Context, node string, now time.Time) (ServingRecord, error) {
	rec := ServingRecord{Node: node, Since: now.UnixMilli()}
	_, err := s.create(ctx, servingKey, rec)
	if err == nil {
		return rec, nil
	}
	if !errors.Is(err, ErrExists) {
		return ServingRecord{}, err
	}
	// A replica that has not applied the create yet may answer the read
	// (the bucket allows direct reads from any replica): ask again.
	for {
		var held ServingRecord
		_, err := s.get(ctx, servingKey, &held)
		if !errors.Is(err, ErrNotFound) {
			return held, err
		}
		select {
		case <-ctx.Done():
			return ServingRecord{}, fmt.Errorf("%w (the record exists: a create of it failed)", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Serving returns the serving record; ErrNotFound before any claim.
func (s *Store) Serving(ctx context.Context) (ServingRecord, error) {
	var held ServingRecord
	_, err := s.get(ctx, servingKey, &held)
	return held, err
}

// EntryRecord names the node that takes the clients' requests (the entry
// node); its holder renews it with its membership lease, and another node
// takes it once it lapses: a lease time, by the taker's clock, without a
// renewal (placement.Sightings), or at once when its holder gave it up
// (Expires no later than Renewed). It holds no data: the role moves
// freely.
type EntryRecord struct {
	Node string `json:"node"`
	// Renewed and Expires are by the holder's clock (unix ms).
	Renewed int64 `json:"renewed,omitempty"`
	Expires int64 `json:"expires"`
	// Rev is the record's revision, as read (not stored).
	Rev uint64 `json:"-"`
}

// GivenUp reports whether the holder gave the role up.
func (r EntryRecord) GivenUp() bool { return r.Expires <= r.Renewed }

const entryKey = "cluster.entry"

// LeaseKey is the entry role's record's key: the Key a LeaseChange of it
// carries.
func (EntryRecord) LeaseKey() string { return entryKey }

// ErrEntryHeld is returned by TakeEntry while another node holds a live
// entry lease.
var ErrEntryHeld = errors.New("braid/meta: another node holds the entry role")

// TakeEntry takes the entry role for node, written at now until expires
// (the holder's clock), when nobody holds it, its holder gave it up, its
// record is still at revision lapsed (which the caller saw unchanged for
// a lease time), or node holds it already; it returns the revision to
// renew from.
func (s *Store) TakeEntry(ctx context.Context, node string, now, expires time.Time, lapsed uint64) (uint64, error) {
	rec := EntryRecord{Node: node, Renewed: now.UnixMilli(), Expires: expires.UnixMilli()}
	rev, err := s.create(ctx, entryKey, rec)
	if !errors.Is(err, ErrExists) {
		return rev, err
	}
	var held EntryRecord
	heldRev, err := s.get(ctx, entryKey, &held)
	if err != nil {
		return 0, err
	}
	if held.Node != node && !held.GivenUp() && heldRev != lapsed {
		return 0, fmt.Errorf("%w: %s, at revision %d", ErrEntryHeld, held.Node, heldRev)
	}
	return s.update(ctx, entryKey, rec, heldRev)
}

// RenewEntry renews the entry role held at revision rev; ErrConflict means
// another node took it.
func (s *Store) RenewEntry(ctx context.Context, node string, now, expires time.Time, rev uint64) (uint64, error) {
	return s.update(ctx, entryKey, EntryRecord{Node: node, Renewed: now.UnixMilli(), Expires: expires.UnixMilli()}, rev)
}

// Entry returns the entry record; ErrNotFound before any node took it.
func (s *Store) Entry(ctx context.Context) (EntryRecord, error) {
	var rec EntryRecord
	rev, err := s.get(ctx, entryKey, &rec)
	rec.Rev = rev
	return rec, err
}
