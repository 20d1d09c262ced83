package consumers

import (
	"slices"
	"testing"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/topology"
	"github.com/braidmq/braid/wal"
)

// firstOffsets returns, per unit, the first offset of msgs.
func firstOffsets(msgs []api.Message) map[topology.Unit]uint64 {
	out := make(map[topology.Unit]uint64)
	for _, m := range msgs {
		if _, ok := out[unitOf(m)]; !ok {
			out[unitOf(m)] = m.Offset
		}
	}
	return out
}

// onlyUnit returns the one unit msgs come from, failing otherwise.
func onlyUnit(t *testing.T, who string, msgs []api.Message) topology.Unit {
	t.Helper()
	units := unitsOf(msgs)
	if len(units) != 1 {
		t.Fatalf("%s got messages of units %v, want one unit", who, units)
	}
	return unitOf(msgs[0])
}

// TestRestartKeepsUnitsForTheirPreviousOwners: after a restart each unit
// waits for the consumer that held it; a consumer joining first gets
// nothing of theirs, the previous owner joining again gets its unit back
// from the durable ack cursor, and one that leaves releases its unit at
// once. Compaction after every other record puts the owners in snapshots.
func TestRestartKeepsUnitsForTheirPreviousOwners(t *testing.T) {
	src := newTestSource(t, 1, 2)
	for b := range 2 {
		src.appendTo(0, b, "0", "1", "2", "3", "4")
	}
	h := newHarness(t, src, WithCompactAfter(2))
	h.join("a")
	h.join("b")
	msgsA, _ := h.fetch("a", 100)
	msgsB, _ := h.fetch("b", 100)
	unitA, unitB := onlyUnit(t, "a", msgsA), onlyUnit(t, "b", msgsB)
	if len(msgsA) != 5 || len(msgsB) != 5 || unitA == unitB {
		t.Fatalf("a got %v, b got %v; want 5 messages of one unit each", unitsOf(msgsA), unitsOf(msgsB))
	}
	h.ack("a", pos(0, unitA.Bucket, 0))
	h.ack("a", pos(0, unitA.Bucket, 1)) // a's application has seen all 5; acks of 2..4 are lost

	h.reopen()
	log, err := wal.Open(h.m.groupDir(src.Topic(), h.sub), wal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	logFirst := log.FirstOffset()
	log.Close()
	if logFirst == 0 {
		t.Fatal("the group log was never compacted: the owners were not read from a snapshot")
	}

	h.join("c")
	if msgs, assigned := h.fetch("c", 100); len(msgs) != 0 || assigned != 0 {
		t.Fatalf("c got %v (assigned %d) while a and b are awaited; want nothing", unitsOf(msgs), assigned)
	}
	if st := h.stats(); !slices.Equal(st.AwaitedOwners, []string{"a", "b"}) {
		t.Fatalf("awaited owners %v, want [a b]", st.AwaitedOwners)
	}

	// a comes back: its unit again, from its durable ack cursor.
	h.join("a")
	msgs, assigned := h.fetch("a", 100)
	if onlyUnit(t, "a", msgs) != unitA || len(msgs) != 3 || msgs[0].Offset != 2 || assigned != 1 {
		t.Fatalf("a got %d messages from %v (assigned %d), want its unit's offsets 2..4", len(msgs), firstOffsets(msgs), assigned)
	}
	if msgs, _ := h.fetch("c", 100); len(msgs) != 0 {
		t.Fatalf("c got %v while b is awaited", unitsOf(msgs))
	}
	if st := h.stats(); !slices.Equal(st.AwaitedOwners, []string{"b"}) {
		t.Fatalf("awaited owners %v, want [b]", st.AwaitedOwners)
	}

	// b leaves without coming back: its unit goes to c at once, all of it
	// delivered again (b acknowledged nothing).
	h.leave("b")
	msgs, _ = h.fetch("c", 100)
	if onlyUnit(t, "c", msgs) != unitB || len(msgs) != 5 || msgs[0].Offset != 0 {
		t.Fatalf("c got %d messages from %v, want b's unit from offset 0", len(msgs), firstOffsets(msgs))
	}

	// The handoff to c was recorded too: after another restart a consumer
	// joining first gets nothing of c's unit.
	h.reopen()
	h.join("d")
	if msgs, _ := h.fetch("d", 100); len(msgs) != 0 {
		t.Fatalf("d got %v after the second restart; a and c are awaited", unitsOf(msgs))
	}
	h.join("c")
	msgs, _ = h.fetch("c", 100)
	if onlyUnit(t, "c", msgs) != unitB || len(msgs) != 5 {
		t.Fatalf("c got %v after the second restart, want its unit again", unitsOf(msgs))
	}
}

// TestRestartGraceExpires: a previous owner that does not come back within
// its session timeout (recorded in the log: 300ms, not the 10s default) is
// declared dead, and its unit moves with what it did not acknowledge.
func TestRestartGraceExpires(t *testing.T) {
	src := newTestSource(t, 1, 1)
	src.appendTo(0, 0, "0", "1", "2", "3", "4")
	h := newHarness(t, src)
	const grace = 300 * time.Millisecond
	if _, err := h.joinReq(api.JoinRequest{Consumer: "a", SessionTimeout: grace.String()}); err != nil {
		t.Fatal(err)
	}
	msgs, _ := h.fetch("a", 100)
	if len(msgs) != 5 {
		t.Fatalf("a got %d messages, want 5", len(msgs))
	}
	h.ack("a", pos(0, 0, 2))

	h.reopen()
	h.join("b") // the group starts: a's grace runs from now
	msgs, _ = h.fetch("b", 100)
	if len(msgs) != 0 {
		t.Fatalf("b got %v during a's grace", unitsOf(msgs))
	}
	h.advance(grace - time.Millisecond)
	if msgs, _ = h.fetch("b", 100); len(msgs) != 0 {
		t.Fatalf("b got %v a millisecond before the end of a's grace of %s", unitsOf(msgs), grace)
	}
	if st := h.stats(); !slices.Equal(st.AwaitedOwners, []string{"a"}) {
		t.Fatalf("awaited owners %v a millisecond before the end of a's grace, want [a]", st.AwaitedOwners)
	}
	h.advance(time.Millisecond)
	msgs = h.fetchUntil("b", 100, 10*time.Second)
	if len(msgs) != 2 || msgs[0].Offset != 3 {
		t.Fatalf("b got %d messages from %v, want a's unacknowledged offsets 3 and 4", len(msgs), firstOffsets(msgs))
	}
	if st := h.stats(); len(st.AwaitedOwners) != 0 {
		t.Fatalf("awaited owners %v after the grace, want none", st.AwaitedOwners)
	}
	// a is a stranger now: it joins as a new consumer and gets nothing.
	h.join("a")
	if msgs, assigned := h.fetch("a", 100); len(msgs) != 0 || assigned != 0 {
		t.Fatalf("a got %v (assigned %d) after its grace", unitsOf(msgs), assigned)
	}
}

// TestRestoredOwnerReacknowledgesBeforeHandoff: after a restart Assign
// moves a unit away from the owner that held it, which may have returned
// messages whose acks were lost. The unit goes over only once that owner
// has acknowledged, again, everything up to where the log ended at the
// restart; meanwhile it gets those offsets again, and nothing past them.
func TestRestoredOwnerReacknowledgesBeforeHandoff(t *testing.T) {
	src := newTestSource(t, 1, 2)
	for b := range 2 {
		src.appendTo(0, b, "0", "1", "2", "3")
	}
	h := newHarness(t, src)
	h.join("a")
	if msgs, _ := h.fetch("a", 100); len(msgs) != 8 {
		t.Fatalf("a got %d messages, want 8", len(msgs))
	}
	h.ack("a", pos(0, 0, 0), pos(0, 1, 0))

	h.reopen()
	h.join("a") // starts the group
	for b := range 2 {
		src.appendTo(0, b, "4", "5") // after the restart: a never had these
	}
	h.join("b") // a held both units: one of them is to move to b
	msgs, _ := h.fetch("b", 100)
	if len(msgs) != 0 {
		t.Fatalf("b got %v before a acknowledged again what it may have had", unitsOf(msgs))
	}
	if st := h.stats(); st.PendingHandoffs != 1 {
		t.Fatalf("pending handoffs %d, want 1", st.PendingHandoffs)
	}
	msgs, _ = h.fetch("a", 100)
	got := unitsOf(msgs)
	var kept, moving topology.Unit
	for unit, n := range got {
		if n == 5 {
			kept = unit
		} else {
			moving = unit
		}
	}
	if len(got) != 2 || got[kept] != 5 || got[moving] != 3 || firstOffsets(msgs)[moving] != 1 {
		t.Fatalf("a got %v from %v; want offsets 1..5 of the unit it keeps, 1..3 of the moving one", got, firstOffsets(msgs))
	}
	h.ack("a", pos(0, moving.Bucket, 2))
	if msgs, _ := h.fetch("b", 100); len(msgs) != 0 {
		t.Fatalf("b got %v with a one message short", unitsOf(msgs))
	}
	h.ack("a", pos(0, moving.Bucket, 3))
	msgs, assigned := h.fetch("b", 100)
	if onlyUnit(t, "b", msgs) != moving || len(msgs) != 2 || msgs[0].Offset != 4 || msgs[0].Deliveries != 1 || assigned != 1 {
		t.Fatalf("b got %d messages from %v (assigned %d), want offsets 4 and 5 of the moving unit, first delivery",
			len(msgs), firstOffsets(msgs), assigned)
	}
}

// TestRestartReplaysOwnersOfLegacyLog: a log written before owners were
// recorded (kind 3 snapshot, no owners) still loads; nobody is awaited.
func TestRestartReplaysOwnersOfLegacyLog(t *testing.T) {
	src := newTestSource(t, 1, 1)
	src.appendTo(0, 0, "0", "1")
	h := newHarness(t, src)
	dir := h.m.groupDir(src.Topic(), h.sub)
	log, err := wal.Open(dir, wal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	legacy := stateRecord{Kind: kindSnapshot, Cursors: []unitCursor{{Unit: u(0, 0), Acked: 1}}}
	if _, err := log.Append(wal.Record{Payload: encodeRecord(nil, legacy)}); err != nil {
		t.Fatal(err)
	}
	log.Close()
	h.join("b")
	msgs, _ := h.fetch("b", 10)
	if len(msgs) != 1 || msgs[0].Offset != 1 {
		t.Fatalf("got %v, want offset 1 at once", msgs)
	}
}
