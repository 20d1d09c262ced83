package topology

import (
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

func TestAncestors(t *testing.T) {
	t.Parallel()
	l := history(t)
	tests := []struct {
		id   SegmentID
		want []SegmentID
	}{
		{0, nil},
		{2, []SegmentID{0}},
		{6, []SegmentID{0, 2, 3, 5}},
		{7, []SegmentID{1}},
		{9, []SegmentID{0, 2, 4}},
		{42, nil},
	}
	for _, tt := range tests {
		if got := l.Ancestors(tt.id); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Ancestors(%d) = %v, want %v", tt.id, got, tt.want)
		}
	}
	for _, id := range []SegmentID{0, 2, 3, 5} {
		if !l.IsDescendant(6, id) {
			t.Errorf("6 should descend from %d", id)
		}
	}
	for _, pair := range [][2]SegmentID{{6, 6}, {6, 1}, {6, 4}, {0, 6}, {7, 0}, {42, 0}, {6, 42}} {
		if l.IsDescendant(pair[0], pair[1]) {
			t.Errorf("%d should not descend from %d", pair[0], pair[1])
		}
	}
}

// TestEmptyMiddleSegment is apache/pulsar#26274: grandparent 0 still has a
// backlog, middle segment 1 got no message and is drained at once, child 3
// holds newer messages of the same keys. Checking direct parents only would
// release 3 before 0 and reorder those keys.
func TestEmptyMiddleSegment(t *testing.T) {
	t.Parallel()
	l := mustNew(t, 1, 1)
	l = must(t)(l.Split(0, nil)) // 0 -> 1, 2
	l = must(t)(l.Split(1, nil)) // 1 -> 3, 4
	drained := drainedSet{1: true}
	if got := Readable(l, drained.has); !reflect.DeepEqual(got, []SegmentID{0}) {
		t.Fatalf("Readable = %v, want [0]: children of the drained middle segment must wait for the grandparent", got)
	}
	for _, id := range []SegmentID{1, 2, 3, 4} {
		if id != 1 && MayRead(l, id, drained.has) {
			t.Errorf("MayRead(%d) with the grandparent undrained", id)
		}
	}
	drained[0] = true
	if got := Readable(l, drained.has); !reflect.DeepEqual(got, []SegmentID{2, 3, 4}) {
		t.Fatalf("Readable = %v, want [2 3 4]", got)
	}
	// Deleting the grandparent (retention removed its data) releases too.
	l = must(t)(l.Delete(0))
	if got := Readable(l, drainedSet{1: true}.has); !reflect.DeepEqual(got, []SegmentID{2, 3, 4}) {
		t.Fatalf("Readable after deleting 0 = %v, want [2 3 4]", got)
	}
}

// TestMigratedFixedTopic: a child is readable only once all N partitions
// are drained, whatever order they drain in.
func TestMigratedFixedTopic(t *testing.T) {
	t.Parallel()
	const n = 4
	l, err := FromFixed(n, 2)
	if err != nil {
		t.Fatal(err)
	}
	drained := drainedSet{}
	for i, p := range []SegmentID{2, 0, 3, 1} {
		if got := Readable(l, drained.has); len(got) != n-i || got[0] >= n {
			t.Fatalf("with %d partitions drained: Readable = %v", i, got)
		}
		for c := SegmentID(n); c < 2*n; c++ {
			if MayRead(l, c, drained.has) {
				t.Fatalf("child %d readable with only %v drained", c, drained)
			}
		}
		drained[p] = true
	}
	if got := Readable(l, drained.has); !reflect.DeepEqual(got, []SegmentID{4, 5, 6, 7}) {
		t.Fatalf("Readable = %v, want the 4 children", got)
	}
	units := ReadableUnits(l, drained.has)
	if len(units) != 8 || units[0] != (Unit{4, 0}) || units[7] != (Unit{7, 1}) {
		t.Fatalf("ReadableUnits = %v", units)
	}
}

func TestReadableEdgeCases(t *testing.T) {
	t.Parallel()
	l := history(t)
	// A nil predicate means nothing is drained: only the roots are readable.
	if got := Readable(l, nil); !reflect.DeepEqual(got, []SegmentID{0, 1}) {
		t.Errorf("Readable(nil) = %v", got)
	}
	// Claims that active segments are drained are ignored.
	all := func(SegmentID) bool { return true }
	if got := Readable(l, all); !reflect.DeepEqual(got, []SegmentID{6, 7, 8, 9}) {
		t.Errorf("Readable(all) = %v, want the active segments", got)
	}
	if MayRead(l, 42, all) {
		t.Error("MayRead of an unknown segment")
	}
	l = must(t)(l.Delete(5))
	if MayRead(l, 5, all) {
		t.Error("MayRead of a deleted segment")
	}
	// MayRead ignores whether the segment itself is drained.
	if !MayRead(l, 0, all) {
		t.Error("MayRead(0) false")
	}
	if got := ReadableUnits(l, nil); !reflect.DeepEqual(got, []Unit{{0, 0}, {0, 1}, {1, 0}, {1, 1}}) {
		t.Errorf("ReadableUnits = %v", got)
	}
}

// TestReadableAgainstDefinition checks the one-pass Readable against the
// rule written out naively with Ancestors, on random layouts and random
// drained sets.
func TestReadableAgainstDefinition(t *testing.T) {
	t.Parallel()
	for seed := range uint64(10) {
		rng := rand.New(rand.NewPCG(seed, 7))
		l := randomLayout(t, rng, 200)
		for range 10 {
			drained := drainedSet{}
			for _, s := range l.Segments {
				if rng.IntN(3) > 0 {
					drained[s.ID] = true
				}
			}
			var want []SegmentID
			for _, s := range l.Segments {
				done := func(id SegmentID) bool {
					a, _ := l.Segment(id)
					return a.State == StateDeleted || a.State == StateSealed && drained[id]
				}
				ok := s.State != StateDeleted
				for _, a := range l.Ancestors(s.ID) {
					ok = ok && done(a)
				}
				if ok != MayRead(l, s.ID, drained.has) {
					t.Fatalf("seed %d: MayRead(%d) = %v, want %v", seed, s.ID, !ok, ok)
				}
				if ok && !done(s.ID) {
					want = append(want, s.ID)
				}
			}
			if got := Readable(l, drained.has); !slices.Equal(got, want) {
				t.Fatalf("seed %d: Readable = %v, want %v", seed, got, want)
			}
		}
	}
}

// TestDrainSimulation drains a random layout the way an ordered
// subscription would — pick any readable sealed segment, drain it — and
// checks at every step that no hash has two readable owners (that would let
// a later message of a key be delivered before an earlier one), and that
// the subscription always reaches the active segments (no deadlock).
func TestDrainSimulation(t *testing.T) {
	t.Parallel()
	for seed := range uint64(10) {
		rng := rand.New(rand.NewPCG(seed, 11))
		var l Layout
		if seed%3 == 0 {
			l = must(t)(FromFixed(1+rng.IntN(5), 1))
			l = randomWalk(t, rng, l, 150)
		} else {
			l = randomLayout(t, rng, 150)
		}
		hashes := randomHashes(rng, l, 10)
		chains := make([][]SegmentID, len(hashes))
		for i, h := range hashes {
			chains[i] = owners(l, h)
		}
		drained := drainedSet{}
		for step := 0; ; step++ {
			readable := Readable(l, drained.has)
			for i, h := range hashes {
				var readableOwners []SegmentID
				for _, id := range chains[i] {
					if _, ok := slices.BinarySearch(readable, id); ok {
						readableOwners = append(readableOwners, id)
					}
				}
				if len(readableOwners) > 1 {
					t.Fatalf("seed %d step %d: hash %s has readable owners %v", seed, step, FormatHash(h), readableOwners)
				}
			}
			var sealed []SegmentID
			for _, id := range readable {
				if s, _ := l.Segment(id); s.State == StateSealed {
					sealed = append(sealed, id)
				}
			}
			if len(sealed) == 0 {
				var active []SegmentID
				for _, s := range l.Segments {
					if s.State == StateActive {
						active = append(active, s.ID)
					}
				}
				if !slices.Equal(readable, active) {
					t.Fatalf("seed %d: stuck with readable %v, active %v", seed, readable, active)
				}
				break
			}
			drained[sealed[rng.IntN(len(sealed))]] = true
		}
	}
}
