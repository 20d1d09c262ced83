package consumers

import (
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/braidmq/braid/topology"
)

func sampleQueueRecords() []*queueRecord {
	p := queuePolicy{AckTimeout: 30 * time.Second, MaxDeliveries: 5, NackDelay: time.Second, MaxNackDelay: time.Minute,
		NackBackoff: 1.5, DeadLetterTopic: "topic://a/b/c-dlq"}
	return []*queueRecord{
		{Kind: kindCreated, Start: startLatest, Policy: p, Units: []queueUnitRecord{{Unit: topology.Unit{Segment: 1}, Floor: 9, Read: 9}}},
		{Kind: kindUpdate, Units: []queueUnitRecord{{Unit: topology.Unit{Segment: 1, Bucket: 2}, Floor: 3, Read: 10, Entries: []queueEntryRecord{
			{Offset: 3, State: entryDelayed, Deliveries: 2, Due: 1700000000000}, {Offset: 5, State: entryAcked}, {Offset: 9, Deliveries: 4},
		}}}, Drained: []topology.SegmentID{0, 4}},
		{Kind: kindPolicy, Policy: p},
		{Kind: kindSnapshot, Policy: defaultQueuePolicy()},
	}
}

func TestQueueRecordRoundTrip(t *testing.T) {
	t.Parallel()
	for _, r := range sampleQueueRecords() {
		b := encodeQueueRecord(nil, r)
		got, err := decodeQueueRecord(b)
		if err != nil {
			t.Fatalf("%+v: %v", r, err)
		}
		if !reflect.DeepEqual(&got, r) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", got, *r)
		}
		for i := range b {
			if _, err := decodeQueueRecord(b[:i]); err == nil {
				t.Fatalf("kind %d cut at %d accepted", r.Kind, i)
			}
		}
	}
}

func FuzzDecodeQueueRecord(f *testing.F) {
	for _, r := range sampleQueueRecords() {
		f.Add(encodeQueueRecord(nil, r))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeQueueRecord(b)
		if err != nil {
			return
		}
		again := encodeQueueRecord(nil, &r)
		if !reflect.DeepEqual(again, b) {
			t.Fatalf("accepted a non-canonical body:\n in %x\nout %x", b, again)
		}
		s := newQueueState()
		_ = s.apply(&r) // must not panic
	})
}

// TestQueueSnapshotReplaysToTheSameState applies random histories of
// update records and checks that the snapshot of the state rebuilds it.
func TestQueueSnapshotReplaysToTheSameState(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 200; round++ {
		s := newQueueState()
		if err := s.apply(&queueRecord{Kind: kindCreated, Policy: defaultQueuePolicy()}); err != nil {
			t.Fatal(err)
		}
		for step := 0; step < 30; step++ {
			unit := topology.Unit{Segment: topology.SegmentID(rng.IntN(3)), Bucket: rng.IntN(2)}
			ur := queueUnitRecord{Unit: unit}
			if u := s.Units[unit]; u != nil {
				ur.Floor, ur.Read = u.floor, u.read()
			}
			ur.Floor += uint64(rng.IntN(3))
			ur.Read = max(ur.Read, ur.Floor) + uint64(rng.IntN(6))
			for off := ur.Floor; off < ur.Read; off++ {
				if rng.IntN(3) == 0 {
					e := queueEntryRecord{Offset: off, State: entryState(rng.IntN(3)), Deliveries: uint32(1 + rng.IntN(4))}
					if e.State == entryDelayed {
						e.Due = int64(rng.IntN(1000))
					}
					if e.State == entryAcked {
						e.Deliveries = 0
					}
					ur.Entries = append(ur.Entries, e)
				}
			}
			rec := &queueRecord{Kind: kindUpdate, Units: []queueUnitRecord{ur}}
			if rng.IntN(10) == 0 {
				rec.Drained = []topology.SegmentID{topology.SegmentID(rng.IntN(3))}
			}
			b := encodeQueueRecord(nil, rec)
			decoded, err := decodeQueueRecord(b)
			if err != nil {
				t.Fatalf("round %d step %d: %v", round, step, err)
			}
			if err := s.apply(&decoded); err != nil {
				t.Fatal(err)
			}
		}
		snap := s.snapshot()
		rebuilt := newQueueState()
		if err := rebuilt.apply(snap); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(rebuilt.snapshot(), snap) {
			t.Fatalf("round %d: the snapshot does not rebuild the state", round)
		}
		for unit, u := range s.Units {
			r := rebuilt.Units[unit]
			if r == nil || r.floor != u.floor || r.read() != u.read() || r.ready != u.ready {
				t.Fatalf("round %d unit %v: rebuilt %+v, want %+v", round, unit, r, u)
			}
			ready := 0
			for _, e := range u.entries {
				if e.state == entryReady {
					ready++
				}
			}
			if ready != u.ready || (len(u.entries) > 0 && u.entries[0].state == entryAcked) {
				t.Fatalf("round %d unit %v: ready count %d, counted %d, head %+v", round, unit, u.ready, ready, u.entries)
			}
		}
	}
}
