package routing

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
)

// Errors returned by NewTable. Each is wrapped with the offending span.
var (
	// ErrNotTiled is returned by NewTable when the spans do not tile the key
	// space [0, 2^64-1] exactly: no spans, a gap, an overlap, or an empty
	// span (Lo > Hi).
	ErrNotTiled = errors.New("braid/routing: spans do not tile the key space")

	// ErrBadBuckets is returned by NewTable when a span's bucket count is
	// outside [1, MaxBuckets].
	ErrBadBuckets = errors.New("braid/routing: bad bucket count")

	// ErrDuplicateSegment is returned by NewTable when two spans carry the
	// same segment id; active segments of one layout have distinct ids.
	ErrDuplicateSegment = errors.New("braid/routing: duplicate segment")
)

// Span is one active segment as routing sees it: the inclusive hash range
// [Lo, Hi] it owns, its id, and its number of entry buckets.
type Span struct {
	Lo, Hi  uint64
	Segment uint64
	Buckets int
}

// Contains reports whether the key hash h falls in the span's range.
func (s Span) Contains(h uint64) bool { return s.Lo <= h && h <= s.Hi }

// String formats the span as the layout JSON writes ranges.
func (s Span) String() string {
	return fmt.Sprintf("segment %d [0x%016x, 0x%016x] buckets %d", s.Segment, s.Lo, s.Hi, s.Buckets)
}

// Table routes key hashes to the active segments of one layout epoch. It is
// immutable once built; build a new one from the new spans on every layout
// change. The zero Table is not usable: use NewTable.
type Table struct {
	// spans are sorted by Lo and tile [0, MaxHash].
	// Invariant: spans[0].Lo == 0, spans[len-1].Hi == MaxHash and
	// spans[i].Lo == spans[i-1].Hi+1.
	spans []Span

	// his[i] == spans[i].Hi. Lookup searches this flat slice rather than the
	// 32-byte spans so that a probe costs one 8-byte load.
	his []uint64

	// unitEnds[i] is the number of units (segment, bucket) in spans[:i+1];
	// units == unitEnds[len-1]. RoundRobin maps a counter onto it.
	unitEnds []uint64
	units    uint64

	// fixed: a fixed topic's table, spans[i] being partition i; a hash h
	// goes to spans[FixedPartition(h, len(spans))] (his is unused).
	fixed bool
}

// NewTable builds a Table from the active segments of a layout, in any order.
// The spans must tile [0, 2^64-1] exactly and have distinct segment ids and
// bucket counts in [1, MaxBuckets]; otherwise NewTable returns an error
// wrapping ErrNotTiled, ErrDuplicateSegment or ErrBadBuckets. The input slice
// is neither kept nor modified.
func NewTable(spans []Span) (*Table, error) {
	if len(spans) == 0 {
		return nil, fmt.Errorf("%w: no spans", ErrNotTiled)
	}
	sorted := slices.Clone(spans)
	slices.SortFunc(sorted, func(a, b Span) int { return cmp.Compare(a.Lo, b.Lo) })

	seen := make(map[uint64]struct{}, len(sorted))
	for i, s := range sorted {
		if s.Lo > s.Hi {
			return nil, fmt.Errorf("%w: empty span, Lo > Hi: %v", ErrNotTiled, s)
		}
		if s.Buckets < 1 || uint64(s.Buckets) > MaxBuckets {
			return nil, fmt.Errorf("%w: %d, want 1 to 2^32: %v", ErrBadBuckets, s.Buckets, s)
		}
		if _, dup := seen[s.Segment]; dup {
			return nil, fmt.Errorf("%w: segment %d appears twice", ErrDuplicateSegment, s.Segment)
		}
		seen[s.Segment] = struct{}{}
		if i == 0 {
			if s.Lo != 0 {
				return nil, fmt.Errorf("%w: gap [0x%016x, 0x%016x] before %v", ErrNotTiled, uint64(0), s.Lo-1, s)
			}
			continue
		}
		prev := sorted[i-1]
		switch {
		case prev.Hi == MaxHash || s.Lo <= prev.Hi:
			return nil, fmt.Errorf("%w: overlap between %v and %v", ErrNotTiled, prev, s)
		case s.Lo > prev.Hi+1:
			return nil, fmt.Errorf("%w: gap [0x%016x, 0x%016x] between %v and %v", ErrNotTiled, prev.Hi+1, s.Lo-1, prev, s)
		}
	}
	if last := sorted[len(sorted)-1]; last.Hi != MaxHash {
		return nil, fmt.Errorf("%w: gap [0x%016x, 0x%016x] after %v", ErrNotTiled, last.Hi+1, MaxHash, last)
	}

	t := &Table{
		spans:    sorted,
		his:      make([]uint64, len(sorted)),
		unitEnds: make([]uint64, len(sorted)),
	}
	for i, s := range sorted {
		t.his[i] = s.Hi
		t.units += uint64(s.Buckets)
		t.unitEnds[i] = t.units
	}
	return t, nil
}

// NewFixedTable builds the Table of a fixed topic (persistent://...) from
// its partitions: partitions[i] is partition i (its Lo and Hi are ignored),
// and a key hash h goes to partition h % len(partitions). The spans must
// have distinct segment ids and bucket counts in [1, MaxBuckets].
func NewFixedTable(partitions []Span) (*Table, error) {
	if len(partitions) == 0 {
		return nil, fmt.Errorf("%w: no partitions", ErrNotTiled)
	}
	t := &Table{spans: slices.Clone(partitions), unitEnds: make([]uint64, len(partitions)), fixed: true}
	seen := make(map[uint64]struct{}, len(partitions))
	for i, s := range t.spans {
		if s.Buckets < 1 || uint64(s.Buckets) > MaxBuckets {
			return nil, fmt.Errorf("%w: %d, want 1 to 2^32: partition %d %v", ErrBadBuckets, s.Buckets, i, s)
		}
		if _, dup := seen[s.Segment]; dup {
			return nil, fmt.Errorf("%w: segment %d appears twice", ErrDuplicateSegment, s.Segment)
		}
		seen[s.Segment] = struct{}{}
		t.spans[i].Lo, t.spans[i].Hi = 0, MaxHash
		t.units += uint64(s.Buckets)
		t.unitEnds[i] = t.units
	}
	return t, nil
}

// Fixed reports whether t is a fixed topic's table (NewFixedTable).
func (t *Table) Fixed() bool { return t.fixed }

// Len returns the number of spans (active segments) in the table.
func (t *Table) Len() int { return len(t.spans) }

// Units returns the number of units, (segment, bucket) pairs, in the table:
// the sum of the spans' bucket counts.
func (t *Table) Units() uint64 { return t.units }

// Spans returns a copy of the spans, sorted by Lo (a fixed topic's: in
// partition order).
func (t *Table) Spans() []Span { return slices.Clone(t.spans) }

// Lookup returns the span whose range contains the key hash h. It is a binary
// search, O(log n) in the number of spans, and never fails: the spans tile the
// whole key space. In a fixed topic's table it is partition h % N.
func (t *Table) Lookup(h uint64) Span {
	if t.fixed {
		return t.spans[FixedPartition(h, len(t.spans))]
	}
	return t.spans[firstAtLeast(t.his, h)]
}

// Route returns where a keyed message goes: its segment, its entry bucket in
// that segment, and its key hash (which the producer sends along so the
// server need not hash again).
func (t *Table) Route(key []byte) (segment uint64, bucket int, hash uint64) {
	hash = KeyHash(key)
	s := t.Lookup(hash)
	return s.Segment, Bucket(hash, s.Buckets), hash
}

// firstAtLeast returns the smallest i with sorted[i] >= x, given that the
// last element is >= x (for his it is MaxHash, so any x qualifies). The loop
// keeps the answer in [base, base+n) and halves n each step.
//
// The comparison is turned into a mask (one SETcc) instead of a branch: the
// probes of a search for a random hash go left or right at random, so a
// branch mispredicts about half the time, and the Go compiler does not turn
// a loop-carried if into a conditional move. BenchmarkLookup against
// BenchmarkLookupSortSearch measures the difference (about 3x at 64 spans).
func firstAtLeast(sorted []uint64, x uint64) int {
	base, n := 0, len(sorted)
	for n > 1 {
		half := n / 2
		var below int
		if sorted[base+half-1] < x {
			below = 1
		}
		base += half & -below
		n -= half
	}
	return base
}

// RoundRobin spreads unkeyed messages over every unit of a table: the k-th
// call to Next returns unit k modulo the table's unit count, units being
// ordered by span (ascending Lo) and then by bucket. Unkeyed messages carry no
// order guarantee, so the cycle may restart anywhere when the table changes.
//
// The zero value is ready to use and safe for concurrent use: the position is
// one atomic counter, so concurrent callers each get a distinct position.
type RoundRobin struct {
	next atomic.Uint64
}

// Next returns the next unit of t in the cycle.
func (r *RoundRobin) Next(t *Table) (segment uint64, bucket int) {
	unit := (r.next.Add(1) - 1) % t.units
	i := firstAtLeast(t.unitEnds, unit+1) // unit+1 <= t.units, the last element
	var start uint64
	if i > 0 {
		start = t.unitEnds[i-1]
	}
	return t.spans[i].Segment, int(unit - start)
}
