package crashtest

import (
	"cmp"
	"slices"
	"testing"

	"github.com/braidmq/braid/api"
)

// A clean history of two keys across a split of segment 0 into 1 and 2:
// k0 stays on 0 -> 1, k1 on 0 -> 2. Every send is acknowledged, stored once
// in order and delivered; the consumer acked everything it was delivered.
func cleanEvidence() evidence {
	at := func(seg uint64, off uint64) api.Position { return api.Position{Segment: seg, Offset: off} }
	ev := evidence{
		acked: map[msgID]api.Position{
			{0, 0}: at(0, 0), {1, 0}: at(0, 1), {0, 1}: at(0, 2), {1, 1}: at(0, 3),
			{0, 2}: at(1, 0), {1, 2}: at(2, 0), {0, 3}: at(1, 1),
		},
		parents: map[uint64][]uint64{1: {0}, 2: {0}},
	}
	for id, p := range ev.acked {
		ev.stored = append(ev.stored, stored{id: id, pos: p})
	}
	// Delivered in offset order per unit, parents first.
	for _, s := range sortedByPosition(ev.stored) {
		ev.events = append(ev.events, consumerEvent{unit: unitOf(s.pos), offset: s.pos.Offset, id: s.id, deliveries: 1})
	}
	for _, u := range []unit{{0, 0}, {1, 0}, {2, 0}} {
		ev.events = append(ev.events, consumerEvent{ack: true, unit: u, cursor: 4})
	}
	return ev
}

func TestCheckerPassesACleanHistory(t *testing.T) {
	f := check(cleanEvidence())
	if f.failed() || f.unackedDup != 0 || f.redelivered != 0 {
		t.Fatalf("clean history judged broken: %+v", f)
	}
	if f.acked != 7 || f.storedN != 7 || f.ackRequests != 3 {
		t.Fatalf("counts: %+v", f)
	}
}

// Each case breaks one promise; the checker must see that one (and, where
// the breakage implies another, that too).
func TestCheckerCatchesBreakage(t *testing.T) {
	cases := []struct {
		name    string
		breakIt func(*evidence)
		want    func(findings) bool
	}{
		{"an acknowledged message is lost", func(ev *evidence) {
			ev.stored = dropStored(ev.stored, msgID{1, 1})
		}, func(f findings) bool { return f.lost == 1 && f.failed() }},
		{"an acknowledged message is stored twice", func(ev *evidence) {
			ev.stored = append(ev.stored, stored{id: msgID{0, 2}, pos: api.Position{Segment: 1, Offset: 2}})
		}, func(f findings) bool { return f.ackedDup == 1 && f.failed() }},
		{"an unacknowledged message is stored twice: reported, not failed", func(ev *evidence) {
			for _, off := range []uint64{2, 3} {
				ev.stored = append(ev.stored, stored{id: msgID{0, 9}, pos: api.Position{Segment: 1, Offset: off}})
			}
		}, func(f findings) bool { return f.unackedDup == 1 && !f.failed() }},
		{"a key is reordered within a unit", func(ev *evidence) {
			ev.stored = dropStored(dropStored(ev.stored, msgID{0, 2}), msgID{0, 3})
			ev.stored = append(ev.stored, stored{id: msgID{0, 3}, pos: api.Position{Segment: 1, Offset: 0}},
				stored{id: msgID{0, 2}, pos: api.Position{Segment: 1, Offset: 1}})
		}, func(f findings) bool { return f.reordered == 1 && f.misplaced == 2 }},
		{"a key is reordered across the split (a child ahead of its parent)", func(ev *evidence) {
			ev.stored = append(ev.stored, stored{id: msgID{1, 5}, pos: api.Position{Segment: 0, Offset: 4}})
		}, func(f findings) bool { return f.reordered == 1 && f.failed() }},
		{"a key shows up on a segment that does not descend from its last", func(ev *evidence) {
			ev.parents[3] = []uint64{2}
			ev.stored = append(ev.stored, stored{id: msgID{0, 7}, pos: api.Position{Segment: 3, Offset: 0}})
		}, func(f findings) bool { return f.chain == 1 && f.failed() }},
		{"an acknowledgement names the wrong position", func(ev *evidence) {
			ev.acked[msgID{0, 0}] = api.Position{Segment: 0, Offset: 9}
		}, func(f findings) bool { return f.misplaced == 1 && f.failed() }},
		{"an answered consumer ack is lost: an acked offset is delivered again", func(ev *evidence) {
			ev.events = append(ev.events, consumerEvent{unit: unit{0, 0}, offset: 2, id: msgID{0, 1}, deliveries: 1})
		}, func(f findings) bool { return f.ackLost == 1 && f.failed() }},
		{"a redelivery above the acked cursor is allowed", func(ev *evidence) {
			ev.events = ev.events[:len(ev.events)-3] // no ack answered
			ev.events = append(ev.events, consumerEvent{unit: unit{0, 0}, offset: 2, id: msgID{0, 1}, deliveries: 2})
		}, func(f findings) bool { return f.redelivered == 1 && !f.failed() }},
		{"the consumer is delivered a child's message of a key before its parent's", func(ev *evidence) {
			// k1#2 (segment 2) is delivered before k1#1 (segment 0).
			i := slices.IndexFunc(ev.events, func(e consumerEvent) bool { return e.id == msgID{1, 1} })
			j := slices.IndexFunc(ev.events, func(e consumerEvent) bool { return e.id == msgID{1, 2} })
			ev.events[i], ev.events[j] = ev.events[j], ev.events[i]
		}, func(f findings) bool { return f.consumerReordered == 1 && f.failed() }},
		{"an acknowledged message never reaches the consumer", func(ev *evidence) {
			ev.events = ev.events[1:]
		}, func(f findings) bool { return f.consumerMissed == 1 && f.failed() }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ev := cleanEvidence()
			c.breakIt(&ev)
			if f := check(ev); !c.want(f) {
				t.Fatalf("not caught: %+v", f)
			}
		})
	}
}

func dropStored(s []stored, id msgID) []stored {
	out := s[:0:0]
	for _, m := range s {
		if m.id != id {
			out = append(out, m)
		}
	}
	return out
}

func sortedByPosition(s []stored) []stored {
	out := slices.Clone(s)
	slices.SortFunc(out, func(a, b stored) int {
		return cmp.Or(cmp.Compare(a.pos.Segment, b.pos.Segment), cmp.Compare(a.pos.Bucket, b.pos.Bucket),
			cmp.Compare(a.pos.Offset, b.pos.Offset))
	})
	return out
}
