package topology

import (
	"math"
	"reflect"
	"testing"
)

func TestNew(t *testing.T) {
	t.Parallel()
	tests := []struct {
		segments, budget int
		wantBuckets      []int
	}{
		{1, 4, []int{4}},
		{2, 4, []int{2, 2}},
		{3, 4, []int{2, 1, 1}},
		{4, 10, []int{3, 3, 2, 2}},
		{8, 4, []int{1, 1, 1, 1, 1, 1, 1, 1}},
		{2, 1, []int{1, 1}},
		{1, MaxBuckets, []int{MaxBuckets}},
	}
	for _, tt := range tests {
		l := mustNew(t, tt.segments, tt.budget)
		if l.Epoch != 1 || l.NextID != SegmentID(tt.segments) || len(l.Segments) != tt.segments {
			t.Fatalf("New(%d, %d): epoch %d, next id %d, %d segments", tt.segments, tt.budget, l.Epoch, l.NextID, len(l.Segments))
		}
		var buckets []int
		for i, s := range l.Segments {
			buckets = append(buckets, s.Buckets)
			if s.ID != SegmentID(i) || s.State != StateActive || s.Partition != -1 || s.CreatedEpoch != 1 {
				t.Errorf("New(%d, %d): segment %d = %+v", tt.segments, tt.budget, i, s)
			}
		}
		if !reflect.DeepEqual(buckets, tt.wantBuckets) {
			t.Errorf("New(%d, %d): buckets %v, want %v", tt.segments, tt.budget, buckets, tt.wantBuckets)
		}
	}

	// Equal widths; the last segment takes the remainder.
	l := mustNew(t, 3, 4)
	width := l.Segments[0].Range.Hi - l.Segments[0].Range.Lo
	if width != 0x5555555555555554 || l.Segments[1].Range.Hi-l.Segments[1].Range.Lo != width {
		t.Errorf("New(3): ranges %v %v", l.Segments[0].Range, l.Segments[1].Range)
	}
	if last := l.Segments[2].Range; last.Hi != math.MaxUint64 || last.Hi-last.Lo != width+1 {
		t.Errorf("New(3): last range %v", last)
	}
	for _, n := range []int{5, 7, 100, MaxInitialSegments} {
		mustNew(t, n, 4)
	}

	refusals := []struct {
		segments, budget int
		want             error
	}{
		{0, 4, ErrInvalid},
		{-1, 4, ErrInvalid},
		{MaxInitialSegments + 1, 4, ErrInvalid},
		{2, 0, ErrBuckets},
		{2, -3, ErrBuckets},
		{1, MaxBuckets + 1, ErrBuckets},
		{2, 2*MaxBuckets + 1, ErrBuckets},
	}
	for _, r := range refusals {
		_, err := New(r.segments, r.budget)
		wantErr(t, err, r.want)
	}
}

func TestFromFixed(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 2, 3, 16, 100} {
		l, err := FromFixed(n, 2)
		if err != nil {
			t.Fatal(err)
		}
		mustValid(t, l)
		if l.Epoch != 1 || l.NextID != SegmentID(2*n) {
			t.Fatalf("FromFixed(%d): epoch %d next %d", n, l.Epoch, l.NextID)
		}
		for i := range n {
			p, c := l.Segments[i], l.Segments[n+i]
			if p.Partition != i || p.State != StateSealed || !p.Range.IsFull() || p.SealedEpoch != 1 || len(p.Children) != n || p.Buckets != 1 {
				t.Errorf("FromFixed(%d): partition %d = %+v", n, i, p)
			}
			if c.State != StateActive || c.Partition != -1 || len(c.Parents) != n || c.Buckets != 2 {
				t.Errorf("FromFixed(%d): child %d = %+v", n, n+i, c)
			}
		}
		if got := len(l.Active()); got != n {
			t.Errorf("FromFixed(%d): %d active", n, got)
		}
	}
	for _, r := range []struct {
		partitions, buckets int
		want                error
	}{
		{0, 1, ErrInvalid}, {MaxInitialSegments + 1, 1, ErrInvalid}, {2, 0, ErrBuckets}, {2, MaxBuckets + 1, ErrBuckets},
	} {
		_, err := FromFixed(r.partitions, r.buckets)
		wantErr(t, err, r.want)
	}
}

// history returns a small layout with every kind of segment:
//
//	0 [0, 7f..]   split into 2 and 3       1 [80.., ff..]  rebucketed into 7
//	2 [0, 3f..]   split into 4 and 5       3 [40.., 7f..]  merged with 5 into 6
//	4 [0, 1f..]   split at 1f..ff into 8 [0, 1f..fe] and 9 [1f..ff] (one hash)
//
// Active: 8, 9, 6 [20.., 7f..] with 2 buckets, 7 [80.., ff..] with 8.
func history(t testing.TB) Layout {
	t.Helper()
	l := mustNew(t, 2, 4)                            // 0 [0,7f..], 1 [80..,ff..]
	l = must(t)(l.Split(0, nil))                     // 2 [0,3f..], 3 [40..,7f..]
	l = must(t)(l.Split(2, nil))                     // 4 [0,1f..], 5 [20..,3f..]
	l = must(t)(l.Merge(5, 3))                       // 6 [20..,7f..]
	l = must(t)(l.Rebucket(1, 8))                    // 7 [80..,ff..] with 8 buckets
	l = must(t)(l.Split(4, ptr(0x1fffffffffffffff))) // 8 [0,1f..fe], 9 [1f..ff]
	return l
}

func TestSplit(t *testing.T) {
	t.Parallel()
	base := history(t)
	tests := []struct {
		name         string
		id           SegmentID
		at           *uint64
		want         error
		lower, upper Range
	}{
		{name: "midpoint", id: 6, lower: Range{0x2000000000000000, 0x4fffffffffffffff}, upper: Range{0x5000000000000000, 0x7fffffffffffffff}},
		{name: "at", id: 7, at: ptr(0x8000000000000001), lower: Range{1 << 63, 1 << 63}, upper: Range{1<<63 + 1, math.MaxUint64}},
		{name: "at last hash", id: 7, at: ptr(math.MaxUint64), lower: Range{1 << 63, math.MaxUint64 - 1}, upper: Range{math.MaxUint64, math.MaxUint64}},
		{name: "two-hash range", id: 8, at: ptr(1), lower: Range{0, 0}, upper: Range{1, 0x1ffffffffffffffe}},
		{name: "sealed", id: 0, want: ErrNotActive},
		{name: "deleted", id: 5, want: ErrNotActive},
		{name: "unknown", id: 10, want: ErrUnknownSegment},
		{name: "far unknown", id: math.MaxUint64, want: ErrUnknownSegment},
		{name: "single hash", id: 9, want: ErrSplitPoint},
		{name: "single hash at", id: 9, at: ptr(0x1fffffffffffffff), want: ErrSplitPoint},
		{name: "at lo", id: 6, at: ptr(0x2000000000000000), want: ErrSplitPoint},
		{name: "below lo", id: 6, at: ptr(0), want: ErrSplitPoint},
		{name: "above hi", id: 6, at: ptr(1 << 63), want: ErrSplitPoint},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := base
			if tt.name == "deleted" {
				l = must(t)(l.Delete(5))
			}
			got, err := l.Split(tt.id, tt.at)
			if tt.want != nil {
				wantErr(t, err, tt.want)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			mustValid(t, got)
			parent, _ := got.Segment(tt.id)
			lo, _ := got.Segment(l.NextID)
			hi, _ := got.Segment(l.NextID + 1)
			if got.Epoch != l.Epoch+1 || got.NextID != l.NextID+2 {
				t.Errorf("epoch %d next %d after epoch %d next %d", got.Epoch, got.NextID, l.Epoch, l.NextID)
			}
			if parent.State != StateSealed || parent.SealedEpoch != got.Epoch || !reflect.DeepEqual(parent.Children, []SegmentID{lo.ID, hi.ID}) {
				t.Errorf("parent after split: %+v", parent)
			}
			if lo.Range != tt.lower || hi.Range != tt.upper {
				t.Errorf("children %v %v, want %v %v", lo.Range, hi.Range, tt.lower, tt.upper)
			}
			for _, c := range []Segment{lo, hi} {
				if c.Buckets != parent.Buckets || c.CreatedEpoch != got.Epoch || !reflect.DeepEqual(c.Parents, []SegmentID{tt.id}) {
					t.Errorf("child %+v of %+v", c, parent)
				}
			}
		})
	}
}

func TestMerge(t *testing.T) {
	t.Parallel()
	base := history(t)
	// Active: 8 [0, 1f..fe], 9 [1f..ff], 6 [20.., 7f..], 7 [80.., ff..].
	tests := []struct {
		name string
		a, b SegmentID
		want error
		r    Range
	}{
		{name: "in order", a: 6, b: 7, r: Range{0x2000000000000000, math.MaxUint64}},
		{name: "reversed", a: 7, b: 6, r: Range{0x2000000000000000, math.MaxUint64}},
		{name: "single hash", a: 8, b: 9, r: Range{0, 0x1fffffffffffffff}},
		{name: "not adjacent", a: 8, b: 6, want: ErrNotAdjacent},
		{name: "ends of space", a: 8, b: 7, want: ErrNotAdjacent},
		{name: "same", a: 6, b: 6, want: ErrNotAdjacent},
		{name: "sealed a", a: 3, b: 6, want: ErrNotActive},
		{name: "sealed b", a: 9, b: 5, want: ErrNotActive},
		{name: "unknown a", a: 42, b: 6, want: ErrUnknownSegment},
		{name: "unknown b", a: 6, b: 42, want: ErrUnknownSegment},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := base.Merge(tt.a, tt.b)
			if tt.want != nil {
				wantErr(t, err, tt.want)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			mustValid(t, got)
			child, _ := got.Segment(base.NextID)
			sa, _ := got.Segment(tt.a)
			sb, _ := got.Segment(tt.b)
			if child.Range != tt.r || child.Buckets != max(sa.Buckets, sb.Buckets) {
				t.Errorf("child %+v", child)
			}
			if !reflect.DeepEqual(child.Parents, []SegmentID{min(tt.a, tt.b), max(tt.a, tt.b)}) {
				t.Errorf("child parents %v", child.Parents)
			}
			for _, p := range []Segment{sa, sb} {
				if p.State != StateSealed || p.SealedEpoch != got.Epoch || !reflect.DeepEqual(p.Children, []SegmentID{child.ID}) {
					t.Errorf("parent %+v", p)
				}
			}
			if got.Epoch != base.Epoch+1 || got.NextID != base.NextID+1 {
				t.Errorf("epoch %d next %d", got.Epoch, got.NextID)
			}
		})
	}
	// The merged bucket count is the larger one.
	got := must(t)(base.Merge(6, 7))
	if c, _ := got.Segment(base.NextID); c.Buckets != 8 {
		t.Errorf("merged buckets %d, want 8", c.Buckets)
	}
}

func TestRebucket(t *testing.T) {
	t.Parallel()
	base := history(t) // 6 has 2 buckets, 7 has 8
	tests := []struct {
		name    string
		id      SegmentID
		buckets int
		want    error
	}{
		{name: "more", id: 6, buckets: 16},
		{name: "fewer", id: 7, buckets: 1},
		{name: "max", id: 7, buckets: MaxBuckets},
		{name: "zero", id: 6, buckets: 0, want: ErrBuckets},
		{name: "negative", id: 6, buckets: -2, want: ErrBuckets},
		{name: "same", id: 7, buckets: 8, want: ErrBuckets},
		{name: "too many", id: 6, buckets: MaxBuckets + 1, want: ErrBuckets},
		{name: "sealed", id: 1, buckets: 3, want: ErrNotActive},
		{name: "unknown", id: 99, buckets: 3, want: ErrUnknownSegment},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := base.Rebucket(tt.id, tt.buckets)
			if tt.want != nil {
				wantErr(t, err, tt.want)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			mustValid(t, got)
			old, _ := got.Segment(tt.id)
			succ, _ := got.Segment(base.NextID)
			if succ.Range != old.Range || succ.Buckets != tt.buckets || !reflect.DeepEqual(succ.Parents, []SegmentID{tt.id}) {
				t.Errorf("successor %+v of %+v", succ, old)
			}
			if old.State != StateSealed || !reflect.DeepEqual(old.Children, []SegmentID{succ.ID}) {
				t.Errorf("old %+v", old)
			}
		})
	}
}

func TestDelete(t *testing.T) {
	t.Parallel()
	base := history(t)
	got := must(t)(base.Delete(0))
	if s, _ := got.Segment(0); s.State != StateDeleted || s.SealedEpoch != 2 || !reflect.DeepEqual(s.Children, []SegmentID{2, 3}) {
		t.Errorf("deleted segment %+v", s)
	}
	if got.Epoch != base.Epoch+1 || got.NextID != base.NextID {
		t.Errorf("epoch %d next %d", got.Epoch, got.NextID)
	}
	// Any sealed segment may be deleted, whatever its ancestors' state.
	must(t)(base.Delete(5))
	_, err := base.Delete(6)
	wantErr(t, err, ErrNotSealed)
	_, err = got.Delete(0)
	wantErr(t, err, ErrNotSealed)
	_, err = base.Delete(77)
	wantErr(t, err, ErrUnknownSegment)
}

// Operations never modify their receiver, and two operations applied to
// the same layout do not see each other (no shared spare capacity).
func TestCopyOnWrite(t *testing.T) {
	t.Parallel()
	base := history(t)
	base.Segments = append(base.Segments[:len(base.Segments):len(base.Segments)], Segment{})[:len(base.Segments)] // spare capacity
	snapshot := base.Clone()
	a := must(t)(base.Split(6, nil))
	b := must(t)(base.Merge(6, 7))
	c := must(t)(base.Rebucket(6, 5))
	d := must(t)(base.Delete(0))
	if !reflect.DeepEqual(base, snapshot) {
		t.Fatalf("receiver modified:\n%s\nwas:\n%s", formatLayout(base), formatLayout(snapshot))
	}
	for _, l := range []Layout{a, b, c, d} {
		mustValid(t, l)
	}
	if s, _ := a.Segment(base.NextID); s.Range != (Range{0x2000000000000000, 0x4fffffffffffffff}) {
		t.Errorf("split child changed by a later merge: %+v", s)
	}
}

func TestOverflow(t *testing.T) {
	t.Parallel()
	l := mustNew(t, 2, 2)
	l.Epoch = math.MaxUint64
	_, err := l.Split(0, nil)
	wantErr(t, err, ErrInvalid)
	l.Epoch = 1
	l.NextID = math.MaxUint64 - 1
	_, err = l.Split(0, nil)
	wantErr(t, err, ErrInvalid)
	must(t)(l.Merge(0, 1))
}

func TestLookups(t *testing.T) {
	t.Parallel()
	l := history(t)
	if s, ok := l.Segment(6); !ok || s.ID != 6 {
		t.Errorf("Segment(6) = %+v, %v", s, ok)
	}
	if _, ok := l.Segment(10); ok {
		t.Error("Segment(10) found")
	}
	var ids []SegmentID
	for _, s := range l.Active() {
		ids = append(ids, s.ID)
	}
	if want := []SegmentID{8, 9, 6, 7}; !reflect.DeepEqual(ids, want) {
		t.Errorf("Active = %v, want %v", ids, want)
	}
	for h, want := range map[uint64]SegmentID{0: 8, 0x1fffffffffffffff: 9, 0x2000000000000000: 6, math.MaxUint64: 7} {
		if s, ok := l.Owner(h); !ok || s.ID != want {
			t.Errorf("Owner(%#x) = %d, %v; want %d", h, s.ID, ok, want)
		}
	}
	depths := map[SegmentID]int{0: 0, 1: 0, 2: 1, 3: 1, 4: 2, 5: 2, 6: 3, 7: 1, 8: 3, 9: 3}
	for id, want := range depths {
		if got, ok := l.Depth(id); !ok || got != want {
			t.Errorf("Depth(%d) = %d, %v; want %d", id, got, ok, want)
		}
	}
	if _, ok := l.Depth(10); ok {
		t.Error("Depth(10) found")
	}
	if got := l.MaxDepth(); got != 3 {
		t.Errorf("MaxDepth = %d, want 3", got)
	}
	if got := (Layout{}).MaxDepth(); got != 0 {
		t.Errorf("empty MaxDepth = %d", got)
	}
	// Lookups also work when ids are not dense (a decoded layout may skip).
	sparse := Layout{Epoch: 1, NextID: 10, Segments: []Segment{{ID: 3, Range: FullRange, State: StateActive, Buckets: 1, CreatedEpoch: 1, Partition: -1}}}
	mustValid(t, sparse)
	if s, ok := sparse.Segment(3); !ok || s.ID != 3 {
		t.Errorf("sparse Segment(3) = %+v, %v", s, ok)
	}
	if _, ok := sparse.Segment(0); ok {
		t.Error("sparse Segment(0) found")
	}
}
