package client

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"

	"github.com/nats-io/nats.go"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/routing"
	"github.com/braidmq/braid/topology"
)

// MessageID names one appended message: its unit (segment, bucket) and its
// offset in that unit's log. Offsets are dense per unit, from 0.
type MessageID struct {
	Segment uint64
	Bucket  int
	Offset  uint64
}

func (id MessageID) String() string {
	return fmt.Sprintf("%d/%d/%d", id.Segment, id.Bucket, id.Offset)
}

// unit is one (segment, bucket): the grain of batching and of order. The
// producer keeps at most one batch in flight per unit, which is what keeps
// the records of one key in order on the wire.
type unit struct {
	segment uint64
	bucket  int
}

func compareUnits(a, b unit) int {
	if c := cmp.Compare(a.segment, b.segment); c != 0 {
		return c
	}
	return cmp.Compare(a.bucket, b.bucket)
}

// pending is one record the producer holds until its outcome is known.
type pending struct {
	rec   api.Record
	keyed bool
	hash  uint64 // key hash, when keyed
	size  int    // approximate encoded size, for batch limits
	cb    func(MessageID, error)

	// sealed counts the SEGMENT_SEALED rejections in a row; lastSealed is
	// the latest of them.
	sealed     int
	lastSealed error
}

func newPending(rec api.Record, cb func(MessageID, error)) *pending {
	p := &pending{rec: rec, cb: cb, keyed: len(rec.Key) > 0, size: 16 + len(rec.Key) + len(rec.Payload)}
	if p.keyed {
		p.hash = routing.KeyHash(rec.Key)
	}
	for _, h := range rec.Headers {
		p.size += 4 + len(h.Name) + len(h.Value)
	}
	return p
}

// router routes records by one layout epoch. A scalable topic routes by the
// routing.Table of its active segments; a fixed topic (every active segment
// carries a partition index) routes by hash % partitions.
type router struct {
	epoch uint64
	// header names epoch on every batch routed by this router
	// (api.HeaderEpoch); shared read-only by those batches.
	header nats.Header
	// active holds the ids of the layout's active segments.
	active map[uint64]bool
	// owner is the topic's home, the node that owns the active segment
	// covering hash 0, when the layout names one (a cluster): batches go
	// straight to it.
	owner string

	table *routing.Table // scalable topic; nil for a fixed topic
	rr    routing.RoundRobin

	// Fixed topic: partitions[i] is the active segment of partition i.
	partitions []routing.Span
	nextFixed  uint64
}

// newRouter builds the router of a layout as topic.describe returns it.
// It refuses a layout whose active segments do not tile the key space.
func newRouter(d api.TopicDescription) (*router, error) {
	var active []api.SegmentInfo
	fixed := true
	for _, s := range d.Segments {
		if s.State == string(topology.StateActive) {
			active = append(active, s)
			fixed = fixed && s.Partition != nil
		}
	}
	if len(active) == 0 {
		return nil, fmt.Errorf("braid/client: layout of %s at epoch %d has no active segment", d.Topic, d.Epoch)
	}
	r := &router{epoch: d.Epoch, header: nats.Header{api.HeaderEpoch: []string{strconv.FormatUint(d.Epoch, 10)}},
		active: make(map[uint64]bool, len(active))}
	for _, s := range active {
		r.active[s.ID] = true
		if s.Range[0] == topology.FormatHash(0) {
			// The topic's home: it routes every append (its other
			// segments may be on other nodes; it writes to them).
			r.owner = s.Owner
		}
	}
	if fixed {
		r.partitions = make([]routing.Span, len(active))
		for _, s := range active {
			p := *s.Partition
			if p < 0 || p >= len(active) || r.partitions[p].Buckets != 0 {
				return nil, fmt.Errorf("braid/client: layout of %s: partition %d of segment %d is out of range or repeated", d.Topic, p, s.ID)
			}
			if s.Buckets < 1 {
				return nil, fmt.Errorf("braid/client: layout of %s: segment %d has %d buckets", d.Topic, s.ID, s.Buckets)
			}
			r.partitions[p] = routing.Span{Segment: s.ID, Buckets: s.Buckets}
		}
		return r, nil
	}
	spans := make([]routing.Span, 0, len(active))
	for _, s := range active {
		lo, err := topology.ParseHash(s.Range[0])
		if err != nil {
			return nil, fmt.Errorf("braid/client: layout of %s: segment %d: %w", d.Topic, s.ID, err)
		}
		hi, err := topology.ParseHash(s.Range[1])
		if err != nil {
			return nil, fmt.Errorf("braid/client: layout of %s: segment %d: %w", d.Topic, s.ID, err)
		}
		spans = append(spans, routing.Span{Lo: lo, Hi: hi, Segment: s.ID, Buckets: s.Buckets})
	}
	t, err := routing.NewTable(spans)
	if err != nil {
		return nil, fmt.Errorf("braid/client: layout of %s at epoch %d: %w", d.Topic, d.Epoch, err)
	}
	r.table = t
	return r, nil
}

// route returns the unit of a record: by key hash for a keyed record, round
// robin over every unit for an unkeyed one. Not safe for concurrent use (the
// producer calls it under its mutex).
func (r *router) route(p *pending) unit {
	if r.table != nil {
		if !p.keyed {
			seg, b := r.rr.Next(r.table)
			return unit{seg, b}
		}
		s := r.table.Lookup(p.hash)
		return unit{s.Segment, routing.Bucket(p.hash, s.Buckets)}
	}
	if !p.keyed {
		n := uint64(len(r.partitions))
		k := r.nextFixed
		r.nextFixed++
		s := r.partitions[k%n]
		return unit{s.Segment, int((k / n) % uint64(s.Buckets))}
	}
	s := r.partitions[routing.FixedPartition(p.hash, len(r.partitions))]
	return unit{s.Segment, routing.Bucket(p.hash, s.Buckets)}
}

// reroute is the re-routing step of the producer rule (DESIGN §1) as a pure
// function. old holds, per old unit, the records still to send in their send
// order: the records rejected from the unit's last batch first, then those
// queued behind them. It routes every record by r and returns the new
// per-unit queues.
//
// Per-key order holds because all the records of one key sit in one old
// unit (they were routed by one layout, which the producer only changes when
// nothing is in flight), and each old unit is walked in order: a key's
// records reach their new unit in their original order. Records of different
// keys may interleave; nothing orders them.
func reroute(old map[unit][]*pending, r *router) map[unit][]*pending {
	units := make([]unit, 0, len(old))
	for u := range old {
		units = append(units, u)
	}
	// Walk the old units in a fixed order so that round robin over unkeyed
	// records is deterministic for a given input.
	slices.SortFunc(units, compareUnits)
	out := make(map[unit][]*pending)
	for _, u := range units {
		for _, p := range old[u] {
			nu := r.route(p)
			out[nu] = append(out[nu], p)
		}
	}
	return out
}
