package topology

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// TestValidate breaks one invariant at a time in a valid layout and checks
// that Validate names it.
func TestValidate(t *testing.T) {
	t.Parallel()
	seg := func(l *Layout, id SegmentID) *Segment { return &l.Segments[l.index(id)] }
	fixed := func(t *testing.T) Layout {
		l, err := FromFixed(3, 1)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	tests := []struct {
		name   string
		base   func(*testing.T) Layout
		breaks func(*Layout)
		want   string
	}{
		{"epoch 0", nil, func(l *Layout) { l.Epoch = 0 }, "epoch is 0"},
		{"ids unsorted", nil, func(l *Layout) { l.Segments[1], l.Segments[2] = l.Segments[2], l.Segments[1] }, "strictly increasing"},
		{"duplicate id", nil, func(l *Layout) { l.Segments[2].ID = 1 }, "strictly increasing"},
		{"id not below next id", nil, func(l *Layout) { l.NextID = 9 }, "not below next id 9"},
		{"unknown state", nil, func(l *Layout) { seg(l, 6).State = "paused" }, `unknown state "paused"`},
		{"empty range", nil, func(l *Layout) { seg(l, 6).Range = Range{5, 4} }, "empty"},
		{"no buckets", nil, func(l *Layout) { seg(l, 6).Buckets = 0 }, "bucket count 0"},
		{"too many buckets", nil, func(l *Layout) { seg(l, 0).Buckets = MaxBuckets + 1 }, "bucket count 1025"},
		{"partition below -1", nil, func(l *Layout) { seg(l, 6).Partition = -2 }, "partition -2"},
		{"created epoch 0", nil, func(l *Layout) { seg(l, 0).CreatedEpoch = 0 }, "created epoch 0"},
		{"created in the future", nil, func(l *Layout) { seg(l, 9).CreatedEpoch = 7 }, "created epoch 7"},
		{"active but sealed epoch", nil, func(l *Layout) { seg(l, 9).SealedEpoch = 6 }, "active but sealed epoch"},
		{"active with children", nil, func(l *Layout) { seg(l, 3).State = StateActive; seg(l, 3).SealedEpoch = 0 }, "active but has children"},
		{"sealed without children", nil, func(l *Layout) { seg(l, 9).State = StateSealed; seg(l, 9).SealedEpoch = 6 }, "has no children"},
		{"sealed before created", nil, func(l *Layout) { seg(l, 4).SealedEpoch = 1 }, "sealed epoch 1"},
		{"sealed in the future", nil, func(l *Layout) { seg(l, 4).SealedEpoch = 7 }, "sealed epoch 7"},
		{"parents unsorted", nil, func(l *Layout) { seg(l, 6).Parents = []SegmentID{5, 3} }, "not strictly ascending"},
		{"children duplicated", nil, func(l *Layout) { seg(l, 0).Children = []SegmentID{2, 2, 3} }, "not strictly ascending"},
		{"parent after child", nil, func(l *Layout) { seg(l, 3).Parents = []SegmentID{6} }, "parent 6 does not have a smaller id"},
		{"child before parent", nil, func(l *Layout) { seg(l, 3).Children = []SegmentID{2} }, "child 2 does not have a larger id"},
		{"dangling parent", nil, func(l *Layout) {
			l.Segments = append(l.Segments[:1:1], l.Segments[2:]...) // drop segment 1
		}, "parent 1 does not exist"},
		{"dangling child", nil, func(l *Layout) { l.Segments = l.Segments[:9]; l.NextID = 10 }, "child 9 does not exist"},
		{"parent does not list child", nil, func(l *Layout) { seg(l, 2).Children = []SegmentID{4} }, "does not list it as a child"},
		{"child does not list parent", nil, func(l *Layout) { seg(l, 6).Parents = []SegmentID{5} }, "does not list it as a parent"},
		{"child created after parent sealed", nil, func(l *Layout) { seg(l, 7).CreatedEpoch = 4 }, "segment 7 was created in epoch 4 but parent 1 was sealed in epoch 5"},
		{"parent does not overlap", nil, func(l *Layout) { seg(l, 8).Range = Range{0x2000000000000000, 0x2000000000000000} }, "does not overlap child 8"},
		{"children leave a gap", nil, func(l *Layout) { seg(l, 8).Range.Hi-- }, "not covered"},
		{"children overlap", nil, func(l *Layout) { seg(l, 8).Range.Hi++ }, "overlap"},
		{"merge child beyond its parents", nil, func(l *Layout) { seg(l, 6).Range.Hi = 1 << 63 }, "not covered"},
		{"tiling gap", func(t *testing.T) Layout { return mustNew(t, 2, 2) }, func(l *Layout) { seg(l, 1).Range.Lo++ }, "have no owner"},
		{"tiling gap at start", func(t *testing.T) Layout { return mustNew(t, 2, 2) }, func(l *Layout) { seg(l, 0).Range.Lo = 1 }, "[0x0000000000000000,0x0000000000000000] have no active segment"},
		{"tiling gap at end", func(t *testing.T) Layout { return mustNew(t, 2, 2) }, func(l *Layout) { seg(l, 1).Range.Hi-- }, "have no active segment"},
		{"tiling overlap", func(t *testing.T) Layout { return mustNew(t, 3, 2) }, func(l *Layout) { seg(l, 1).Range.Hi = math.MaxUint64 }, "overlap"},
		{"overlapping roots", func(t *testing.T) Layout { return mustNew(t, 2, 2) }, func(l *Layout) { seg(l, 1).Range = FullRange }, "neither descends"},
		{"no segments", func(t *testing.T) Layout { return Layout{Epoch: 1} }, func(l *Layout) {}, "no active segment"},
		{"active partition", fixed, func(l *Layout) {
			s := seg(l, 0)
			s.State, s.SealedEpoch = StateActive, 0
		}, "active but has children"},
		{"partition not full", fixed, func(l *Layout) { seg(l, 1).Range.Hi-- }, "whole space"},
		{"partition repeated", fixed, func(l *Layout) { seg(l, 1).Partition = 0 }, "partition 0 is repeated"},
		{"partition out of range", fixed, func(l *Layout) { seg(l, 1).Partition = 3 }, "partition 3 is repeated or not in [0, 3)"},
		{"child misses a partition", fixed, func(l *Layout) {
			seg(l, 3).Parents = []SegmentID{0, 1}
			seg(l, 2).Children = []SegmentID{4, 5}
		}, "all 3 partitions"},
		// Two siblings over the same range: 1 and 2 would both own every key
		// of 0, and neither would wait for the other.
		{"siblings overlap", func(t *testing.T) Layout {
			return Layout{Epoch: 3, NextID: 4, Segments: []Segment{
				{ID: 0, Range: FullRange, State: StateSealed, Children: []SegmentID{1, 2}, Buckets: 1, CreatedEpoch: 1, SealedEpoch: 2, Partition: -1},
				{ID: 1, Range: FullRange, State: StateSealed, Parents: []SegmentID{0}, Children: []SegmentID{3}, Buckets: 1, CreatedEpoch: 2, SealedEpoch: 3, Partition: -1},
				{ID: 2, Range: FullRange, State: StateSealed, Parents: []SegmentID{0}, Children: []SegmentID{3}, Buckets: 1, CreatedEpoch: 2, SealedEpoch: 3, Partition: -1},
				{ID: 3, Range: FullRange, State: StateActive, Parents: []SegmentID{1, 2}, Buckets: 1, CreatedEpoch: 3, Partition: -1},
			}}
		}, func(l *Layout) {}, "overlap"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := history
			if tt.base != nil {
				base = func(t testing.TB) Layout { return tt.base(t.(*testing.T)) }
			}
			l := base(t).Clone()
			tt.breaks(&l)
			err := l.Validate()
			if err == nil {
				t.Fatalf("Validate accepted\n%s", formatLayout(l))
			}
			wantErr(t, err, ErrInvalid)
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Validate = %q, want it to mention %q", err, tt.want)
			}
		})
	}
}

// TestValidateImpliesChain corrupts random layouts with small, often
// self-consistent edits (moving a bound, adding or removing a link on both
// sides, changing a state or an epoch). Whatever Validate still accepts must
// keep the property the ordering rule relies on: the owners of every hash
// form one chain.
func TestValidateImpliesChain(t *testing.T) {
	t.Parallel()
	accepted := 0
	for seed := range uint64(40) {
		rng := rand.New(rand.NewPCG(seed, 5))
		var base Layout
		if seed%4 == 0 {
			base = randomWalk(t, rng, must(t)(FromFixed(1+rng.IntN(4), 1)), 30)
		} else {
			base = randomLayout(t, rng, 30)
		}
		for range 200 {
			l := base.Clone()
			for range 1 + rng.IntN(3) {
				mutate(rng, &l)
			}
			if l.Validate() != nil {
				continue
			}
			accepted++
			for _, s := range l.Segments {
				for _, h := range []uint64{s.Range.Lo, s.Range.Hi} {
					if err := checkChain(l, h); err != nil {
						t.Fatalf("Validate accepted a layout that breaks the chain: %v\n%s", err, formatLayout(l))
					}
				}
			}
		}
	}
	t.Logf("%d corrupted layouts passed Validate and kept the chain", accepted)
}

func mutate(rng *rand.Rand, l *Layout) {
	n := len(l.Segments)
	s := &l.Segments[rng.IntN(n)]
	o := &l.Segments[rng.IntN(n)]
	switch rng.IntN(9) {
	case 0:
		s.Range.Lo += uint64(rng.IntN(3)) - 1
	case 1:
		s.Range.Hi += uint64(rng.IntN(3)) - 1
	case 2:
		s.Range.Lo, s.Range.Hi = o.Range.Lo, o.Range.Hi
	case 3:
		s.State = []State{StateActive, StateSealed, StateDeleted}[rng.IntN(3)]
	case 4:
		s.SealedEpoch = o.CreatedEpoch
	case 5, 6: // link o as a child of s on both sides
		if s.ID < o.ID {
			s.Children = insertSorted(s.Children, o.ID)
			o.Parents = insertSorted(o.Parents, s.ID)
		}
	case 7, 8: // unlink a parent on both sides
		if len(s.Parents) > 0 {
			p := s.Parents[rng.IntN(len(s.Parents))]
			s.Parents = removeID(s.Parents, p)
			ps := &l.Segments[l.index(p)]
			ps.Children = removeID(ps.Children, s.ID)
		}
	}
}

func insertSorted(ids []SegmentID, id SegmentID) []SegmentID {
	i, found := slices.BinarySearch(ids, id)
	if found {
		return ids
	}
	return slices.Insert(slices.Clone(ids), i, id)
}

func removeID(ids []SegmentID, id SegmentID) []SegmentID {
	return slices.DeleteFunc(slices.Clone(ids), func(x SegmentID) bool { return x == id })
}
