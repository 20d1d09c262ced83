package topology

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

// TestApplyDispatchesToTheOperations checks that Apply gives, for every
// kind, exactly what the operation it names gives, refusals included.
func TestApplyDispatchesToTheOperations(t *testing.T) {
	t.Parallel()
	l := must(t)(New(3, 6))
	split := must(t)(l.Split(0, nil))
	fixed := must(t)(NewFixed(2))
	cases := []struct {
		name string
		on   Layout
		op   Op
		want func() (Layout, error)
	}{
		{"split at the midpoint", l, Split(0, nil), func() (Layout, error) { return l.Split(0, nil) }},
		{"split at a hash", l, Split(1, ptr(0x6000000000000000)), func() (Layout, error) { return l.Split(1, ptr(0x6000000000000000)) }},
		{"split n ways", l, Op{Kind: OpSplit, Segments: []SegmentID{2}, At: []uint64{0xb000000000000000, 0xd000000000000000}, Buckets: 3},
			func() (Layout, error) { return l.SplitN(2, []uint64{0xb000000000000000, 0xd000000000000000}, 3) }},
		{"split in two of a chosen count", l, Op{Kind: OpSplit, Segments: []SegmentID{0}, Buckets: 5},
			func() (Layout, error) { return l.SplitN(0, []uint64{l.Segments[0].Range.Mid() + 1}, 5) }},
		{"split of an unknown segment", l, Op{Kind: OpSplit, Segments: []SegmentID{9}, Buckets: 5},
			func() (Layout, error) { return l.Split(9, nil) }},
		{"merge", l, Merge(0, 1), func() (Layout, error) { return l.Merge(0, 1) }},
		{"merge of a chosen count", l, Op{Kind: OpMerge, Segments: []SegmentID{1, 2}, Buckets: 7},
			func() (Layout, error) { return l.MergeBuckets(1, 2, 7) }},
		{"merge of non-neighbours", l, Merge(0, 2), func() (Layout, error) { return l.Merge(0, 2) }},
		{"rebucket", l, Rebucket(2, 4), func() (Layout, error) { return l.Rebucket(2, 4) }},
		{"rebucket to the same count", l, Rebucket(2, 2), func() (Layout, error) { return l.Rebucket(2, 2) }},
		{"delete", split, Delete(0), func() (Layout, error) { return split.Delete(0) }},
		{"delete of an active segment", split, Delete(3), func() (Layout, error) { return split.Delete(3) }},
		{"relocate", l, Relocate([]SegmentID{0, 2}, "node-b"), func() (Layout, error) { return l.Relocate([]SegmentID{0, 2}, "node-b") }},
		{"migrate", fixed, Migrate(2), func() (Layout, error) { return fixed.Migrate(2) }},
		{"migrate, one bucket by default", fixed, Migrate(0), func() (Layout, error) { return fixed.Migrate(1) }},
		{"partitions", fixed, AddPartitions(4), func() (Layout, error) { return fixed.AddPartitions(4) }},
		{"partitions of a scalable topic", l, AddPartitions(4), func() (Layout, error) { return l.AddPartitions(4) }},
	}
	for _, c := range cases {
		got, gotErr := c.on.Apply(c.op)
		want, wantErr := c.want()
		if !reflect.DeepEqual(got, want) || (gotErr == nil) != (wantErr == nil) || gotErr != nil && gotErr.Error() != wantErr.Error() {
			t.Errorf("%s: Apply(%s) = %v, %v\nwant %v, %v", c.name, c.op, formatLayout(got), gotErr, formatLayout(want), wantErr)
		}
	}
}

// TestApplyDeletesInOrder: a delete of several segments takes one epoch
// each, and the first refusal refuses it whole.
func TestApplyDeletesInOrder(t *testing.T) {
	t.Parallel()
	l := must(t)(New(2, 2))
	l = must(t)(l.Split(0, nil))
	l = must(t)(l.Split(1, nil))
	next := must(t)(l.Apply(Delete(0, 1)))
	if next.Epoch != l.Epoch+2 {
		t.Fatalf("epoch %d -> %d, want two more", l.Epoch, next.Epoch)
	}
	_, err := l.Apply(Delete(0, 2))
	wantErr(t, err, ErrNotSealed)
}

// TestApplyRefusesMalformedAndStaleOps: the wrong number of segments or an
// unknown kind is ErrOp, an op decided at another epoch ErrStale, and
// neither touches the layout.
func TestApplyRefusesMalformedAndStaleOps(t *testing.T) {
	t.Parallel()
	l := must(t)(New(2, 2))
	snapshot := l.Clone()
	for _, op := range []Op{
		{Kind: OpSplit},
		{Kind: OpSplit, Segments: []SegmentID{0, 1}},
		{Kind: OpMerge, Segments: []SegmentID{0}},
		{Kind: OpRebucket, Segments: []SegmentID{0, 1}, Buckets: 3},
		{Kind: OpDelete},
		{Kind: OpRelocate, Owner: "node-b"},
		{Kind: OpMigrate, Segments: []SegmentID{0}},
		{Kind: OpPartitions, Segments: []SegmentID{0}, Partitions: 3},
		{Kind: "seal", Segments: []SegmentID{0}},
		{},
	} {
		_, err := l.Apply(op)
		wantErr(t, err, ErrOp)
		if _, err := PlanChange(l, op); !errors.Is(err, ErrOp) {
			t.Errorf("PlanChange(%s): %v, want ErrOp", op, err)
		}
	}
	_, err := l.Apply(Split(0, nil).DecidedAt(l.Epoch + 1))
	wantErr(t, err, ErrStale)
	if _, err := l.Apply(Split(0, nil).DecidedAt(l.Epoch)); err != nil {
		t.Fatalf("an op decided at the layout's epoch: %v", err)
	}
	if !reflect.DeepEqual(l, snapshot) {
		t.Fatal("a refused op changed the layout")
	}
}

// TestOpStringParses: an Op reads back from what String prints (the
// scripts' plan command writes ops so).
func TestOpStringParses(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(7, 7))
	kinds := []OpKind{OpSplit, OpMerge, OpRebucket, OpDelete, OpRelocate, OpMigrate, OpPartitions}
	for range 500 {
		op := Op{Kind: kinds[rng.IntN(len(kinds))]}
		switch op.Kind {
		case OpPartitions:
			op.Partitions = 1 + rng.IntN(100)
		case OpMigrate:
			op.Buckets = rng.IntN(4)
		default:
			for range 1 + rng.IntN(3) {
				op.Segments = append(op.Segments, SegmentID(rng.IntN(100)))
			}
		}
		switch op.Kind {
		case OpSplit:
			for range rng.IntN(3) {
				op.At = append(op.At, rng.Uint64())
			}
			op.Buckets = rng.IntN(3)
		case OpMerge:
			op.Buckets = rng.IntN(3)
		case OpRebucket:
			op.Buckets = 1 + rng.IntN(8)
		case OpRelocate:
			op.Owner = "node-" + string(rune('a'+rng.IntN(26)))
		}
		if rng.IntN(3) == 0 {
			op.Epoch = 1 + rng.Uint64N(1000)
		}
		got, err := parseOp(strings.Fields(op.String()))
		if err != nil || !reflect.DeepEqual(got, op) {
			t.Fatalf("%q parses as %+v, %v; want %+v", op, got, err, op)
		}
	}
}
