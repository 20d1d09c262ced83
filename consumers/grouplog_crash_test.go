package consumers

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/braidmq/braid/topology"
	"github.com/braidmq/braid/wal"
	"github.com/braidmq/braid/wal/crashfs"
)

// The group log's crash test: a stream group's records (created, cursor
// updates, owners, drained segments) appended as the group appends them,
// compacted into snapshots as the group compacts, the log reopened and
// replayed midway, on a strict crash file system, crashing before every
// one of its operations. The replayed state must be the state of every
// record that was acknowledged, or that and the one in flight: no answered
// ack is lost, no state appears that was never written.

const groupCrashDir = "/subs/s"

// groupCrashRecords are the records of the workload, in order; every
// fourth is followed by a compaction.
func groupCrashRecords() []stateRecord {
	u := func(seg, b int) topology.Unit { return topology.Unit{Segment: topology.SegmentID(seg), Bucket: b} }
	recs := []stateRecord{{Kind: kindCreated, Start: startEarliest}}
	for i := 1; i <= 24; i++ {
		switch {
		case i%7 == 0:
			recs = append(recs, stateRecord{Kind: kindOwners,
				Owners:   []unitOwner{{Unit: u(i%3, 0), Owner: "c" + string(rune('a'+i%4))}},
				Sessions: []consumerSession{{Consumer: "c" + string(rune('a'+i%4)), Timeout: time.Duration(i) * time.Second}}})
		case i == 18:
			recs = append(recs, stateRecord{Kind: kindUpdate, Drained: []topology.SegmentID{0}})
		default:
			recs = append(recs, stateRecord{Kind: kindUpdate,
				Cursors: []unitCursor{{Unit: u(i%3, i%2), Acked: uint64(10 * i)}, {Unit: u(3, 0), Acked: uint64(i)}}})
		}
	}
	return recs
}

// encodeState is a state's snapshot, encoded: equal states encode equally.
func encodeState(s subscriptionState) []byte {
	if !s.Created {
		return nil
	}
	return encodeRecord(nil, s.snapshot())
}

// runGroupWorkload runs the workload until an operation fails; it returns
// the state of the records acknowledged and of those and the one in flight.
func runGroupWorkload(t *testing.T, mem *crashfs.Mem) (acked, attempted subscriptionState, done bool) {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	acked = newSubscriptionState()
	died := func(err error) bool {
		if err != nil && !errors.Is(err, crashfs.ErrDied) {
			t.Fatalf("group log workload: %v", err)
		}
		return err != nil
	}
	l, _, err := openAndReplay(groupCrashDir, wal.DurabilityAlways, mem, logger, func([]byte) error { return nil })
	if died(err) {
		return acked, acked, false
	}
	for i, r := range groupCrashRecords() {
		next := cloneState(acked)
		if err := next.apply(r); err != nil {
			t.Fatal(err)
		}
		if _, err := appendPayload(l, time.Unix(0, 0), encodeRecord(nil, r)); died(err) {
			return acked, next, false
		}
		acked = next
		if i%4 == 3 {
			if _, err := compactLog(l, time.Unix(0, 0), encodeRecord(nil, acked.snapshot())); died(err) {
				return acked, acked, false
			}
		}
		if i == 13 {
			if died(l.Close()) {
				return acked, acked, false
			}
			if l, _, err = openAndReplay(groupCrashDir, wal.DurabilityAlways, mem, logger, func([]byte) error { return nil }); died(err) {
				return acked, acked, false
			}
		}
	}
	if died(l.Close()) {
		return acked, acked, false
	}
	return acked, acked, true
}

func cloneState(s subscriptionState) subscriptionState {
	c := newSubscriptionState()
	if !s.Created {
		return c
	}
	if err := c.apply(s.snapshot()); err != nil {
		panic(err)
	}
	return c
}

// replayGroup replays the log after a crash into a fresh state.
func replayGroup(t *testing.T, mem *crashfs.Mem) subscriptionState {
	t.Helper()
	s := newSubscriptionState()
	l, _, err := openAndReplay(groupCrashDir, wal.DurabilityAlways, mem, slog.New(slog.NewTextHandler(io.Discard, nil)), func(b []byte) error {
		r, err := decodeRecord(b)
		if err != nil {
			return err
		}
		return s.apply(r)
	})
	if err != nil {
		t.Fatalf("replay after the crash: %v", err)
	}
	if h := l.Holes(); len(h) > 0 {
		t.Fatalf("a crash left holes: %+v", h)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestGroupLogSurvivesACrashAtEveryOperation(t *testing.T) {
	t.Parallel()
	mem := crashfs.NewMem()
	want, _, done := runGroupWorkload(t, mem)
	if !done {
		t.Fatal("the workload failed without a crash")
	}
	total := mem.Ops()
	if total < 50 {
		t.Fatalf("the workload has %d operations; too few to mean much", total)
	}
	if got := replayGroup(t, mem); !bytes.Equal(encodeState(got), encodeState(want)) {
		t.Fatalf("replay without a crash: %+v, want %+v", got, want)
	}
	for k := range total {
		mem := crashfs.NewMem()
		mem.DieAfter(k)
		acked, attempted, _ := runGroupWorkload(t, mem)
		mem.Crash()
		got := encodeState(replayGroup(t, mem))
		if !bytes.Equal(got, encodeState(acked)) && !bytes.Equal(got, encodeState(attempted)) {
			t.Fatalf("crash before operation %d of %d: replayed %x, want the acknowledged state %x (or with the record in flight, %x)",
				k, total, got, encodeState(acked), encodeState(attempted))
		}
	}
	t.Logf("%d crash points", total)
}
