package topology

import (
	"cmp"
	"encoding/json"
	"math/bits"
	"slices"
)

const (
	// MaxInitialSegments bounds the segment count of New and the partition
	// count of FromFixed.
	MaxInitialSegments = 4096

	// MaxBuckets is the largest entry-bucket count of one segment.
	MaxBuckets = 1024
)

// SegmentID names a segment within its topic. Ids are allocated in
// increasing order from Layout.NextID and never reused.
type SegmentID uint64

// State is the lifecycle state of a segment.
type State string

const (
	// StateActive segments accept appends; together they tile the space.
	StateActive State = "active"
	// StateSealed segments reject appends; their data is still readable.
	StateSealed State = "sealed"
	// StateDeleted segments are sealed segments whose data retention has
	// removed. The ordering rule treats them as drained.
	StateDeleted State = "deleted"
)

func (s State) valid() bool {
	return s == StateActive || s == StateSealed || s == StateDeleted
}

// Segment is one node of the DAG.
type Segment struct {
	ID    SegmentID
	Range Range
	State State

	// Parents are the segments this one succeeded (empty for roots);
	// Children the segments that succeeded it (empty while active). Both are
	// sorted ascending, without duplicates, and mirror each other: p lists c
	// as a child exactly when c lists p as a parent.
	Parents, Children []SegmentID

	// Buckets is the number of entry buckets, in [1, MaxBuckets].
	Buckets int

	// CreatedEpoch is the layout epoch of the operation that created the
	// segment; SealedEpoch that of the operation that sealed it (0 while
	// active). Invariant: CreatedEpoch <= SealedEpoch <= Layout.Epoch once
	// sealed, and a child's CreatedEpoch equals each parent's SealedEpoch.
	CreatedEpoch uint64
	SealedEpoch  uint64

	// Partition is -1, except for the N sealed roots of a migrated fixed topic
	// (see FromFixed), where it is the partition index: keys reached them by
	// hash % N, which is not a range, so their Range is the whole space.
	Partition int

	// Owner is the id of the node whose disk holds the segment's bucket
	// logs and which serves it ("" in layouts written before nodes had
	// ids: the node that serves the topic). Layout operations leave new
	// segments without one; the controller that persists the layout
	// stamps them (see WithOwner).
	Owner string

	// Replicas, when the segment is replicated, are the nodes whose disks
	// hold a copy of each of its bucket logs, one raft group per bucket
	// (package replica): the owner first, which leads them while it
	// lives. Replica i has raft id i+1. A replica is a node id and the
	// incarnation of its data directory: the same node back with an empty
	// directory is not one of them. Empty for a segment of one copy.
	Replicas []Replica
}

// Replica is one copy of a replicated segment: a node and its data
// directory's incarnation.
type Replica struct {
	Node, Incarnation string
}

// MaxReplicas bounds a segment's replicas.
const MaxReplicas = 7

// ReplicaID returns the raft id of node's replica of s (its index + 1),
// or 0 if node with incarnation holds none.
func (s Segment) ReplicaID(node, incarnation string) uint64 {
	for i, r := range s.Replicas {
		if r.Node == node && r.Incarnation == incarnation {
			return uint64(i + 1)
		}
	}
	return 0
}

// MaxOwnerLen bounds an owner node id.
const MaxOwnerLen = 64

// WithOwner returns a copy of l in which every segment without an owner
// has owner.
func (l Layout) WithOwner(owner string) Layout {
	out := l
	out.Segments = make([]Segment, len(l.Segments))
	copy(out.Segments, l.Segments)
	for i := range out.Segments {
		if out.Segments[i].Owner == "" {
			out.Segments[i].Owner = owner
		}
	}
	return out
}

// validOwner reports whether o is a node id: up to MaxOwnerLen letters,
// digits, '-' and '_'.
func validOwner(o string) bool {
	if len(o) > MaxOwnerLen {
		return false
	}
	for i := 0; i < len(o); i++ {
		c := o[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// Layout is the versioned DAG of all segments of one topic.
type Layout struct {
	// Epoch counts the operations applied to the layout; New and FromFixed
	// start at 1 and every operation adds exactly one.
	Epoch uint64
	// NextID is the id the next created segment gets.
	// Invariant: every Segments[i].ID < NextID.
	NextID SegmentID
	// Segments holds every segment ever created, sorted by ID, which is also
	// a topological order (parents before children).
	Segments []Segment
}

// Unit is what a consumer is assigned: one entry bucket of one segment.
type Unit struct {
	Segment SegmentID
	Bucket  int
}

// New returns the layout of a new scalable topic: segments active segments
// of equal width tiling the whole space (the last takes the remainder), ids
// 0..segments-1, epoch 1. The bucketBudget entry buckets (the namespace
// default is 4) are spread across the segments, earlier segments taking the
// remainder, and every segment gets at least one: budget 4 over 3 segments
// gives 2,1,1; over 8 segments 1 each.
//
// New returns ErrInvalid if segments is outside [1, MaxInitialSegments], and
// ErrBuckets if bucketBudget < 1 or a segment would get more than MaxBuckets.
func New(segments int, bucketBudget int) (Layout, error) {
	if segments < 1 || segments > MaxInitialSegments {
		return Layout{}, errorf(ErrInvalid, "segment count %d is outside [1, %d]", segments, MaxInitialSegments)
	}
	if bucketBudget < 1 {
		return Layout{}, errorf(ErrBuckets, "bucket budget %d is below 1", bucketBudget)
	}
	if perSegment := (bucketBudget + segments - 1) / segments; perSegment > MaxBuckets {
		return Layout{}, errorf(ErrBuckets, "bucket budget %d over %d segments gives %d buckets per segment, more than %d",
			bucketBudget, segments, perSegment, MaxBuckets)
	}
	ranges := equalRanges(segments)
	segs := make([]Segment, segments)
	for i := range segs {
		buckets := bucketBudget / segments
		if i < bucketBudget%segments {
			buckets++
		}
		segs[i] = Segment{
			ID:           SegmentID(i),
			Range:        ranges[i],
			State:        StateActive,
			Buckets:      max(buckets, 1),
			CreatedEpoch: 1,
			Partition:    -1,
		}
	}
	return Layout{Epoch: 1, NextID: SegmentID(segments), Segments: segs}, nil
}

// FromFixed returns the layout of a fixed topic of the given number of
// partitions migrated in place to a scalable topic, at epoch 1:
//
//   - ids 0..N-1 are the partitions: sealed roots with Partition i, the whole
//     space as Range, one bucket (a partition is one ordered log), created and
//     sealed at epoch 1;
//   - ids N..2N-1 are active children of equal width tiling the space, with
//     bucketsPerChild buckets, each having all N partitions as parents.
//
// A key of partition i may now land in any child, so every child must wait
// for every partition: that is what listing all N as parents achieves under
// the ordering rule.
//
// FromFixed returns ErrInvalid if partitions is outside [1,
// MaxInitialSegments] and ErrBuckets if bucketsPerChild is outside [1,
// MaxBuckets].
func FromFixed(partitions int, bucketsPerChild int) (Layout, error) {
	if partitions < 1 || partitions > MaxInitialSegments {
		return Layout{}, errorf(ErrInvalid, "partition count %d is outside [1, %d]", partitions, MaxInitialSegments)
	}
	if bucketsPerChild < 1 || bucketsPerChild > MaxBuckets {
		return Layout{}, errorf(ErrBuckets, "bucket count %d is outside [1, %d]", bucketsPerChild, MaxBuckets)
	}
	n := partitions
	partitionIDs := make([]SegmentID, n)
	childIDs := make([]SegmentID, n)
	for i := range n {
		partitionIDs[i] = SegmentID(i)
		childIDs[i] = SegmentID(n + i)
	}
	ranges := equalRanges(n)
	segs := make([]Segment, 2*n)
	for i := range n {
		segs[i] = Segment{
			ID:           SegmentID(i),
			Range:        FullRange,
			State:        StateSealed,
			Children:     slices.Clone(childIDs),
			Buckets:      1,
			CreatedEpoch: 1,
			SealedEpoch:  1,
			Partition:    i,
		}
		segs[n+i] = Segment{
			ID:           SegmentID(n + i),
			Range:        ranges[i],
			State:        StateActive,
			Parents:      slices.Clone(partitionIDs),
			Buckets:      bucketsPerChild,
			CreatedEpoch: 1,
			Partition:    -1,
		}
	}
	return Layout{Epoch: 1, NextID: SegmentID(2 * n), Segments: segs}, nil
}

// equalRanges tiles the whole space with n ranges of width floor(2^64/n);
// the last one takes the remainder.
func equalRanges(n int) []Range {
	if n == 1 {
		return []Range{FullRange}
	}
	width, _ := bits.Div64(1, 0, uint64(n)) // 2^64 / n; n >= 2 so it fits
	ranges := make([]Range, n)
	for i := range ranges {
		ranges[i] = Range{Lo: uint64(i) * width, Hi: uint64(i+1)*width - 1}
	}
	ranges[n-1].Hi = FullRange.Hi
	return ranges
}

// index returns the position of id in l.Segments, or -1. Ids are dense in
// every layout this package builds, so the first probe nearly always hits.
func (l Layout) index(id SegmentID) int {
	if id < SegmentID(len(l.Segments)) && l.Segments[id].ID == id {
		return int(id)
	}
	i, found := slices.BinarySearchFunc(l.Segments, id, func(s Segment, id SegmentID) int {
		return cmp.Compare(s.ID, id)
	})
	if !found {
		return -1
	}
	return i
}

// Segment returns the segment with the given id. Its Parents and Children
// slices are shared with the layout: do not modify them.
func (l Layout) Segment(id SegmentID) (Segment, bool) {
	i := l.index(id)
	if i < 0 {
		return Segment{}, false
	}
	return l.Segments[i], true
}

// Active returns the active segments sorted by Range.Lo. In a valid layout
// they tile the whole space.
func (l Layout) Active() []Segment {
	var active []Segment
	for i := range l.Segments {
		if l.Segments[i].State == StateActive {
			active = append(active, l.Segments[i])
		}
	}
	slices.SortFunc(active, func(a, b Segment) int {
		return cmp.Or(cmp.Compare(a.Range.Lo, b.Range.Lo), cmp.Compare(a.Partition, b.Partition))
	})
	return active
}

// Owner returns the active segment whose range contains h. In a valid layout
// there is exactly one. In a fixed topic's it is partition h % N.
func (l Layout) Owner(h uint64) (Segment, bool) {
	if l.Fixed() {
		want := int(h % uint64(l.partitionCount()))
		for i := range l.Segments {
			if s := &l.Segments[i]; s.Partition == want && s.State == StateActive {
				return *s, true
			}
		}
		return Segment{}, false
	}
	for i := range l.Segments {
		if s := &l.Segments[i]; s.State == StateActive && s.Range.Contains(h) {
			return *s, true
		}
	}
	return Segment{}, false
}

// Clone returns a deep copy of l that shares no memory with it.
func (l Layout) Clone() Layout {
	out := Layout{Epoch: l.Epoch, NextID: l.NextID}
	if l.Segments != nil {
		out.Segments = make([]Segment, len(l.Segments))
		for i, s := range l.Segments {
			s.Parents = slices.Clone(s.Parents)
			s.Children = slices.Clone(s.Children)
			out.Segments[i] = s
		}
	}
	return out
}

// Depth returns the length of the longest parent path from id up to a root
// (a segment without parents, depth 0), and false if id is unknown.
func (l Layout) Depth(id SegmentID) (int, bool) {
	i := l.index(id)
	if i < 0 {
		return 0, false
	}
	return l.depths()[i], true
}

// MaxDepth returns the largest Depth over all segments (0 for an empty
// layout). Depth only grows towards the leaves, so this is also the largest
// depth of an active segment; the scaling policy caps it.
func (l Layout) MaxDepth() int {
	deepest := 0
	for _, d := range l.depths() {
		deepest = max(deepest, d)
	}
	return deepest
}

// depths computes the depth of every segment, by position, in one pass:
// parents come before their children in id order.
func (l Layout) depths() []int {
	depth := make([]int, len(l.Segments))
	for i := range l.Segments {
		for _, p := range l.Segments[i].Parents {
			if j := l.index(p); j >= 0 && j < i {
				depth[i] = max(depth[i], depth[j]+1)
			}
		}
	}
	return depth
}

// MarshalJSON encodes r as {"node":…,"incarnation":…}.
func (r Replica) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Node        string `json:"node"`
		Incarnation string `json:"incarnation"`
	}{r.Node, r.Incarnation})
}

// UnmarshalJSON decodes what MarshalJSON makes.
func (r *Replica) UnmarshalJSON(data []byte) error {
	var w struct {
		Node        string `json:"node"`
		Incarnation string `json:"incarnation"`
	}
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	r.Node, r.Incarnation = w.Node, w.Incarnation
	return nil
}
