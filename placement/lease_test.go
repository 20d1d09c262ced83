package placement

import (
	"testing"
	"time"
)

var t0 = time.Unix(1_800_000_000, 0)

func TestClassify(t *testing.T) {
	t.Parallel()
	ttl := 3 * time.Second
	expires := t0.Add(ttl)
	tests := []struct {
		at   time.Duration
		want Standing
	}{
		{0, Live},
		{ttl - time.Millisecond, Live},
		{ttl, Late},
		{ttl + time.Second - time.Millisecond, Late},
		{ttl + time.Second, Lapsed},
		{time.Hour, Lapsed},
	}
	for _, tt := range tests {
		if got := Classify(expires, t0.Add(tt.at), ttl); got != tt.want {
			t.Errorf("at +%s: %v, want %v", tt.at, got, tt.want)
		}
	}
}

func TestLease(t *testing.T) {
	t.Parallel()
	ttl := 6 * time.Second // margin 1 s
	var zero Lease
	if !zero.Fenced(t0) {
		t.Fatal("a lease never taken takes appends")
	}
	l := Lease{TTL: ttl}
	l.Taken(t0.Add(ttl))
	if got, want := l.ValidUntil(), t0.Add(5*time.Second); !got.Equal(want) {
		t.Fatalf("ValidUntil %v, want %v", got, want)
	}
	if l.Fenced(t0.Add(5*time.Second - time.Nanosecond)) {
		t.Fatal("fenced before expiry less the margin")
	}
	if !l.Fenced(t0.Add(5 * time.Second)) {
		t.Fatal("not fenced at expiry less the margin")
	}
	// A renewal in time: no rejoin, valid a lease on.
	if l.Renewed(t0.Add(2*time.Second), t0.Add(8*time.Second)) {
		t.Fatal("a renewal in time asked for a rejoin")
	}
	if l.Fenced(t0.Add(6 * time.Second)) {
		t.Fatal("fenced after a renewal")
	}
	// A renewal after the lease ran out: the node rejoins, fenced until
	// it is done, and a second renewal meanwhile asks for no second rejoin.
	if !l.Renewed(t0.Add(9*time.Second), t0.Add(15*time.Second)) {
		t.Fatal("a renewal after the lapse did not ask for a rejoin")
	}
	if !l.Fenced(t0.Add(10 * time.Second)) {
		t.Fatal("a rejoining node takes appends")
	}
	if l.Renewed(t0.Add(10*time.Second), t0.Add(16*time.Second)) {
		t.Fatal("a second rejoin while one runs")
	}
	l.Rejoined()
	if l.Fenced(t0.Add(14 * time.Second)) {
		t.Fatal("fenced after the rejoin")
	}
	l.TakenOver()
	if !l.Fenced(t0.Add(11 * time.Second)) {
		t.Fatal("a lease another run took takes appends")
	}
}

func TestRate(t *testing.T) {
	t.Parallel()
	ttl := 6 * time.Second
	if _, measured := Rate(ttl, t0, 0, t0.Add(999*time.Millisecond), 1<<20); measured {
		t.Fatal("measured over less than a sixth of a lease")
	}
	rate, measured := Rate(ttl, t0, 1<<20, t0.Add(2*time.Second), 5<<20)
	if !measured || rate != 2<<20 {
		t.Fatalf("rate %v measured %v, want 2 MiB/s", rate, measured)
	}
}

func TestEvict(t *testing.T) {
	t.Parallel()
	tests := []struct {
		live, draining, gone bool
		move, isGone         bool
	}{
		{live: true},
		{live: true, draining: true, move: true},
		{live: false, gone: false}, // late, its lease read again: not gone
		{live: false, gone: true, move: true, isGone: true},
	}
	for _, tt := range tests {
		move, gone := Evict(tt.live, tt.draining, tt.gone)
		if move != tt.move || gone != tt.isGone {
			t.Errorf("Evict(live %v, draining %v, gone %v) = %v, %v", tt.live, tt.draining, tt.gone, move, gone)
		}
	}
}

func TestEntry(t *testing.T) {
	t.Parallel()
	e := Entry{TTL: 6 * time.Second}
	if e.Next() != TakeEntry || e.Fenced(t0) {
		t.Fatal("a node without the role: takes it, and is not fenced")
	}
	exp := e.Expiry(t0)
	e.Took(7, exp)
	if e.Next() != RenewEntry || e.Rev != 7 {
		t.Fatalf("after taking: %+v", e)
	}
	if e.Fenced(t0.Add(5*time.Second - time.Nanosecond)) {
		t.Fatal("fenced before expiry less the margin")
	}
	if !e.Fenced(t0.Add(5 * time.Second)) {
		t.Fatal("renewals failed past the margin and not fenced")
	}
	e.Renewed(8, e.Expiry(t0.Add(4*time.Second)))
	if e.Fenced(t0.Add(8 * time.Second)) {
		t.Fatal("fenced after a renewal")
	}
	e.Lost()
	if e.Next() != TakeEntry || e.Fenced(t0.Add(time.Hour)) {
		t.Fatal("after losing the role: take it again, and not fenced (it takes no requests)")
	}
	if r := Released(t0); !r.Before(t0) {
		t.Fatal("a released role does not lapse at once")
	}
}

// TestEntryDefer: the metadata stream's leader leaves a free entry role to
// the other live nodes for MaxDeferred rounds in a row, then takes it; a
// node that does not lead it, or is alone, never waits.
func TestEntryDefer(t *testing.T) {
	t.Parallel()
	var e Entry
	for _, tt := range []struct {
		leads  bool
		others int
		want   bool
	}{
		{leads: false, others: 2, want: false},
		{leads: true, others: 0, want: false},
		{leads: true, others: 2, want: true},
		{leads: true, others: 2, want: true},
		{leads: true, others: 2, want: false}, // MaxDeferred rounds left to the others: it takes it
		{leads: true, others: 2, want: true},  // counted again from there
	} {
		if got := e.Defer(tt.leads, tt.others); got != tt.want {
			t.Fatalf("Defer(%v, %d) after %d deferred rounds = %v, want %v", tt.leads, tt.others, e.Deferred, got, tt.want)
		}
	}
	e.Took(1, t0)
	if e.Deferred != 0 {
		t.Fatalf("deferred rounds kept after taking the role: %d", e.Deferred)
	}
}

// TestSightings: a lease runs a TTL from when this node first read its
// revision, whatever expiry its writer's clock put in it; a stale read
// changes nothing.
func TestSightings(t *testing.T) {
	t.Parallel()
	s := Sightings{TTL: 6 * time.Second}
	if got := s.Expiry("n1", 4, t0); !got.Equal(t0.Add(6 * time.Second)) {
		t.Fatalf("first read: expiry %v", got)
	}
	if got := s.Expiry("n1", 4, t0.Add(5*time.Second)); !got.Equal(t0.Add(6 * time.Second)) {
		t.Fatalf("the same revision read again moved the expiry to %v", got)
	}
	if got := s.Expiry("n1", 3, t0.Add(5*time.Second)); !got.Equal(t0.Add(6 * time.Second)) {
		t.Fatalf("a stale revision moved the expiry to %v", got)
	}
	if got := s.Expiry("n1", 7, t0.Add(5*time.Second)); !got.Equal(t0.Add(11 * time.Second)) {
		t.Fatalf("a renewal read at +5s: expiry %v, want +11s", got)
	}
	if got := s.Expiry("n2", 7, t0.Add(9*time.Second)); !got.Equal(t0.Add(15 * time.Second)) {
		t.Fatalf("another key shares the first one's sighting: %v", got)
	}
	if !GivenUp(1000, 999) || !GivenUp(1000, 1000) || GivenUp(1000, 1001) {
		t.Fatal("GivenUp")
	}
}
