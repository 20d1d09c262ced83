package topology

import (
	"math"
)

// Split seals the active segment id and creates two active children that
// tile its range: [Lo, p] and [p+1, Hi], with ids NextID and NextID+1. By
// default p = Range.Mid(), so the halves are equal, or the lower one is a
// hash wider. If at is not nil, *at is the first hash of the upper child
// (p = *at-1) and must satisfy Lo < *at <= Hi. Both children inherit the
// parent's bucket count.
//
// Split returns ErrUnknownSegment, ErrNotActive if id is sealed or deleted,
// and ErrSplitPoint if id covers a single hash or *at is out of bounds.
func (l Layout) Split(id SegmentID, at *uint64) (Layout, error) {
	pos, err := l.activeIndex(id, "split")
	if err != nil {
		return Layout{}, err
	}
	parent := l.Segments[pos]
	r := parent.Range
	if r.Lo == r.Hi {
		return Layout{}, errorf(ErrSplitPoint, "segment %d covers the single hash %s and cannot split", id, FormatHash(r.Lo))
	}
	upperLo := r.Mid() + 1
	if at != nil {
		if *at <= r.Lo || *at > r.Hi {
			return Layout{}, errorf(ErrSplitPoint,
				"split point %s is not inside segment %d %s: the upper child must start at a hash in [%s,%s]",
				FormatHash(*at), id, r, FormatHash(r.Lo+1), FormatHash(r.Hi))
		}
		upperLo = *at
	}
	if err := l.room(2); err != nil {
		return Layout{}, err
	}
	return l.succeed([]int{pos},
		Segment{Range: Range{Lo: r.Lo, Hi: upperLo - 1}, Buckets: parent.Buckets},
		Segment{Range: Range{Lo: upperLo, Hi: r.Hi}, Buckets: parent.Buckets},
	), nil
}

// Merge seals the active segments a and b, which must be adjacent (in either
// order), and creates one active child whose range is their union and whose
// bucket count is the larger of theirs.
//
// Merge returns ErrUnknownSegment, ErrNotActive if either is sealed or
// deleted, and ErrNotAdjacent if a == b or their ranges do not touch.
func (l Layout) Merge(a, b SegmentID) (Layout, error) {
	if a == b {
		return Layout{}, errorf(ErrNotAdjacent, "cannot merge segment %d with itself", a)
	}
	posA, err := l.activeIndex(a, "merge")
	if err != nil {
		return Layout{}, err
	}
	posB, err := l.activeIndex(b, "merge")
	if err != nil {
		return Layout{}, err
	}
	sa, sb := l.Segments[posA], l.Segments[posB]
	if !sa.Range.Adjacent(sb.Range) {
		return Layout{}, errorf(ErrNotAdjacent, "segments %d and %d are not adjacent: %s and %s", a, b, sa.Range, sb.Range)
	}
	if err := l.room(1); err != nil {
		return Layout{}, err
	}
	if posA > posB {
		posA, posB = posB, posA
	}
	return l.succeed([]int{posA, posB},
		Segment{Range: sa.Range.Union(sb.Range), Buckets: max(sa.Buckets, sb.Buckets)},
	), nil
}

// Rebucket seals the active segment id and creates one active successor
// with the same range and the given bucket count.
//
// Rebucket returns ErrUnknownSegment, ErrNotActive if id is sealed or
// deleted, and ErrBuckets if buckets is outside [1, MaxBuckets] or equal to
// the segment's current count.
func (l Layout) Rebucket(id SegmentID, buckets int) (Layout, error) {
	pos, err := l.activeIndex(id, "rebucket")
	if err != nil {
		return Layout{}, err
	}
	if buckets < 1 || buckets > MaxBuckets {
		return Layout{}, errorf(ErrBuckets, "cannot rebucket segment %d to %d buckets: the count must be in [1, %d]", id, buckets, MaxBuckets)
	}
	parent := l.Segments[pos]
	if buckets == parent.Buckets {
		return Layout{}, errorf(ErrBuckets, "segment %d already has %d entry buckets: rebucket to a different count", id, buckets)
	}
	if err := l.room(1); err != nil {
		return Layout{}, err
	}
	return l.succeed([]int{pos}, Segment{Range: parent.Range, Buckets: buckets}), nil
}

// Delete marks the sealed segment id deleted, once retention has removed
// its data. Any sealed segment may be deleted, whatever the state of its
// ancestors: the ordering rule treats a deleted segment as drained. The
// segment stays in the DAG so that the ancestry of its descendants is
// unchanged.
//
// Delete returns ErrUnknownSegment, and ErrNotSealed if id is active (its
// range would have no owner) or already deleted.
func (l Layout) Delete(id SegmentID) (Layout, error) {
	pos := l.index(id)
	if pos < 0 {
		return Layout{}, errorf(ErrUnknownSegment, "cannot delete segment %d: no such segment (next id is %d)", id, l.NextID)
	}
	switch l.Segments[pos].State {
	case StateActive:
		return Layout{}, errorf(ErrNotSealed, "cannot delete segment %d: it is active; only a sealed segment can be deleted", id)
	case StateDeleted:
		return Layout{}, errorf(ErrNotSealed, "cannot delete segment %d: it is already deleted", id)
	}
	if err := l.room(0); err != nil {
		return Layout{}, err
	}
	segs := make([]Segment, len(l.Segments))
	copy(segs, l.Segments)
	segs[pos].State = StateDeleted
	return Layout{Epoch: l.Epoch + 1, NextID: l.NextID, Segments: segs}, nil
}

// activeIndex returns the position of id, or the error op reports when id is
// unknown or not active.
func (l Layout) activeIndex(id SegmentID, op string) (int, error) {
	pos := l.index(id)
	if pos < 0 {
		return -1, errorf(ErrUnknownSegment, "cannot %s segment %d: no such segment (next id is %d)", op, id, l.NextID)
	}
	if s := l.Segments[pos]; s.State != StateActive {
		return -1, errorf(ErrNotActive, "cannot %s segment %d: it is %s since epoch %d", op, id, s.State, s.SealedEpoch)
	}
	if l.Segments[pos].Partition >= 0 {
		return -1, errorf(ErrFixed, "cannot %s segment %d: it is partition %d of a fixed topic, whose partitions do not %s (migrate the topic into a scalable one first)",
			op, id, l.Segments[pos].Partition, op)
	}
	return pos, nil
}

// room checks that one more epoch and newIDs more ids are available.
// Neither runs out in practice; the check keeps a hostile layout (decoded
// from JSON) from wrapping around.
func (l Layout) room(newIDs int) error {
	if l.Epoch == math.MaxUint64 {
		return errorf(ErrInvalid, "epoch %d cannot advance", l.Epoch)
	}
	if uint64(l.NextID) > math.MaxUint64-uint64(newIDs) {
		return errorf(ErrInvalid, "next id %d leaves no room for %d new segments", l.NextID, newIDs)
	}
	return nil
}

// succeed returns l with the segments at positions sealed (ascending) sealed
// and the given successors (only Range and Buckets set) appended as their
// children, all in the next epoch. l itself is not modified: the segment
// slice is copied and the sealed segments get new Children slices.
func (l Layout) succeed(sealed []int, successors ...Segment) Layout {
	epoch := l.Epoch + 1
	parentIDs := make([]SegmentID, len(sealed))
	for i, pos := range sealed {
		parentIDs[i] = l.Segments[pos].ID
	}
	childIDs := make([]SegmentID, len(successors))
	for i := range successors {
		childIDs[i] = l.NextID + SegmentID(i)
	}

	segs := make([]Segment, len(l.Segments), len(l.Segments)+len(successors))
	copy(segs, l.Segments)
	for _, pos := range sealed {
		segs[pos].State = StateSealed
		segs[pos].SealedEpoch = epoch
		segs[pos].Children = append([]SegmentID(nil), childIDs...)
	}
	for i, s := range successors {
		segs = append(segs, Segment{
			ID:           childIDs[i],
			Range:        s.Range,
			State:        StateActive,
			Parents:      append([]SegmentID(nil), parentIDs...),
			Buckets:      s.Buckets,
			CreatedEpoch: epoch,
			Partition:    -1,
		})
	}
	return Layout{Epoch: epoch, NextID: l.NextID + SegmentID(len(successors)), Segments: segs}
}
