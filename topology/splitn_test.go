package topology

import (
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
)

func TestSplitN(t *testing.T) {
	t.Parallel()
	l := mustNew(t, 1, 4)
	quarter := uint64(1) << 62
	next := must(t)(l.SplitN(0, []uint64{quarter, 2 * quarter, 3 * quarter}, 1))
	if next.Epoch != 2 || next.NextID != 5 {
		t.Fatalf("epoch %d next id %d", next.Epoch, next.NextID)
	}
	want := []Range{{0, quarter - 1}, {quarter, 2*quarter - 1}, {2 * quarter, 3*quarter - 1}, {3 * quarter, math.MaxUint64}}
	for i, r := range want {
		s, _ := next.Segment(SegmentID(i + 1))
		if s.Range != r || s.Buckets != 1 || s.State != StateActive || !reflect.DeepEqual(s.Parents, []SegmentID{0}) {
			t.Errorf("child %d = %+v, want range %v with 1 bucket", i+1, s, r)
		}
	}
	if root, _ := next.Segment(0); root.State != StateSealed || !reflect.DeepEqual(root.Children, []SegmentID{1, 2, 3, 4}) {
		t.Errorf("root = %+v", root)
	}
	if d, _ := next.Depth(4); d != 1 {
		t.Errorf("depth of a child of a 4-way split = %d, want 1", d)
	}
	// l is untouched.
	mustValid(t, l)
	if l.Epoch != 1 || len(l.Segments) != 1 || l.Segments[0].State != StateActive {
		t.Errorf("SplitN modified its receiver: %+v", l)
	}
}

func TestSplitNKeepsBuckets(t *testing.T) {
	t.Parallel()
	l := mustNew(t, 2, 6)
	next := must(t)(l.SplitN(1, []uint64{l.Segments[1].Range.Lo + 1}, 0))
	for _, id := range []SegmentID{2, 3} {
		if s, _ := next.Segment(id); s.Buckets != 3 {
			t.Errorf("segment %d has %d buckets, want the parent's 3", id, s.Buckets)
		}
	}
}

func TestSplitNIsSplitForOnePoint(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(4, 2))
	l := mustNew(t, 3, 4)
	for range 200 {
		active := l.Active()
		s := active[rng.IntN(len(active))]
		if s.Range.Lo == s.Range.Hi {
			continue
		}
		at := s.Range.Lo + 1 + rng.Uint64N(s.Range.Hi-s.Range.Lo)
		a := must(t)(l.Split(s.ID, &at))
		b := must(t)(l.SplitN(s.ID, []uint64{at}, 0))
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("Split and SplitN differ at %s:\n%s\n%s", FormatHash(at), formatLayout(a), formatLayout(b))
		}
		l = a
	}
}

func TestSplitNRefusals(t *testing.T) {
	t.Parallel()
	l := mustNew(t, 2, 2)
	lo, hi := l.Segments[1].Range.Lo, l.Segments[1].Range.Hi
	tooMany := make([]uint64, MaxSplitWays)
	for i := range tooMany {
		tooMany[i] = lo + 1 + uint64(i)
	}
	cases := []struct {
		name    string
		id      SegmentID
		at      []uint64
		buckets int
		want    error
	}{
		{"unknown", 9, []uint64{lo + 1}, 0, ErrUnknownSegment},
		{"no point", 1, nil, 0, ErrSplitPoint},
		{"at Lo", 1, []uint64{lo}, 0, ErrSplitPoint},
		{"below Lo", 1, []uint64{lo - 1}, 0, ErrSplitPoint},
		{"above Hi", 0, []uint64{lo}, 0, ErrSplitPoint},
		{"not increasing", 1, []uint64{lo + 5, lo + 5}, 0, ErrSplitPoint},
		{"decreasing", 1, []uint64{hi, lo + 5}, 0, ErrSplitPoint},
		{"too many", 1, tooMany, 0, ErrSplitPoint},
		{"negative buckets", 1, []uint64{lo + 1}, -1, ErrBuckets},
		{"too many buckets", 1, []uint64{lo + 1}, MaxBuckets + 1, ErrBuckets},
	}
	for _, c := range cases {
		_, err := l.SplitN(c.id, c.at, c.buckets)
		if err == nil {
			t.Errorf("%s: no error", c.name)
			continue
		}
		wantErr(t, err, c.want)
	}
	sealed := must(t)(l.SplitN(1, []uint64{lo + 1}, 0))
	_, err := sealed.SplitN(1, []uint64{lo + 2}, 0)
	wantErr(t, err, ErrNotActive)
}

func TestMergeBuckets(t *testing.T) {
	t.Parallel()
	l := mustNew(t, 2, 2)
	m := must(t)(l.MergeBuckets(0, 1, 4))
	if s, _ := m.Segment(2); s.Buckets != 4 || !s.Range.IsFull() {
		t.Errorf("merged segment = %+v, want the full range with 4 buckets", s)
	}
	if keep := must(t)(l.MergeBuckets(1, 0, 0)); !reflect.DeepEqual(keep, must(t)(l.Merge(0, 1))) {
		t.Errorf("MergeBuckets with 0 differs from Merge")
	}
	if l.Segments[0].State != StateActive {
		t.Errorf("MergeBuckets modified its receiver")
	}
	_, err := l.MergeBuckets(0, 1, MaxBuckets+1)
	wantErr(t, err, ErrBuckets)
	_, err = l.MergeBuckets(0, 0, 2)
	wantErr(t, err, ErrNotAdjacent)
}
