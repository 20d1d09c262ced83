package topology

// The operations of automatic scaling. A load step of ten times what one
// segment may carry is best answered by one split into many pieces, not by
// a cascade of halvings: a cascade needs one generation (and one more level
// of DAG depth) per halving and leaves empty sealed segments in between.
// Merges and splits also choose the successors' bucket count so that the
// topic keeps its entry-bucket budget.

// MaxSplitWays bounds the number of children of one SplitN.
const MaxSplitWays = 64

// SplitN seals the active segment id and creates len(at)+1 active children
// that tile its range, with ids from NextID in range order. at lists the
// first hash of every child but the first, strictly increasing, each in
// (Lo, Hi]. Every child gets buckets entry buckets; 0 keeps the parent's
// count. SplitN(id, []uint64{x}, 0) is Split(id, &x).
//
// SplitN returns ErrUnknownSegment, ErrNotActive if id is sealed or deleted,
// ErrSplitPoint if at is empty, longer than MaxSplitWays-1, not strictly
// increasing or not inside the range, and ErrBuckets if buckets is outside
// [0, MaxBuckets].
func (l Layout) SplitN(id SegmentID, at []uint64, buckets int) (Layout, error) {
	pos, err := l.activeIndex(id, "split")
	if err != nil {
		return Layout{}, err
	}
	parent := l.Segments[pos]
	r := parent.Range
	if len(at) == 0 || len(at) > MaxSplitWays-1 {
		return Layout{}, errorf(ErrSplitPoint, "cannot split segment %d into %d pieces: want 2 to %d", id, len(at)+1, MaxSplitWays)
	}
	for i, h := range at {
		if h <= r.Lo || h > r.Hi {
			return Layout{}, errorf(ErrSplitPoint, "split point %s is not inside segment %d %s: every child must start at a hash in [%s,%s]",
				FormatHash(h), id, r, FormatHash(r.Lo+1), FormatHash(r.Hi))
		}
		if i > 0 && h <= at[i-1] {
			return Layout{}, errorf(ErrSplitPoint, "split points of segment %d must strictly increase: %s follows %s",
				id, FormatHash(h), FormatHash(at[i-1]))
		}
	}
	if buckets < 0 || buckets > MaxBuckets {
		return Layout{}, errorf(ErrBuckets, "cannot split segment %d into children of %d buckets: the count must be in [1, %d]", id, buckets, MaxBuckets)
	}
	if buckets == 0 {
		buckets = parent.Buckets
	}
	if err := l.room(len(at) + 1); err != nil {
		return Layout{}, err
	}
	children := make([]Segment, 0, len(at)+1)
	lo := r.Lo
	for _, h := range at {
		children = append(children, Segment{Range: Range{Lo: lo, Hi: h - 1}, Buckets: buckets})
		lo = h
	}
	children = append(children, Segment{Range: Range{Lo: lo, Hi: r.Hi}, Buckets: buckets})
	return l.succeed([]int{pos}, children...), nil
}

// MergeBuckets is Merge with the child's bucket count chosen by the caller
// (0 keeps Merge's choice, the larger of the two counts).
//
// It returns the errors of Merge, and ErrBuckets if buckets is outside [0,
// MaxBuckets].
func (l Layout) MergeBuckets(a, b SegmentID, buckets int) (Layout, error) {
	if buckets < 0 || buckets > MaxBuckets {
		return Layout{}, errorf(ErrBuckets, "cannot merge segments %d and %d into %d buckets: the count must be in [1, %d]", a, b, buckets, MaxBuckets)
	}
	next, err := l.Merge(a, b)
	if err != nil || buckets == 0 {
		return next, err
	}
	// Merge appended the child last and shares no Segment value with l.
	next.Segments[len(next.Segments)-1].Buckets = buckets
	return next, nil
}
