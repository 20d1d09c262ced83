package crashtest

import (
	"cmp"
	"fmt"
	"maps"
	"slices"

	"github.com/braidmq/braid/api"
)

// This file is the crash test's judge: a pure function from what the
// workload recorded (acknowledged sends, answered consumer acks, every
// delivery) and what the topic holds after the last restart to what was
// broken. checker_self_test.go feeds it synthetic breakage.

// msgID names one message of the workload: its key index and the key's
// sequence number, both carried in the payload. Every send uses a new one;
// a failed send is never resent under the same id.
type msgID struct{ key, seq uint32 }

func (id msgID) String() string { return fmt.Sprintf("k%d#%d", id.key, id.seq) }

// unit is one (segment, entry bucket) of the topic.
type unit struct {
	segment uint64
	bucket  int
}

func unitOf(p api.Position) unit { return unit{p.Segment, p.Bucket} }

// stored is one message read back from the topic.
type stored struct {
	id  msgID
	pos api.Position
}

// consumerEvent is one step of the consumer, in the order it happened: a
// delivery (a message in a fetch reply), or an ack request the server
// answered OK, which moved the unit's cumulative cursor to cursor.
type consumerEvent struct {
	ack        bool
	unit       unit
	offset     uint64 // delivery: the message's offset
	cursor     uint64 // ack: one past the highest acknowledged offset
	id         msgID  // delivery: the message
	deliveries uint32 // delivery: the server's count
	kills      int    // how many kills had happened when it was recorded
}

// evidence is everything the checker judges.
type evidence struct {
	acked   map[msgID]api.Position // sends whose acknowledgement arrived, and where it said they are
	stored  []stored               // the whole topic after the last restart, in any order
	parents map[uint64][]uint64    // the segment DAG: each segment's parents
	events  []consumerEvent        // the consumer's deliveries and answered acks, in order
}

// findings is what the checker found; the slices hold descriptions (the
// first maxListed of each kind) and the counts are complete.
type findings struct {
	acked, storedN, ackRequests int
	lost, ackedDup, unackedDup  int
	reordered, misplaced, chain int
	ackLost, consumerMissed     int
	consumerReordered           int // first deliveries below a key's highest sequence number delivered
	redelivered                 int // deliveries at or above the acked cursor seen before (allowed)
	details                     []string
}

const maxListed = 20

func (f *findings) note(format string, args ...any) {
	if len(f.details) < maxListed {
		f.details = append(f.details, fmt.Sprintf(format, args...))
	}
}

// failed reports whether a promise was broken. Duplicates of sends that
// were never acknowledged are reported but do not fail (the brief allows
// an unacknowledged send to be stored or not; the producer here never
// resends, so one stored twice is still worth a look).
func (f *findings) failed() bool {
	return f.lost+f.ackedDup+f.reordered+f.misplaced+f.chain+f.ackLost+f.consumerMissed+f.consumerReordered > 0
}

// check judges the evidence.
func check(ev evidence) findings {
	f := findings{acked: len(ev.acked), storedN: len(ev.stored)}
	checkStored(ev, &f)
	checkConsumer(ev, &f)
	return f
}

// checkStored: every acknowledged send is stored exactly once, where its
// acknowledgement said; nothing is stored twice; each key's messages lie on
// one chain of the DAG (one unit per segment, each segment a descendant of
// the previous one) and, read in that order (ancestor first, then offset:
// the ordering rule), carry strictly increasing sequence numbers.
func checkStored(ev evidence, f *findings) {
	count := make(map[msgID]int, len(ev.stored))
	byKey := map[uint32][]stored{}
	for _, s := range ev.stored {
		count[s.id]++
		byKey[s.id.key] = append(byKey[s.id.key], s)
		if pos, ok := ev.acked[s.id]; ok && count[s.id] == 1 && pos != s.pos {
			f.misplaced++
			f.note("misplaced: %v acknowledged as %d/%d/%d, stored at %d/%d/%d",
				s.id, pos.Segment, pos.Bucket, pos.Offset, s.pos.Segment, s.pos.Bucket, s.pos.Offset)
		}
	}
	for _, id := range sortedIDs(ev.acked) {
		if count[id] == 0 {
			f.lost++
			p := ev.acked[id]
			f.note("lost: %v acknowledged as %d/%d/%d, not stored", id, p.Segment, p.Bucket, p.Offset)
		}
	}
	for _, id := range sortedIDs(count) {
		if n := count[id]; n > 1 {
			if _, ok := ev.acked[id]; ok {
				f.ackedDup++
				f.note("duplicated: acknowledged %v stored %d times", id, n)
			} else {
				f.unackedDup++
				f.note("duplicated (not acknowledged): %v stored %d times", id, n)
			}
		}
	}
	for _, key := range slices.Sorted(maps.Keys(byKey)) {
		msgs := byKey[key]
		slices.SortFunc(msgs, func(a, b stored) int {
			return cmp.Or(cmp.Compare(a.pos.Segment, b.pos.Segment), cmp.Compare(a.pos.Bucket, b.pos.Bucket),
				cmp.Compare(a.pos.Offset, b.pos.Offset))
		})
		for i := 1; i < len(msgs); i++ {
			prev, cur := msgs[i-1], msgs[i]
			switch {
			case prev.pos.Segment == cur.pos.Segment && prev.pos.Bucket != cur.pos.Bucket:
				f.chain++
				f.note("key k%d in two buckets of segment %d (%d and %d)", key, cur.pos.Segment, prev.pos.Bucket, cur.pos.Bucket)
			case prev.pos.Segment != cur.pos.Segment && !isAncestor(ev.parents, prev.pos.Segment, cur.pos.Segment):
				f.chain++
				f.note("key k%d in segment %d and in %d, which does not descend from it", key, prev.pos.Segment, cur.pos.Segment)
			}
			if cur.id.seq < prev.id.seq {
				f.reordered++
				f.note("reordered: k%d seq %d (at %d/%d/%d) read after seq %d (at %d/%d/%d)", key,
					cur.id.seq, cur.pos.Segment, cur.pos.Bucket, cur.pos.Offset,
					prev.id.seq, prev.pos.Segment, prev.pos.Bucket, prev.pos.Offset)
			}
		}
	}
}

// checkConsumer: no delivery below a cursor an answered ack set (that ack
// was lost); every acknowledged send delivered at least once; and each
// key's messages delivered for the first time in sequence order (a
// redelivery goes back, a first delivery never does: that would be a
// successor segment read before its ancestor was drained).
func checkConsumer(ev evidence, f *findings) {
	cursor := map[unit]uint64{}
	delivered := map[msgID]bool{}
	seen := map[unit]uint64{} // one past the highest offset delivered
	highest := map[uint32]uint32{}
	for _, e := range ev.events {
		if e.ack {
			f.ackRequests++
			cursor[e.unit] = max(cursor[e.unit], e.cursor)
			continue
		}
		if !delivered[e.id] {
			if hi, ok := highest[e.id.key]; ok && e.id.seq < hi {
				f.consumerReordered++
				f.note("delivered out of key order: %v at %d/%d/%d, first delivered after seq %d of its key (after kill %d)",
					e.id, e.unit.segment, e.unit.bucket, e.offset, hi, e.kills)
			}
			highest[e.id.key] = max(highest[e.id.key], e.id.seq)
		}
		delivered[e.id] = true
		if c, ok := cursor[e.unit]; ok && e.offset < c {
			f.ackLost++
			f.note("ack lost: %v at %d/%d/%d delivered again (deliveries %d, after kill %d) below the acknowledged cursor %d",
				e.id, e.unit.segment, e.unit.bucket, e.offset, e.deliveries, e.kills, c)
		} else if e.offset < seen[e.unit] {
			f.redelivered++
		}
		seen[e.unit] = max(seen[e.unit], e.offset+1)
	}
	for _, id := range sortedIDs(ev.acked) {
		if !delivered[id] {
			f.consumerMissed++
			p := ev.acked[id]
			f.note("never delivered to the consumer: %v at %d/%d/%d", id, p.Segment, p.Bucket, p.Offset)
		}
	}
}

// isAncestor reports whether segment a is a proper ancestor of b.
func isAncestor(parents map[uint64][]uint64, a, b uint64) bool {
	seen := map[uint64]bool{}
	stack := slices.Clone(parents[b])
	for len(stack) > 0 {
		s := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if s == a {
			return true
		}
		if !seen[s] {
			seen[s] = true
			stack = append(stack, parents[s]...)
		}
	}
	return false
}

func sortedIDs[V any](m map[msgID]V) []msgID {
	ids := slices.Collect(maps.Keys(m))
	slices.SortFunc(ids, func(a, b msgID) int { return cmp.Or(cmp.Compare(a.key, b.key), cmp.Compare(a.seq, b.seq)) })
	return ids
}
