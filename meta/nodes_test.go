package meta

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestNodeLeases: a node takes its lease, renews it by revision, a second
// run of the same id is refused while the record is at another revision
// than the one it saw lapse, and takes it at that one; the old run's
// renewal then conflicts, and a released lease is given up.
func TestNodeLeases(t *testing.T) {
	s := openStore(t)
	ctx := context.Background()
	now := time.UnixMilli(1_800_000_000_000)
	rec := NodeRecord{ID: "n1", NATSURL: "nats://127.0.0.1:4222", Started: now.UnixMilli(), Renewed: now.UnixMilli(), Expires: now.Add(6 * time.Second).UnixMilli()}
	rev, err := s.TakeNodeLease(ctx, rec, 0)
	if err != nil {
		t.Fatal(err)
	}
	firstRev := rev
	rec.Renewed, rec.Expires = now.Add(2*time.Second).UnixMilli(), now.Add(8*time.Second).UnixMilli()
	if rev, err = s.RenewNodeLease(ctx, rec, rev); err != nil {
		t.Fatal(err)
	}
	second := rec
	second.Started = now.Add(3 * time.Second).UnixMilli()
	if _, err := s.TakeNodeLease(ctx, second, 0); !errors.Is(err, ErrNodeIDInUse) {
		t.Fatalf("a second run of a live node: %v, want ErrNodeIDInUse", err)
	}
	if _, err := s.TakeNodeLease(ctx, second, firstRev); !errors.Is(err, ErrNodeIDInUse) {
		t.Fatalf("a second run that saw a revision since renewed lapse: %v, want ErrNodeIDInUse", err)
	}
	later := now.Add(9 * time.Second) // the first run's lease lapsed
	second.Renewed, second.Expires = later.UnixMilli(), later.Add(6*time.Second).UnixMilli()
	rev2, err := s.TakeNodeLease(ctx, second, rev)
	if err != nil {
		t.Fatalf("taking a lapsed lease: %v", err)
	}
	if _, err := s.RenewNodeLease(ctx, rec, rev); !errors.Is(err, ErrConflict) {
		t.Fatalf("the old run renewing after another took the lease: %v, want ErrConflict", err)
	}
	if _, err := s.TakeNodeLease(ctx, NodeRecord{ID: "bad.id"}, 0); err == nil {
		t.Fatal("a node id with a dot was taken")
	}
	nodes, err := s.Nodes(ctx)
	if err != nil || len(nodes) != 1 || nodes[0].Started != second.Started || !nodes[0].Live(later) || nodes[0].Rev != rev2 {
		t.Fatalf("Nodes = %+v, %v; want the second run, live, at revision %d", nodes, err, rev2)
	}
	if err := s.ReleaseNodeLease(ctx, second, rev2); err != nil {
		t.Fatal(err)
	}
	if nodes, _ := s.Nodes(ctx); len(nodes) != 1 || nodes[0].Live(later) || !nodes[0].GivenUp() {
		t.Fatalf("a released lease is live: %+v", nodes)
	}
	third := second
	third.Started = later.Add(time.Second).UnixMilli()
	if _, err := s.TakeNodeLease(ctx, third, 0); err != nil {
		t.Fatalf("taking a lease given up: %v", err)
	}
}

// TestServingClaim: the first node to claim the serving role holds it,
// later claims by others return the holder, and the holder's own claim
// (a restart) keeps it.
func TestServingClaim(t *testing.T) {
	s := openStore(t)
	ctx := context.Background()
	if _, err := s.Serving(ctx); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Serving before any claim: %v, want ErrNotFound", err)
	}
	now := time.UnixMilli(1_800_000_000_000)
	got, err := s.ClaimServing(ctx, "n1", now)
	if err != nil || got.Node != "n1" {
		t.Fatalf("first claim = %+v, %v; want n1", got, err)
	}
	for _, id := range []string{"n2", "n1"} {
		got, err := s.ClaimServing(ctx, id, now.Add(time.Minute))
		if err != nil || got.Node != "n1" || got.Since != now.UnixMilli() {
			t.Fatalf("claim by %s = %+v, %v; want n1's first claim", id, got, err)
		}
	}
	if got, err := s.Serving(ctx); err != nil || got.Node != "n1" {
		t.Fatalf("Serving = %+v, %v", got, err)
	}
}

// TestEntryRole: the first taker holds the entry role; another is refused
// unless the record is still at the revision it saw lapse, and takes it
// then; the old holder's renewal then conflicts; a role given up is
// taken at once.
func TestEntryRole(t *testing.T) {
	s := openStore(t)
	ctx := context.Background()
	now := time.UnixMilli(1_800_000_000_000)
	first, err := s.TakeEntry(ctx, "n1", now, now.Add(6*time.Second), 0)
	if err != nil {
		t.Fatal(err)
	}
	rev, err := s.RenewEntry(ctx, "n1", now.Add(2*time.Second), now.Add(8*time.Second), first)
	if err != nil {
		t.Fatal(err)
	}
	for _, lapsed := range []uint64{0, first} {
		if _, err := s.TakeEntry(ctx, "n2", now.Add(7*time.Second), now.Add(13*time.Second), lapsed); !errors.Is(err, ErrEntryHeld) {
			t.Fatalf("taking a live entry role (seen lapsed at revision %d): %v, want ErrEntryHeld", lapsed, err)
		}
	}
	rev2, err := s.TakeEntry(ctx, "n2", now.Add(9*time.Second), now.Add(15*time.Second), rev)
	if err != nil {
		t.Fatalf("taking a lapsed entry role: %v", err)
	}
	if _, err := s.RenewEntry(ctx, "n1", now.Add(10*time.Second), now.Add(16*time.Second), rev); !errors.Is(err, ErrConflict) {
		t.Fatalf("the old holder renewing: %v, want ErrConflict", err)
	}
	if rec, err := s.Entry(ctx); err != nil || rec.Node != "n2" || rec.Rev != rev2 || rec.GivenUp() {
		t.Fatalf("Entry = %+v, %v", rec, err)
	}
	if _, err := s.RenewEntry(ctx, "n2", now.Add(11*time.Second), now.Add(11*time.Second-time.Millisecond), rev2); err != nil {
		t.Fatal(err)
	}
	if _, err := s.TakeEntry(ctx, "n3", now.Add(12*time.Second), now.Add(18*time.Second), 0); err != nil {
		t.Fatalf("taking a role given up: %v", err)
	}
}
