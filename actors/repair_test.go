package actors

import (
	"errors"
	"io"
	"log/slog"
	"testing"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/routing"
	"github.com/braidmq/braid/topology"
	"github.com/braidmq/braid/wal"
)

// A home told of a damaged copy takes that copy, and only it, for lost
// until it is made again; a report it cannot use is refused
// INVALID_ARGUMENT and changes nothing.
func TestAReportedDamagedCopyCountsAsLostUntilMadeAgain(t *testing.T) {
	m := &Manager{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	name := routing.TopicName{Tenant: "t", Namespace: "n", Name: "x"}
	uri := name.String()
	damaged := topology.Replica{Node: "n2", Incarnation: "b"}
	for _, bad := range []DamageReport{
		{Topic: name, Segment: 1, Bucket: 0},
		{Topic: name, Segment: 1, Bucket: -1, Node: "n2"},
		{Topic: name, Segment: 1, Bucket: topology.MaxBuckets, Node: "n2"},
	} {
		if err := m.ReplicaDamaged(bad); !errors.Is(err, api.ErrInvalidArgument) {
			t.Fatalf("report %+v: %v, want INVALID_ARGUMENT", bad, err)
		}
	}
	if m.replicaDamaged(uri, 1, damaged) {
		t.Fatal("a refused report was taken")
	}
	if err := m.ReplicaDamaged(DamageReport{Topic: name, Segment: 1, Node: "n2", NodeIncarnation: "b"}); err != nil {
		t.Fatal(err)
	}
	if !m.replicaDamaged(uri, 1, damaged) {
		t.Fatal("the reported copy does not count as lost")
	}
	for _, other := range []struct {
		seg topology.SegmentID
		r   topology.Replica
	}{{2, damaged}, {1, topology.Replica{Node: "n2", Incarnation: "c"}}, {1, topology.Replica{Node: "n3", Incarnation: "b"}}} {
		if m.replicaDamaged(uri, other.seg, other.r) {
			t.Fatalf("segment %d's copy on %+v counts as lost: only segment 1's on n2/b was reported", other.seg, other.r)
		}
	}
	m.damageRepaired(uri, 1, damaged)
	if m.replicaDamaged(uri, 1, damaged) {
		t.Fatal("a copy made again still counts as lost")
	}
}

// A log closed under its group is no damage: nothing is reported.
func TestALogClosedUnderItsGroupIsNoDamage(t *testing.T) {
	reported := 0
	m := &Manager{cfg: Config{ReportDamaged: func(string, DamageReport) error { reported++; return nil }}}
	key := UnitKey{Topic: routing.TopicName{Tenant: "t", Namespace: "n", Name: "x"}, Segment: 1}
	m.noteDamaged(key, "i", wal.ErrClosed)
	if _, marked := m.damageMarked(key, "i"); marked || reported != 0 {
		t.Fatalf("a closed log marked damaged (%v), reported %d times", marked, reported)
	}
}
