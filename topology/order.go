package topology

import "slices"

// The ordering rule. For an ordered subscription a segment may be delivered
// only when every ancestor — every segment reachable by following parents,
// all generations up — is drained for that subscription or deleted. Checking
// only the direct parents is not enough: a middle segment that received no
// messages is drained at once, while its own parent may still hold a backlog
// of the same keys (apache/pulsar#26274).
//
// Drained-ness belongs to the subscription, so these functions take it as a
// predicate. It is consulted only for sealed segments: an active segment can
// still receive appends and is never drained, whatever the predicate says. A
// nil predicate means nothing is drained yet.

// Ancestors returns every ancestor of id, sorted ascending without
// duplicates; nil if id is unknown or a root.
func (l Layout) Ancestors(id SegmentID) []SegmentID {
	start := l.index(id)
	if start < 0 {
		return nil
	}
	seen := make([]bool, len(l.Segments))
	var out []SegmentID
	stack := []int{start}
	for len(stack) > 0 {
		i := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, p := range l.Segments[i].Parents {
			j := l.index(p)
			if j < 0 || seen[j] {
				continue
			}
			seen[j] = true
			out = append(out, p)
			stack = append(stack, j)
		}
	}
	slices.Sort(out)
	return out
}

// IsDescendant reports whether a is a proper descendant of b, that is,
// whether b is an ancestor of a. A segment is not its own descendant.
func (l Layout) IsDescendant(a, b SegmentID) bool {
	start := l.index(a)
	if start < 0 || a == b {
		return false
	}
	seen := make(map[int]bool)
	stack := []int{start}
	for len(stack) > 0 {
		i := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, p := range l.Segments[i].Parents {
			if p == b {
				return true
			}
			// Ancestors have smaller ids than their descendants, so nothing
			// above a segment with an id below b can be b.
			j := l.index(p)
			if p < b || j < 0 || seen[j] {
				continue
			}
			seen[j] = true
			stack = append(stack, j)
		}
	}
	return false
}

// Readable returns, sorted by id, the segments an ordered subscription may
// read now: not deleted, not drained, and every ancestor drained or deleted.
// Active segments whose ancestors are all done are included; they stay
// readable as they grow.
func Readable(l Layout, drained func(SegmentID) bool) []SegmentID {
	var out []SegmentID
	released := releasedSegments(l, drained)
	for i, s := range l.Segments {
		if released[i].ancestorsDone && !released[i].done {
			out = append(out, s.ID)
		}
	}
	return out
}

// ReadableUnits returns the units (segment, bucket) of the Readable
// segments, sorted by segment then bucket: what the consumer group may
// assign now.
func ReadableUnits(l Layout, drained func(SegmentID) bool) []Unit {
	var out []Unit
	released := releasedSegments(l, drained)
	for i, s := range l.Segments {
		if released[i].ancestorsDone && !released[i].done {
			for b := range s.Buckets {
				out = append(out, Unit{Segment: s.ID, Bucket: b})
			}
		}
	}
	return out
}

// MayRead reports whether the ordering rule lets an ordered subscription
// read segment id: it exists, is not deleted, and every ancestor is drained
// or deleted. Unlike Readable it does not ask whether id itself is drained;
// Readable(l, d) is exactly the ids with MayRead(l, id, d) && !drained(id).
func MayRead(l Layout, id SegmentID, drained func(SegmentID) bool) bool {
	start := l.index(id)
	if start < 0 || l.Segments[start].State == StateDeleted {
		return false
	}
	seen := make(map[int]bool)
	stack := []int{start}
	for len(stack) > 0 {
		i := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, p := range l.Segments[i].Parents {
			j := l.index(p)
			if j < 0 {
				return false // a dangling parent: only in an invalid layout
			}
			if seen[j] {
				continue
			}
			if !isDone(&l.Segments[j], drained) {
				return false
			}
			seen[j] = true
			stack = append(stack, j)
		}
	}
	return true
}

// isDone reports whether s no longer holds anything for the subscription:
// deleted, or sealed and drained.
func isDone(s *Segment, drained func(SegmentID) bool) bool {
	switch s.State {
	case StateDeleted:
		return true
	case StateSealed:
		return drained != nil && drained(s.ID)
	default:
		return false
	}
}

type release struct {
	done          bool // deleted, or sealed and drained
	ancestorsDone bool // every ancestor is done
}

// releasedSegments evaluates the rule for every segment in one pass, by
// position: segments are in id order, so parents are settled before their
// children. drained is called at most once per sealed segment.
func releasedSegments(l Layout, drained func(SegmentID) bool) []release {
	out := make([]release, len(l.Segments))
	for i := range l.Segments {
		s := &l.Segments[i]
		out[i].done = isDone(s, drained)
		ok := true
		for _, p := range s.Parents {
			j := l.index(p)
			if j < 0 || j >= i || !out[j].done || !out[j].ancestorsDone {
				ok = false
				break
			}
		}
		out[i].ancestorsDone = ok
	}
	return out
}
