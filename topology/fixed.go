package topology

import (
	"cmp"
	"errors"
	"slices"
)

// Fixed topics (persistent://tenant/namespace/name): N partitions, each an
// active segment over the whole key space whose Partition is its index; a
// key goes to partition hash % N (routing.FixedPartition). A fixed layout
// holds nothing else: its partitions do not split, merge or rebucket, and
// are only ever added to (AddPartitions). Migrate turns it in place into
// the layout FromFixed describes: the partitions, keeping their ids (and so
// their logs), become sealed parents of N active children of equal ranges,
// each child with every partition as a parent.

// ErrFixed is returned by Split, Merge, Rebucket and Relocate on a fixed
// layout (its partitions do not move: their logs are where they were
// created), and
// by AddPartitions and Migrate on a layout that is not fixed or with a
// partition count they refuse.
var ErrFixed = errors.New("braid/topology: fixed topic")

// NewFixed returns the layout of a fixed topic of the given partitions, each
// a segment of one bucket (a partition is one unit).
func NewFixed(partitions int) (Layout, error) {
	if partitions < 1 || partitions > MaxInitialSegments {
		return Layout{}, errorf(ErrInvalid, "partition count %d is outside [1, %d]", partitions, MaxInitialSegments)
	}
	segs := make([]Segment, partitions)
	for i := range segs {
		segs[i] = Segment{ID: SegmentID(i), Range: FullRange, State: StateActive, Buckets: 1, CreatedEpoch: 1, Partition: i}
	}
	return Layout{Epoch: 1, NextID: SegmentID(partitions), Segments: segs}, nil
}

// Fixed reports whether l is the layout of a fixed topic not migrated yet:
// all its segments are partitions.
func (l Layout) Fixed() bool {
	for i := range l.Segments {
		if l.Segments[i].Partition < 0 {
			return false
		}
	}
	return len(l.Segments) > 0
}

// Partitions returns the partition segments of l in partition order: the
// active partitions of a fixed topic, the sealed parents of a migrated one,
// none for a topic that was always scalable.
func (l Layout) Partitions() []Segment {
	var out []Segment
	for i := range l.Segments {
		if l.Segments[i].Partition >= 0 {
			out = append(out, l.Segments[i])
		}
	}
	slices.SortFunc(out, func(a, b Segment) int { return cmp.Compare(a.Partition, b.Partition) })
	return out
}

// AddPartitions returns l, a fixed layout, grown to total partitions (more
// than it has): new partition segments, in the next epoch. Keys remap
// (hash % total): the order of a key across the change is not kept.
func (l Layout) AddPartitions(total int) (Layout, error) {
	if !l.Fixed() {
		return Layout{}, errorf(ErrFixed, "cannot add partitions: not a fixed topic")
	}
	have := len(l.Partitions())
	if total <= have || total > MaxInitialSegments {
		return Layout{}, errorf(ErrFixed, "cannot grow %d partitions to %d: want more than %d and at most %d (partitions are never removed)",
			have, total, have, MaxInitialSegments)
	}
	if err := l.room(total - have); err != nil {
		return Layout{}, err
	}
	epoch := l.Epoch + 1
	segs := slices.Clone(l.Segments)
	owner := ""
	if len(segs) > 0 {
		owner = segs[0].Owner
	}
	for i := have; i < total; i++ {
		segs = append(segs, Segment{ID: l.NextID + SegmentID(i-have), Range: FullRange, State: StateActive, Buckets: 1,
			CreatedEpoch: epoch, Partition: i, Owner: owner})
	}
	return Layout{Epoch: epoch, NextID: l.NextID + SegmentID(total-have), Segments: segs}, nil
}

// Migrate returns l, a fixed layout of N partitions, as a scalable one in
// the next epoch: every partition sealed, keeping its id, and N active
// children of equal ranges and bucketsPerChild buckets each, every child
// with all N partitions as parents (any key of a child may be in any
// partition), on the partition's owner of the same index.
func (l Layout) Migrate(bucketsPerChild int) (Layout, error) {
	if !l.Fixed() {
		return Layout{}, errorf(ErrFixed, "cannot migrate: not a fixed topic (or migrated already)")
	}
	if bucketsPerChild < 1 || bucketsPerChild > MaxBuckets {
		return Layout{}, errorf(ErrBuckets, "bucket count %d is outside [1, %d]", bucketsPerChild, MaxBuckets)
	}
	parts := l.Partitions()
	n := len(parts)
	if err := l.room(n); err != nil {
		return Layout{}, err
	}
	sealed := make([]int, n)
	for i, p := range parts {
		sealed[i] = l.index(p.ID)
	}
	slices.Sort(sealed)
	ranges := equalRanges(n)
	children := make([]Segment, n)
	for i := range children {
		children[i] = Segment{Range: ranges[i], Buckets: bucketsPerChild}
	}
	out := l.succeed(sealed, children...)
	for i := range n {
		out.Segments[len(l.Segments)+i].Owner = parts[i].Owner
	}
	return out, nil
}

// validateFixed checks a fixed layout: every segment an active partition
// root over the whole space, the partitions numbered 0..k-1.
func (l Layout) validateFixed() error {
	for i := range l.Segments {
		s := &l.Segments[i]
		bad := func(format string, args ...any) error {
			return errorf(ErrInvalid, "invalid layout: fixed topic: segment %d: "+format, append([]any{s.ID}, args...)...)
		}
		switch {
		case s.State != StateActive || s.Partition < 0:
			return bad("is %s, partition %d: a fixed topic holds only active partitions", s.State, s.Partition)
		case len(s.Parents) > 0 || len(s.Children) > 0 || !s.Range.IsFull() || s.SealedEpoch != 0:
			return bad("a partition is a root over the whole space, never sealed")
		case s.Buckets < 1 || s.Buckets > MaxBuckets:
			return bad("bucket count %d is outside [1, %d]", s.Buckets, MaxBuckets)
		case s.CreatedEpoch < 1 || s.CreatedEpoch > l.Epoch:
			return bad("created epoch %d is outside [1, %d]", s.CreatedEpoch, l.Epoch)
		case !validOwner(s.Owner):
			return bad("owner %q is not a node id", s.Owner)
		}
	}
	return l.validatePartitions(len(l.Segments))
}
