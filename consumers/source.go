package consumers

import (
	"github.com/braidmq/braid/compaction"
	"github.com/braidmq/braid/topology"
	"github.com/braidmq/braid/wal"
)

// Source is what a consumer group needs of its topic: the current layout and
// read access to the bucket logs. The actors package implements it for a
// topic on this node; reads bypass the bucket actors' mailboxes because a
// wal.Log is safe for concurrent use.
type Source interface {
	// Topic is the topic URI, e.g. "topic://acme/orders/payments".
	Topic() string
	// Layout is the current layout (a snapshot; callers must not modify it).
	Layout() topology.Layout
	// Bounds returns the first retained offset and the next offset to be
	// written of a unit. For a sealed segment next is final once the seal
	// has completed (the layout shows the segment sealed).
	Bounds(segment topology.SegmentID, bucket int) (first, next uint64, err error)
	// Read returns records of a unit from offset from: at most max records
	// and about maxBytes of payload (at least one record when one exists).
	Read(segment topology.SegmentID, bucket int, from uint64, max, maxBytes int) ([]wal.Record, error)
	// ReadCompacted reads a unit's compacted view from offset from, as
	// Read does its log: below the unit's compaction horizon only the
	// records compaction kept, at their offsets, then the log. resume is
	// where the next read goes on from (past the offsets compaction
	// removed after the last record returned).
	ReadCompacted(segment topology.SegmentID, bucket int, from uint64, max, maxBytes int) (kept []compaction.Kept, resume uint64, err error)
	// Appended returns a channel closed at the next append to any unit of
	// the topic (or at the next layout change); used to wake parked fetches.
	Appended() <-chan struct{}
}
