package topology

import (
	"errors"
	"slices"
)

// Relocate seals the active segments ids and gives each one active
// successor with its range and bucket count, owned by owner, all in one
// epoch. It is how a key range moves to another node without copying
// data: the sealed segment stays where its logs are and is read there,
// the successor takes the range's appends on the new owner, and the
// ordering rule has readers finish the sealed one first.
//
// A fixed topic's partition moves the same way: its successor keeps the
// partition index, so the partition becomes a chain (see Fixed).
//
// Relocate returns ErrUnknownSegment or ErrNotActive for an id that is
// not an active segment, and ErrInvalid for an empty or repeated list or
// an owner that is not a node id.
func (l Layout) Relocate(ids []SegmentID, owner string) (Layout, error) {
	if len(ids) == 0 {
		return Layout{}, errorf(ErrInvalid, "cannot relocate: no segment named")
	}
	if owner == "" || !validOwner(owner) {
		return Layout{}, errorf(ErrInvalid, "cannot relocate to %q: not a node id", owner)
	}
	sorted := slices.Clone(ids)
	slices.Sort(sorted)
	if len(slices.Compact(slices.Clone(sorted))) != len(sorted) {
		return Layout{}, errorf(ErrInvalid, "cannot relocate %v: a segment is named twice", ids)
	}
	positions := make([]int, len(sorted))
	for i, id := range sorted {
		pos, err := l.activeIndex(id, "relocate")
		if errors.Is(err, ErrFixed) {
			pos, err = l.index(id), nil // a partition moves: its successor continues it
		}
		if err != nil {
			return Layout{}, err
		}
		positions[i] = pos
	}
	if err := l.room(len(sorted)); err != nil {
		return Layout{}, err
	}
	epoch := l.Epoch + 1
	segs := make([]Segment, len(l.Segments), len(l.Segments)+len(sorted))
	copy(segs, l.Segments)
	for i, pos := range positions {
		child := l.NextID + SegmentID(i)
		parent := segs[pos]
		segs[pos].State = StateSealed
		segs[pos].SealedEpoch = epoch
		segs[pos].Children = []SegmentID{child}
		segs = append(segs, Segment{
			ID: child, Range: parent.Range, State: StateActive,
			Parents: []SegmentID{parent.ID}, Buckets: parent.Buckets,
			CreatedEpoch: epoch, Partition: parent.Partition, Owner: owner,
		})
	}
	return Layout{Epoch: epoch, NextID: l.NextID + SegmentID(len(sorted)), Segments: segs}, nil
}

// OwnedActive returns the ids of the active segments owner owns.
func (l Layout) OwnedActive(owner string) []SegmentID {
	var out []SegmentID
	for _, s := range l.Segments {
		if s.State == StateActive && s.Owner == owner {
			out = append(out, s.ID)
		}
	}
	return out
}
