package consumers

import (
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/braidmq/braid/topology"
)

func TestSegmentDrained(t *testing.T) {
	t.Parallel()
	seg := func(state topology.State, buckets int) topology.Segment {
		return topology.Segment{ID: 7, State: state, Buckets: buckets}
	}
	tests := []struct {
		name        string
		seg         topology.Segment
		acked, next []uint64
		want        bool
	}{
		{"active is never drained", seg(topology.StateActive, 1), []uint64{5}, []uint64{5}, false},
		{"deleted always is", seg(topology.StateDeleted, 2), nil, nil, true},
		{"sealed and fully acked", seg(topology.StateSealed, 2), []uint64{3, 9}, []uint64{3, 9}, true},
		{"sealed with one bucket behind", seg(topology.StateSealed, 2), []uint64{3, 8}, []uint64{3, 9}, false},
		{"sealed and empty", seg(topology.StateSealed, 3), []uint64{0, 0, 0}, []uint64{0, 0, 0}, true},
		{"bucket count mismatch", seg(topology.StateSealed, 2), []uint64{0}, []uint64{0}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := segmentDrained(tt.seg, tt.acked, tt.next); got != tt.want {
				t.Fatalf("segmentDrained = %v, want %v", got, tt.want)
			}
		})
	}
}

// unitTable is plain data for newlyDrained: the next offset of every unit
// (absent: unknown bounds), the first retained offset and ack cursors.
type unitTable struct {
	next, first, acked map[topology.Unit]uint64
}

func (ut unitTable) drainedNow(l topology.Layout, drained map[topology.SegmentID]bool) []topology.SegmentID {
	return newlyDrained(l, func(id topology.SegmentID) bool { return drained[id] },
		func(u topology.Unit) uint64 { return ut.acked[u] },
		func(u topology.Unit) (uint64, uint64, bool) {
			next, ok := ut.next[u]
			return ut.first[u], next, ok
		})
}

// readableAfterDraining plays what the group does: mark what is drained now,
// then ask the ordering rule what is readable.
func readableAfterDraining(l topology.Layout, ut unitTable, drained map[topology.SegmentID]bool) []topology.SegmentID {
	for _, id := range ut.drainedNow(l, drained) {
		drained[id] = true
	}
	return topology.Readable(l, func(id topology.SegmentID) bool { return drained[id] })
}

func mustLayout(t *testing.T) func(topology.Layout, error) topology.Layout {
	return func(l topology.Layout, err error) topology.Layout {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
}

func TestReadableAcrossSplit(t *testing.T) {
	t.Parallel()
	l := mustLayout(t)(topology.New(1, 2))
	l = mustLayout(t)(l.Split(0, nil)) // 0 -> 1, 2
	ut := unitTable{
		next:  map[topology.Unit]uint64{u(0, 0): 10, u(0, 1): 4, u(1, 0): 3, u(1, 1): 0, u(2, 0): 1, u(2, 1): 1},
		first: map[topology.Unit]uint64{},
		acked: map[topology.Unit]uint64{u(0, 0): 10, u(0, 1): 3},
	}
	drained := map[topology.SegmentID]bool{}
	if got := readableAfterDraining(l, ut, drained); !slices.Equal(got, []topology.SegmentID{0}) {
		t.Fatalf("readable %v with parent bucket 1 one behind, want [0]", got)
	}
	ut.acked[u(0, 1)] = 4
	if got := readableAfterDraining(l, ut, drained); !slices.Equal(got, []topology.SegmentID{1, 2}) {
		t.Fatalf("readable %v with the parent drained, want [1 2]", got)
	}
	units := topology.ReadableUnits(l, func(id topology.SegmentID) bool { return drained[id] })
	if want := []topology.Unit{u(1, 0), u(1, 1), u(2, 0), u(2, 1)}; !slices.Equal(units, want) {
		t.Fatalf("readable units %v, want %v", units, want)
	}
}

func TestReadableAcrossMerge(t *testing.T) {
	t.Parallel()
	l := mustLayout(t)(topology.New(2, 2)) // 0 and 1, one bucket each
	l = mustLayout(t)(l.Merge(0, 1))       // -> 2
	ut := unitTable{
		next:  map[topology.Unit]uint64{u(0, 0): 5, u(1, 0): 7, u(2, 0): 2},
		first: map[topology.Unit]uint64{},
		acked: map[topology.Unit]uint64{u(0, 0): 5, u(1, 0): 6},
	}
	drained := map[topology.SegmentID]bool{}
	if got := readableAfterDraining(l, ut, drained); !slices.Equal(got, []topology.SegmentID{1}) {
		t.Fatalf("readable %v with one parent drained, want [1]", got)
	}
	ut.acked[u(1, 0)] = 7
	if got := readableAfterDraining(l, ut, drained); !slices.Equal(got, []topology.SegmentID{2}) {
		t.Fatalf("readable %v with both parents drained, want [2]", got)
	}
}

// TestReadableEmptyMiddle is apache/pulsar#26274: the middle segment 1 got
// nothing, so it is drained at once, but its children 3 and 4 must still
// wait for the grandparent 0.
func TestReadableEmptyMiddle(t *testing.T) {
	t.Parallel()
	l := mustLayout(t)(topology.New(1, 1))
	l = mustLayout(t)(l.Split(0, nil)) // 0 -> 1, 2
	l = mustLayout(t)(l.Split(1, nil)) // 1 -> 3, 4
	ut := unitTable{
		next:  map[topology.Unit]uint64{u(0, 0): 6, u(1, 0): 0, u(2, 0): 2, u(3, 0): 4, u(4, 0): 4},
		first: map[topology.Unit]uint64{},
		acked: map[topology.Unit]uint64{u(0, 0): 2},
	}
	drained := map[topology.SegmentID]bool{}
	if got := readableAfterDraining(l, ut, drained); !slices.Equal(got, []topology.SegmentID{0}) {
		t.Fatalf("readable %v, want only the grandparent [0]", got)
	}
	if !drained[1] {
		t.Fatal("the empty middle segment 1 is not drained")
	}
	if w := withheldUnits(l, func(id topology.SegmentID) bool { return drained[id] }); !slices.Equal(w, []topology.Unit{u(2, 0), u(3, 0), u(4, 0)}) {
		t.Fatalf("withheld %v, want 2/0 3/0 4/0", w)
	}
	ut.acked[u(0, 0)] = 6
	if got := readableAfterDraining(l, ut, drained); !slices.Equal(got, []topology.SegmentID{2, 3, 4}) {
		t.Fatalf("readable %v once the grandparent is drained, want [2 3 4]", got)
	}
}

func TestNewlyDrainedRetentionAndUnknownBounds(t *testing.T) {
	t.Parallel()
	l := mustLayout(t)(topology.New(1, 2))
	l = mustLayout(t)(l.Split(0, nil))
	ut := unitTable{
		next:  map[topology.Unit]uint64{u(0, 0): 10, u(0, 1): 5},
		first: map[topology.Unit]uint64{u(0, 0): 10, u(0, 1): 5}, // retention removed everything
		acked: map[topology.Unit]uint64{},
	}
	if got := ut.drainedNow(l, nil); !slices.Equal(got, []topology.SegmentID{0}) {
		t.Fatalf("drained %v, want [0]: offsets removed by retention count as acknowledged", got)
	}
	delete(ut.next, u(0, 1))
	if got := ut.drainedNow(l, nil); len(got) != 0 {
		t.Fatalf("drained %v with a bucket's bounds unknown, want none", got)
	}
	l = mustLayout(t)(l.Delete(0))
	if got := ut.drainedNow(l, nil); !slices.Equal(got, []topology.SegmentID{0}) {
		t.Fatalf("drained %v, want the deleted segment [0]", got)
	}
}

// TestDeliveryCounts checks deliveryCounts against a dumb reference: one
// counter per offset.
func TestDeliveryCounts(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(3, 4))
	for trial := range 500 {
		var d deliveryCounts
		ref := make([]uint32, 64)
		acked, delivered := uint64(0), uint64(0)
		for step := range 40 {
			switch r.IntN(4) {
			case 0: // deliver more
				delivered = min(delivered+uint64(r.IntN(10)), 64)
			case 1: // ack some
				acked += uint64(r.IntN(int(delivered-acked) + 1))
				d.trim(acked)
			case 2: // the owner dies
				for o := acked; o < delivered; o++ {
					ref[o]++
				}
				d.rewind(acked, delivered)
				delivered = acked
			case 3: // a fetch reply was lost: redeliver from somewhere past acked
				from := acked + uint64(r.IntN(int(delivered-acked)+1))
				for o := from; o < delivered; o++ {
					ref[o]++
				}
				d.rewindFrom(acked, from, delivered)
				delivered = from
			}
			for o := acked; o < 64; o++ {
				if got := d.at(o); got != ref[o] {
					t.Fatalf("trial %d step %d: at(%d) = %d, want %d (spans %v)", trial, step, o, got, ref[o], d)
				}
			}
			for i := 1; i < len(d); i++ {
				if d[i-1].end >= d[i].end {
					t.Fatalf("trial %d: span ends not increasing: %v", trial, d)
				}
			}
		}
	}
}

var recordConsumers = []string{"a", "b", "c-1", "reader_2"}

func randomRecord(r *rand.Rand, kind recordKind) stateRecord {
	rec := stateRecord{Kind: kind}
	if kind.hasStart() {
		rec.Start = startPosition(r.IntN(2))
	}
	if kind.hasCursors() {
		for range r.IntN(6) {
			rec.Cursors = append(rec.Cursors, unitCursor{Unit: u(r.IntN(8), r.IntN(3)), Acked: uint64(r.IntN(1000))})
		}
		for range r.IntN(3) {
			rec.Drained = append(rec.Drained, topology.SegmentID(r.IntN(8)))
		}
	}
	if kind.hasOwners() {
		for range r.IntN(6) {
			owner := recordConsumers[r.IntN(len(recordConsumers))]
			if kind == kindOwners && r.IntN(4) == 0 {
				owner = "" // released
			}
			rec.Owners = append(rec.Owners, unitOwner{Unit: u(r.IntN(8), r.IntN(3)), Owner: owner})
		}
		for range r.IntN(3) {
			rec.Sessions = append(rec.Sessions, consumerSession{
				Consumer: recordConsumers[r.IntN(len(recordConsumers))],
				Timeout:  time.Duration(1+r.IntN(1000)) * 10 * time.Millisecond,
			})
		}
	}
	rec.normalize()
	return rec
}

func equalStates(a, b subscriptionState) bool {
	return a.Created == b.Created && a.Start == b.Start && maps.Equal(a.Cursors, b.Cursors) && maps.Equal(a.Drained, b.Drained) &&
		maps.Equal(a.Owners, b.Owners) && maps.Equal(a.Sessions, b.Sessions)
}

// checkInvariants fails when s breaks an invariant of subscriptionState.
func checkInvariants(t *testing.T, trial int, s subscriptionState) {
	t.Helper()
	for unit := range s.Cursors {
		if s.Drained[unit.Segment] {
			t.Fatalf("trial %d: cursor kept for drained segment %d", trial, unit.Segment)
		}
	}
	owning := make(map[string]bool)
	for unit, name := range s.Owners {
		if s.Drained[unit.Segment] || name == "" {
			t.Fatalf("trial %d: owner %q kept for unit %v (drained %v)", trial, name, unit, s.Drained[unit.Segment])
		}
		owning[name] = true
	}
	for name := range s.Sessions {
		if !owning[name] {
			t.Fatalf("trial %d: session kept for %q, which owns nothing", trial, name)
		}
	}
}

// TestReplaySnapshot: replaying any history, or the snapshot of its state,
// gives the same state; and a cursor never moves back.
func TestReplaySnapshot(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(5, 6))
	for trial := range 500 {
		s := newSubscriptionState()
		history := []stateRecord{randomRecord(r, kindCreated)}
		for range r.IntN(20) {
			kind := kindUpdate
			switch n := r.IntN(20); {
			case n == 0:
				kind = kindSnapshot
			case n == 1:
				kind = kindSnapshotOwners
			case n < 10:
				kind = kindOwners
			}
			history = append(history, randomRecord(r, kind))
		}
		for _, rec := range history {
			before := maps.Clone(s.Cursors)
			// Every record goes through the codec, as it does on disk.
			decoded, err := decodeRecord(encodeRecord(nil, rec))
			if err != nil {
				t.Fatal(err)
			}
			if err := s.apply(decoded); err != nil {
				t.Fatal(err)
			}
			if rec.Kind == kindUpdate {
				for unit, c := range before {
					if s.Cursors[unit] < c && !s.Drained[unit.Segment] {
						t.Fatalf("trial %d: cursor of %v moved back from %d to %d", trial, unit, c, s.Cursors[unit])
					}
				}
			}
			checkInvariants(t, trial, s)
		}
		snap := s.snapshot()
		if snap.Kind != kindSnapshotOwners {
			t.Fatalf("snapshot of kind %d, want %d", snap.Kind, kindSnapshotOwners)
		}
		fromSnapshot := newSubscriptionState()
		decoded, err := decodeRecord(encodeRecord(nil, snap))
		if err != nil {
			t.Fatal(err)
		}
		if err := fromSnapshot.apply(decoded); err != nil {
			t.Fatal(err)
		}
		if !equalStates(s, fromSnapshot) {
			t.Fatalf("trial %d: snapshot replays to %+v, want %+v", trial, fromSnapshot, s)
		}
	}
}

func TestApplyUpdateBeforeCreate(t *testing.T) {
	t.Parallel()
	for _, kind := range []recordKind{kindUpdate, kindOwners} {
		s := newSubscriptionState()
		if err := s.apply(stateRecord{Kind: kind}); err == nil {
			t.Fatalf("a record of kind %d before created was accepted", kind)
		}
	}
}

// TestApplyOwners: owners are set and cleared, drained segments drop
// theirs, and sessions follow the consumers that own something.
func TestApplyOwners(t *testing.T) {
	t.Parallel()
	s := newSubscriptionState()
	steps := []stateRecord{
		{Kind: kindCreated},
		{Kind: kindOwners, Owners: []unitOwner{{u(0, 0), "a"}, {u(0, 1), "b"}, {u(1, 0), "a"}},
			Sessions: []consumerSession{{"a", time.Second}, {"b", 2 * time.Second}}},
		{Kind: kindOwners, Owners: []unitOwner{{u(0, 1), ""}}},    // b owns nothing: its session goes
		{Kind: kindUpdate, Drained: []topology.SegmentID{0}},      // a keeps 1/0 only
		{Kind: kindOwners, Owners: []unitOwner{{u(0, 0), "c"}}},   // a drained segment takes no owner
		{Kind: kindOwners, Sessions: []consumerSession{{"c", 5}}}, // nor a session for one that owns nothing
	}
	for _, rec := range steps {
		rec.normalize()
		if err := s.apply(rec); err != nil {
			t.Fatal(err)
		}
	}
	if want := map[topology.Unit]string{u(1, 0): "a"}; !maps.Equal(s.Owners, want) {
		t.Fatalf("owners %v, want %v", s.Owners, want)
	}
	if want := map[string]time.Duration{"a": time.Second}; !maps.Equal(s.Sessions, want) {
		t.Fatalf("sessions %v, want %v", s.Sessions, want)
	}
}
