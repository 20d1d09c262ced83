package topology

import (
	"errors"
	"slices"
)

// Fixed topics (persistent://tenant/namespace/name): N partitions, each a
// chain of segments over the whole key space whose Partition is its index;
// a key goes to partition hash % N (routing.FixedPartition). A partition
// starts as one active segment (its root); when it moves to another node
// (Relocate: its node was lost or drained) the active segment is sealed
// where its logs are and a successor with the same partition index takes
// its appends, so a partition is a chain root -> successor -> ... whose
// last segment (its tip) is the active one, and the ordering rule has
// readers finish each segment of the chain before the next. A fixed layout
// holds nothing else: its partitions do not split, merge or rebucket, and
// are only ever added to (AddPartitions). Migrate turns it in place into
// the layout FromFixed describes: the partitions' tips, keeping their ids
// (and so their logs), become sealed parents of N active children of
// equal ranges, each child with every partition as a parent.

// ErrFixed is returned by Split, Merge and Rebucket on a fixed layout (a
// partition's range is the whole space, for the topic's life), and by
// AddPartitions and Migrate on a layout that is not fixed or with a
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

// Partitions returns the tip of each partition of l (the last segment of
// its chain) in partition order: the active partitions of a fixed topic,
// the sealed parents of a migrated one's first children, none for a topic
// that was always scalable.
func (l Layout) Partitions() []Segment {
	var out []Segment
	for i := range l.Segments {
		s := &l.Segments[i]
		if s.Partition < 0 {
			continue
		}
		for len(out) <= s.Partition {
			out = append(out, Segment{Partition: -1})
		}
		if out[s.Partition].Partition < 0 || s.ID > out[s.Partition].ID {
			out[s.Partition] = *s // a successor has a larger id
		}
	}
	return slices.DeleteFunc(out, func(s Segment) bool { return s.Partition < 0 })
}

// PartitionOf returns the partition of segment id, or -1 when it is not
// one of a partition's segments.
func (l Layout) PartitionOf(id SegmentID) int {
	if i := l.index(id); i >= 0 {
		return l.Segments[i].Partition
	}
	return -1
}

// AddPartitions returns l, a fixed layout, grown to total partitions (more
// than it has): new partition segments, in the next epoch. Keys remap
// (hash % total): the order of a key across the change is not kept.
func (l Layout) AddPartitions(total int) (Layout, error) {
	if !l.Fixed() {
		return Layout{}, errorf(ErrFixed, "cannot add partitions: not a fixed topic")
	}
	parts := l.Partitions()
	have := len(parts)
	if total <= have || total > MaxInitialSegments {
		return Layout{}, errorf(ErrFixed, "cannot grow %d partitions to %d: want more than %d and at most %d (partitions are never removed)",
			have, total, have, MaxInitialSegments)
	}
	if err := l.room(total - have); err != nil {
		return Layout{}, err
	}
	epoch := l.Epoch + 1
	segs := slices.Clone(l.Segments)
	owner := parts[0].Owner // where partition 0 is now
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

// validateFixed checks a fixed layout: every segment part of a partition's
// chain over the whole space (a root, then successors each the only child
// of the one before, sealed when the next was created), one active tip per
// partition, the partitions numbered 0..k-1.
func (l Layout) validateFixed() error {
	k := l.partitionCount()
	active := make([]bool, k)
	for i := range l.Segments {
		s := &l.Segments[i]
		bad := func(format string, args ...any) error {
			return errorf(ErrInvalid, "invalid layout: fixed topic: segment %d: "+format, append([]any{s.ID}, args...)...)
		}
		switch {
		case s.Partition >= k:
			return bad("partition %d is not in [0, %d)", s.Partition, k)
		case !s.Range.IsFull():
			return bad("range %s: a partition covers the whole space", s.Range)
		case s.Buckets < 1 || s.Buckets > MaxBuckets:
			return bad("bucket count %d is outside [1, %d]", s.Buckets, MaxBuckets)
		case s.CreatedEpoch < 1 || s.CreatedEpoch > l.Epoch:
			return bad("created epoch %d is outside [1, %d]", s.CreatedEpoch, l.Epoch)
		case !validOwner(s.Owner):
			return bad("owner %q is not a node id", s.Owner)
		case len(s.Parents) > 1:
			return bad("parents %v: a partition's segment follows at most the one before it", s.Parents)
		}
		if len(s.Parents) == 1 {
			j := l.index(s.Parents[0])
			if j < 0 || j >= i {
				return bad("parent %d does not exist or does not have a smaller id", s.Parents[0])
			}
			p := &l.Segments[j]
			if p.Partition != s.Partition || !slices.Equal(p.Children, []SegmentID{s.ID}) || p.SealedEpoch != s.CreatedEpoch {
				return bad("follows segment %d, which is not partition %d's segment sealed in epoch %d with it as only successor",
					p.ID, s.Partition, s.CreatedEpoch)
			}
		}
		switch s.State {
		case StateActive:
			if s.SealedEpoch != 0 || len(s.Children) > 0 {
				return bad("active but sealed in epoch %d, children %v", s.SealedEpoch, s.Children)
			}
			if active[s.Partition] {
				return bad("partition %d has another active segment", s.Partition)
			}
			active[s.Partition] = true
		case StateSealed:
			if s.SealedEpoch < s.CreatedEpoch || s.SealedEpoch > l.Epoch {
				return bad("sealed epoch %d is outside [%d, %d]", s.SealedEpoch, s.CreatedEpoch, l.Epoch)
			}
			if len(s.Children) != 1 {
				return bad("sealed with children %v: a partition's sealed segment has one successor", s.Children)
			}
			if j := l.index(s.Children[0]); j < 0 || !slices.Equal(l.Segments[j].Parents, []SegmentID{s.ID}) {
				return bad("child %d does not exist or does not follow it alone", s.Children[0])
			}
		default:
			return bad("is %s: a fixed topic's segments are active or sealed", s.State)
		}
	}
	if err := l.validatePartitions(k); err != nil {
		return err
	}
	if i := slices.Index(active, false); i >= 0 {
		return errorf(ErrInvalid, "invalid layout: fixed topic: partition %d has no active segment", i)
	}
	return nil
}

// partitionCount returns the number of partitions of l: its partition
// roots (partition segments without parents).
func (l Layout) partitionCount() int {
	k := 0
	for i := range l.Segments {
		if s := &l.Segments[i]; s.Partition >= 0 && len(s.Parents) == 0 {
			k++
		}
	}
	return k
}
