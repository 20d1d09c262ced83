package topology

import (
	"cmp"
	"fmt"
	"math"
	"slices"
)

// Validate checks every invariant of a layout and returns an error wrapping
// ErrInvalid that names the first one broken:
//
//   - Epoch >= 1; segment ids are strictly increasing and below NextID;
//   - each segment has a known state, Lo <= Hi, Buckets in [1, MaxBuckets],
//     Partition >= -1, and 1 <= CreatedEpoch <= Epoch;
//   - an active segment has SealedEpoch 0 and no children; a sealed or deleted
//     one has CreatedEpoch <= SealedEpoch <= Epoch and at least one child;
//   - Parents and Children are strictly ascending, name known segments, and
//     mirror each other; every parent has a smaller id than its child (so the
//     DAG is acyclic) and a child's CreatedEpoch is its parents' SealedEpoch;
//   - coverage: the children of a sealed segment are pairwise disjoint, each
//     overlaps it, and together they cover its range; the same holds for the
//     parents of a segment, partitions aside (so every hash of a segment has
//     exactly one predecessor and, once sealed, exactly one successor);
//   - a partition segment (Partition >= 0) is a sealed or deleted root over the
//     whole space, and the partition indices are exactly 0..k-1; a segment with
//     a partition parent has all k partitions as parents and no other parent;
//   - base segments (those without parents other than partitions) are pairwise
//     disjoint;
//   - the active segments tile [0, 2^64-1] exactly: no gap, no overlap.
//
// A fixed topic's layout (Fixed) has rules of its own: see validateFixed.
//
// Together these give the property the ordering rule relies on: for every
// hash h, the segments that ever owned h (with the chain of partition
// h % k in place of all partitions) form one chain, each an ancestor of the
// next.
//
// Operations keep these invariants; Validate exists for decoded layouts and
// for tests.
func (l Layout) Validate() error {
	if l.Epoch < 1 {
		return errorf(ErrInvalid, "invalid layout: epoch is 0")
	}
	for i := range l.Segments {
		s := &l.Segments[i]
		if i > 0 && s.ID <= l.Segments[i-1].ID {
			return errorf(ErrInvalid, "invalid layout: segment %d follows segment %d: ids must be strictly increasing",
				s.ID, l.Segments[i-1].ID)
		}
		if s.ID >= l.NextID {
			return errorf(ErrInvalid, "invalid layout: segment %d is not below next id %d", s.ID, l.NextID)
		}
	}
	// Ids are sorted, so index works from here on.
	if l.Fixed() {
		return l.validateFixed()
	}
	for i := range l.Segments {
		if err := l.validateSegment(&l.Segments[i]); err != nil {
			return err
		}
	}
	partitions := l.partitionCount()
	// Every segment is well-formed and its links name known segments.
	for i := range l.Segments {
		if err := l.validateMirror(&l.Segments[i], partitions); err != nil {
			return err
		}
	}
	if err := l.validatePartitions(partitions); err != nil {
		return err
	}
	var scratch []Range
	for i := range l.Segments {
		if err := l.validateCoverage(&l.Segments[i], &scratch); err != nil {
			return err
		}
	}
	if err := l.validateBases(); err != nil {
		return err
	}
	return l.validateTiling()
}

// validateSegment checks what can be checked on s alone, plus that its
// links name known segments on the right side of it.
func (l Layout) validateSegment(s *Segment) error {
	bad := func(format string, args ...any) error {
		return errorf(ErrInvalid, "invalid layout: segment %d: "+format, append([]any{s.ID}, args...)...)
	}
	if !s.State.valid() {
		return bad("unknown state %q", s.State)
	}
	if s.Range.Lo > s.Range.Hi {
		return bad("range %s is empty (Lo > Hi)", s.Range)
	}
	if s.Buckets < 1 || s.Buckets > MaxBuckets {
		return bad("bucket count %d is outside [1, %d]", s.Buckets, MaxBuckets)
	}
	if s.Partition < -1 {
		return bad("partition %d is below -1", s.Partition)
	}
	if !validOwner(s.Owner) {
		return bad("owner %q is not a node id (up to %d letters, digits, '-' and '_')", s.Owner, MaxOwnerLen)
	}
	if len(s.Replicas) > MaxReplicas {
		return bad("%d replicas, more than %d", len(s.Replicas), MaxReplicas)
	}
	for i, r := range s.Replicas {
		switch {
		case r.Node == "" || !validOwner(r.Node) || r.Incarnation == "" || !validOwner(r.Incarnation):
			return bad("replica %d (%q, incarnation %q) is not a node id and an incarnation", i, r.Node, r.Incarnation)
		case i == 0 && r.Node != s.Owner:
			return bad("its first replica is on %s, not its owner %q", r.Node, s.Owner)
		}
		for _, o := range s.Replicas[:i] {
			if o.Node == r.Node {
				return bad("two replicas on node %s", r.Node)
			}
		}
	}
	if s.CreatedEpoch < 1 || s.CreatedEpoch > l.Epoch {
		return bad("created epoch %d is outside [1, %d]", s.CreatedEpoch, l.Epoch)
	}
	if s.State == StateActive {
		if s.SealedEpoch != 0 {
			return bad("active but sealed epoch is %d", s.SealedEpoch)
		}
		if len(s.Children) > 0 {
			return bad("active but has children %v", s.Children)
		}
		if s.Partition >= 0 {
			return bad("active but is partition %d of a fixed topic", s.Partition)
		}
	} else {
		if s.SealedEpoch < s.CreatedEpoch || s.SealedEpoch > l.Epoch {
			return bad("sealed epoch %d is outside [%d, %d]", s.SealedEpoch, s.CreatedEpoch, l.Epoch)
		}
		if len(s.Children) == 0 {
			return bad("%s but has no children: its range would have no successor", s.State)
		}
	}
	if s.Partition >= 0 && (len(s.Parents) > 1 || !s.Range.IsFull()) {
		return bad("partition %d must be over the whole space, following at most the partition's segment before it", s.Partition)
	}
	for i, p := range s.Parents {
		if i > 0 && p <= s.Parents[i-1] {
			return bad("parents %v are not strictly ascending", s.Parents)
		}
		if p >= s.ID {
			return bad("parent %d does not have a smaller id", p)
		}
		if l.index(p) < 0 {
			return bad("parent %d does not exist", p)
		}
	}
	for i, c := range s.Children {
		if i > 0 && c <= s.Children[i-1] {
			return bad("children %v are not strictly ascending", s.Children)
		}
		if c <= s.ID {
			return bad("child %d does not have a larger id", c)
		}
		if l.index(c) < 0 {
			return bad("child %d does not exist", c)
		}
	}
	return nil
}

// validateMirror checks that s and its parents agree on their links and
// epochs. Run on every segment, it checks the children's side too. k is the
// number of partitions.
func (l Layout) validateMirror(s *Segment, k int) error {
	partitionParents := 0
	var seen []bool // partitions among the parents of a successor of partitions
	for _, id := range s.Parents {
		p := &l.Segments[l.index(id)]
		if s.Partition >= 0 {
			// A partition's successor (it moved to another node): the
			// partition's segment before it, and nothing else.
			if p.Partition != s.Partition || len(p.Children) != 1 {
				return errorf(ErrInvalid, "invalid layout: segment %d of partition %d follows segment %d, which is not that partition's segment sealed with it as only successor",
					s.ID, s.Partition, id)
			}
		} else if p.Partition >= 0 {
			partitionParents++
			if seen == nil {
				seen = make([]bool, k)
			}
			if p.Partition >= k || seen[p.Partition] {
				return errorf(ErrInvalid, "invalid layout: segment %d has parents %v: partition %d is repeated or not in [0, %d)",
					s.ID, s.Parents, p.Partition, k)
			}
			seen[p.Partition] = true
		}
		if _, listed := slices.BinarySearch(p.Children, s.ID); !listed {
			return errorf(ErrInvalid, "invalid layout: segment %d lists parent %d, which does not list it as a child", s.ID, id)
		}
		if p.SealedEpoch != s.CreatedEpoch {
			return errorf(ErrInvalid, "invalid layout: segment %d was created in epoch %d but parent %d was sealed in epoch %d",
				s.ID, s.CreatedEpoch, id, p.SealedEpoch)
		}
	}
	if partitionParents > 0 && (partitionParents != len(s.Parents) || partitionParents != k) {
		return errorf(ErrInvalid, "invalid layout: segment %d has parents %v: a successor of partitions must have all %d partitions as parents and nothing else",
			s.ID, s.Parents, k)
	}
	for _, id := range s.Children {
		c := &l.Segments[l.index(id)]
		if _, listed := slices.BinarySearch(c.Parents, s.ID); !listed {
			return errorf(ErrInvalid, "invalid layout: segment %d lists child %d, which does not list it as a parent", s.ID, id)
		}
	}
	return nil
}

// validateCoverage checks that the parents of s, and its children, tile its
// range. *scratch is memory reused from one call to the next.
func (l Layout) validateCoverage(s *Segment, scratch *[]Range) error {
	bad := func(format string, args ...any) error {
		return errorf(ErrInvalid, "invalid layout: segment %d: "+format, append([]any{s.ID}, args...)...)
	}
	parentRanges := (*scratch)[:0]
	for _, id := range s.Parents {
		p := &l.Segments[l.index(id)]
		if p.Partition >= 0 {
			continue // validateMirror checked that s has all of them
		}
		if !p.Range.Overlaps(s.Range) {
			return bad("range %s does not overlap parent %d %s", s.Range, id, p.Range)
		}
		parentRanges = append(parentRanges, p.Range)
	}
	if len(parentRanges) > 0 {
		if err := tiles(parentRanges, s.Range); err != "" {
			return bad("parents %v do not tile its range %s: %s", s.Parents, s.Range, err)
		}
	}
	childRanges := parentRanges[:0]
	defer func() { *scratch = childRanges }()
	for _, id := range s.Children {
		c := &l.Segments[l.index(id)]
		if !c.Range.Overlaps(s.Range) {
			return bad("range %s does not overlap child %d %s", s.Range, id, c.Range)
		}
		childRanges = append(childRanges, c.Range)
	}
	if len(childRanges) > 0 {
		if err := tiles(childRanges, s.Range); err != "" {
			return bad("children %v do not tile its range %s: %s", s.Children, s.Range, err)
		}
	}
	return nil
}

// tiles reports why ranges, each known to overlap target, do not cover
// target without overlapping one another, or "" if they do. They may reach
// beyond target (a merge child reaches beyond each parent). It sorts ranges
// in place.
func tiles(ranges []Range, target Range) string {
	slices.SortFunc(ranges, func(a, b Range) int { return cmp.Compare(a.Lo, b.Lo) })
	for i := 1; i < len(ranges); i++ {
		if ranges[i].Lo <= ranges[i-1].Hi {
			return fmt.Sprintf("%s and %s overlap", ranges[i-1], ranges[i])
		}
	}
	next := target.Lo // the first hash of target not yet covered
	for _, r := range ranges {
		if r.Lo > next {
			return fmt.Sprintf("%s is not covered", Range{Lo: next, Hi: min(r.Lo-1, target.Hi)})
		}
		if r.Hi >= target.Hi {
			return ""
		}
		next = r.Hi + 1 // r.Hi < target.Hi <= MaxUint64: no overflow
	}
	return fmt.Sprintf("%s is not covered", Range{Lo: next, Hi: target.Hi})
}

// validateBases checks that the base segments — those whose only parents,
// if any, are partitions — are pairwise disjoint. With the per-link tiling
// this makes the owners of every hash one chain.
func (l Layout) validateBases() error {
	var bases []idRange
	for i := range l.Segments {
		s := &l.Segments[i]
		if s.Partition >= 0 {
			continue
		}
		if len(s.Parents) == 0 || l.Segments[l.index(s.Parents[0])].Partition >= 0 {
			bases = append(bases, idRange{s.ID, s.Range})
		}
	}
	sortByLo(bases)
	for i := 1; i < len(bases); i++ {
		if prev, cur := bases[i-1], bases[i]; cur.Range.Lo <= prev.Range.Hi {
			return errorf(ErrInvalid, "invalid layout: segments %d %s and %d %s overlap and neither descends from the other",
				prev.ID, prev.Range, cur.ID, cur.Range)
		}
	}
	return nil
}

type idRange struct {
	ID    SegmentID
	Range Range
}

func sortByLo(rs []idRange) {
	slices.SortFunc(rs, func(a, b idRange) int { return cmp.Compare(a.Range.Lo, b.Range.Lo) })
}

// validatePartitions checks that the k partition roots are numbered
// exactly 0..k-1 and that every partition segment names one of them.
func (l Layout) validatePartitions(k int) error {
	if k == 0 {
		return nil
	}
	seen := make([]bool, k)
	for i := range l.Segments {
		s := &l.Segments[i]
		if s.Partition < 0 {
			continue
		}
		if s.Partition >= k || (len(s.Parents) == 0 && seen[s.Partition]) {
			return errorf(ErrInvalid, "invalid layout: segment %d: partition %d is repeated or not in [0, %d)", s.ID, s.Partition, k)
		}
		if len(s.Parents) == 0 {
			seen[s.Partition] = true
		}
	}
	return nil
}

// validateTiling checks that the active segments tile the whole space.
func (l Layout) validateTiling() error {
	var active []idRange
	for i := range l.Segments {
		if s := &l.Segments[i]; s.State == StateActive {
			active = append(active, idRange{s.ID, s.Range})
		}
	}
	sortByLo(active)
	if len(active) == 0 {
		return errorf(ErrInvalid, "invalid layout: no active segment: the key space has no owner")
	}
	if active[0].Range.Lo != 0 {
		return errorf(ErrInvalid, "invalid layout: hashes [%s,%s] have no active segment",
			FormatHash(0), FormatHash(active[0].Range.Lo-1))
	}
	for i := 1; i < len(active); i++ {
		prev, cur := active[i-1], active[i]
		switch {
		case prev.Range.Hi == math.MaxUint64 || cur.Range.Lo <= prev.Range.Hi:
			return errorf(ErrInvalid, "invalid layout: active segments %d %s and %d %s overlap",
				prev.ID, prev.Range, cur.ID, cur.Range)
		case cur.Range.Lo != prev.Range.Hi+1:
			return errorf(ErrInvalid, "invalid layout: hashes [%s,%s] between active segments %d and %d have no owner",
				FormatHash(prev.Range.Hi+1), FormatHash(cur.Range.Lo-1), prev.ID, cur.ID)
		}
	}
	if last := active[len(active)-1]; last.Range.Hi != math.MaxUint64 {
		return errorf(ErrInvalid, "invalid layout: hashes [%s,%s] have no active segment",
			FormatHash(last.Range.Hi+1), FormatHash(math.MaxUint64))
	}
	return nil
}
