package topology

import (
	"fmt"
	"strings"
)

// OpKind names a layout operation. Kinds are metric label values: lower
// case, stable.
type OpKind string

// The layout operations an Op carries, one per operation of this package.
const (
	// OpSplit seals Segments[0] and tiles its range with children: two at
	// the midpoint when At is empty, else one more than len(At).
	OpSplit OpKind = "split"
	// OpMerge seals the adjacent Segments[0] and Segments[1] and creates
	// one child over their union.
	OpMerge OpKind = "merge"
	// OpRebucket seals Segments[0] and creates a successor with its range
	// and Buckets entry buckets.
	OpRebucket OpKind = "rebucket"
	// OpDelete marks the sealed Segments deleted (retention removed their
	// data), one epoch each, in the order given.
	OpDelete OpKind = "delete"
	// OpRelocate seals the active Segments and gives each a successor
	// with its range on node Owner.
	OpRelocate OpKind = "relocate"
	// OpMigrate turns a fixed topic into a scalable one, with Buckets
	// entry buckets per child.
	OpMigrate OpKind = "migrate"
	// OpPartitions grows a fixed topic to Partitions partitions.
	OpPartitions OpKind = "partitions"
)

// Op is one layout operation as data: what to do, not how. It is what a
// layout change request carries (an admin request, a scaling decision, a
// retention delete, a relocation) and what Apply and PlanChange take.
// Fields an operation does not use stay zero.
type Op struct {
	Kind OpKind
	// Segments are the segments the operation acts on: one to split or
	// rebucket, two adjacent ones to merge, one or more to delete or
	// relocate, none to migrate or add partitions.
	Segments []SegmentID
	// At are a split's points: the first hash of every child but the
	// first, strictly increasing. Empty splits in two at the midpoint.
	At []uint64
	// Buckets is the entry-bucket count of the successors: a rebucket's
	// new count (required), a split's or merge's children (0: the parent's
	// count, the larger of the two for a merge), a migration's children
	// (0: one).
	Buckets int
	// Owner is the node a relocation moves the segments to.
	Owner string
	// Partitions is the partition count a fixed topic grows to.
	Partitions int
	// Epoch, when not 0, is the layout epoch the operation was decided
	// at: a layout at any other epoch refuses it with ErrStale.
	Epoch uint64
}

// Split is the Op splitting segment id in two, at the midpoint (at nil) or
// with the upper child starting at *at (see Layout.Split).
func Split(id SegmentID, at *uint64) Op {
	op := Op{Kind: OpSplit, Segments: []SegmentID{id}}
	if at != nil {
		op.At = []uint64{*at}
	}
	return op
}

// Merge is the Op merging the adjacent segments a and b.
func Merge(a, b SegmentID) Op { return Op{Kind: OpMerge, Segments: []SegmentID{a, b}} }

// Rebucket is the Op giving segment id a successor of buckets buckets.
func Rebucket(id SegmentID, buckets int) Op {
	return Op{Kind: OpRebucket, Segments: []SegmentID{id}, Buckets: buckets}
}

// Delete is the Op marking the sealed segments ids deleted.
func Delete(ids ...SegmentID) Op { return Op{Kind: OpDelete, Segments: ids} }

// Relocate is the Op moving the active segments ids to node owner.
func Relocate(ids []SegmentID, owner string) Op {
	return Op{Kind: OpRelocate, Segments: ids, Owner: owner}
}

// Migrate is the Op turning a fixed topic into a scalable one.
func Migrate(bucketsPerChild int) Op { return Op{Kind: OpMigrate, Buckets: bucketsPerChild} }

// AddPartitions is the Op growing a fixed topic to total partitions.
func AddPartitions(total int) Op { return Op{Kind: OpPartitions, Partitions: total} }

// DecidedAt returns op decided at layout epoch epoch: applied to a layout
// at any other epoch it is refused with ErrStale.
func (op Op) DecidedAt(epoch uint64) Op {
	op.Epoch = epoch
	return op
}

// Apply returns the layout op makes of l, by the operation of its kind
// (Split, SplitN, Merge, MergeBuckets, Rebucket, Delete, Relocate, Migrate,
// AddPartitions), or the error that operation returns; ErrOp for an Op
// of the wrong shape and ErrStale for one decided at another epoch. l is
// left untouched.
func (l Layout) Apply(op Op) (Layout, error) {
	if op.Epoch != 0 && op.Epoch != l.Epoch {
		return Layout{}, errorf(ErrStale, "%s was decided at epoch %d; the layout is at epoch %d", op, op.Epoch, l.Epoch)
	}
	if err := op.check(); err != nil {
		return Layout{}, err
	}
	switch op.Kind {
	case OpSplit:
		id := op.Segments[0]
		switch {
		case len(op.At) == 0 && op.Buckets == 0:
			return l.Split(id, nil)
		case len(op.At) == 1 && op.Buckets == 0:
			return l.Split(id, &op.At[0])
		case len(op.At) == 0:
			// Two children of a chosen count: SplitN at the midpoint
			// Split would take (its errors for a segment that has none).
			s, ok := l.Segment(id)
			if !ok || s.Range.Lo == s.Range.Hi {
				return l.Split(id, nil)
			}
			return l.SplitN(id, []uint64{s.Range.Mid() + 1}, op.Buckets)
		}
		return l.SplitN(id, op.At, op.Buckets)
	case OpMerge:
		return l.MergeBuckets(op.Segments[0], op.Segments[1], op.Buckets)
	case OpRebucket:
		return l.Rebucket(op.Segments[0], op.Buckets)
	case OpDelete:
		next := l
		for _, id := range op.Segments {
			var err error
			if next, err = next.Delete(id); err != nil {
				return Layout{}, err
			}
		}
		return next, nil
	case OpRelocate:
		return l.Relocate(op.Segments, op.Owner)
	case OpMigrate:
		return l.Migrate(max(op.Buckets, 1))
	case OpPartitions:
		return l.AddPartitions(op.Partitions)
	}
	return Layout{}, errorf(ErrOp, "unknown operation %q", op.Kind)
}

// check refuses an Op naming the wrong number of segments for its kind.
func (op Op) check() error {
	want := ""
	switch n := len(op.Segments); op.Kind {
	case OpSplit, OpRebucket:
		if n != 1 {
			want = "one segment"
		}
	case OpMerge:
		if n != 2 {
			want = "two segments"
		}
	case OpDelete, OpRelocate:
		if n == 0 {
			want = "at least one segment"
		}
	case OpMigrate, OpPartitions:
		if n != 0 {
			want = "no segment"
		}
	default:
		return errorf(ErrOp, "unknown operation %q", op.Kind)
	}
	if want != "" {
		return errorf(ErrOp, "%s names %s, not %v", op.Kind, want, op.Segments)
	}
	return nil
}

// String shows op as the scripts write it: "split 3", "split 3 at
// 0x8000000000000000", "merge 4 5 buckets=2", "relocate 1 2 to node-b",
// "migrate buckets=2", "partitions 8", with "@<epoch>" when it was
// decided at one.
func (op Op) String() string {
	var b strings.Builder
	b.WriteString(string(op.Kind))
	for _, id := range op.Segments {
		fmt.Fprintf(&b, " %d", id)
	}
	for i, h := range op.At {
		if i == 0 {
			b.WriteString(" at")
		}
		b.WriteString(" " + FormatHash(h))
	}
	switch {
	case op.Kind == OpRebucket:
		fmt.Fprintf(&b, " to %d", op.Buckets)
	case op.Buckets != 0:
		fmt.Fprintf(&b, " buckets=%d", op.Buckets)
	}
	if op.Owner != "" {
		b.WriteString(" to " + op.Owner)
	}
	if op.Kind == OpPartitions {
		fmt.Fprintf(&b, " %d", op.Partitions)
	}
	if op.Epoch != 0 {
		fmt.Fprintf(&b, " @%d", op.Epoch)
	}
	return b.String()
}
