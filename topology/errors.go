package topology

import (
	"errors"
	"fmt"
)

// Sentinel errors. Every error returned by this package wraps exactly one of
// them (match with errors.Is) and its message, prefixed "braid/topology: ",
// names the segments involved and the reason.
var (
	// ErrUnknownSegment is returned when an operation or lookup names a
	// segment id that the layout does not hold.
	ErrUnknownSegment = errors.New("braid/topology: unknown segment")

	// ErrNotActive is returned by Split, Merge and Rebucket when a segment
	// they would seal is already sealed or deleted.
	ErrNotActive = errors.New("braid/topology: segment not active")

	// ErrNotAdjacent is returned by Merge when the two segments do not share
	// a range boundary, or are the same segment.
	ErrNotAdjacent = errors.New("braid/topology: segments not adjacent")

	// ErrSplitPoint is returned by Split when the requested split hash is not
	// strictly inside the segment's range (it must satisfy Lo < at <= Hi), or
	// when the segment covers a single hash and cannot split at all.
	ErrSplitPoint = errors.New("braid/topology: bad split point")

	// ErrBuckets is returned when a bucket count is outside [1, MaxBuckets],
	// when Rebucket asks for the count the segment already has, and when New
	// gets a bucket budget below 1 or too large to spread.
	ErrBuckets = errors.New("braid/topology: bad bucket count")

	// ErrNotSealed is returned by Delete when the segment is active (its
	// range would be left without an owner) or already deleted.
	ErrNotSealed = errors.New("braid/topology: segment not sealed")

	// ErrBadHash is returned by ParseHash, and by the JSON decoder for range
	// bounds, when a hash is not "0x" followed by 1 to 16 hex digits or (for
	// ParseHash only) a decimal number that fits in 64 bits.
	ErrBadHash = errors.New("braid/topology: bad hash")

	// ErrInvalid is returned by Validate when a layout breaks an invariant,
	// by UnmarshalJSON when the input is not a valid layout, by New and
	// FromFixed for a segment count outside [1, MaxInitialSegments], and by
	// the operations when the epoch or the id space is exhausted.
	ErrInvalid = errors.New("braid/topology: invalid layout")

	// ErrOp is returned by Apply (and PlanChange) for an Op of an unknown
	// kind, or that names the wrong number of segments for its kind.
	ErrOp = errors.New("braid/topology: bad operation")

	// ErrStale is returned by Apply (and PlanChange) for an Op decided at a
	// layout epoch (Op.Epoch) that the layout has moved on from: what was
	// decided may no longer hold (automatic scaling decides again).
	ErrStale = errors.New("braid/topology: layout moved on since the operation was decided")
)

// topologyError carries a full, specific message while matching its sentinel
// with errors.Is, so the text reads "braid/topology: segments 4 and 7 are not
// adjacent: ..." rather than repeating the sentinel's own words.
type topologyError struct {
	sentinel error
	msg      string
}

func (e *topologyError) Error() string { return e.msg }
func (e *topologyError) Unwrap() error { return e.sentinel }

func errorf(sentinel error, format string, args ...any) error {
	return &topologyError{sentinel: sentinel, msg: "braid/topology: " + fmt.Sprintf(format, args...)}
}
