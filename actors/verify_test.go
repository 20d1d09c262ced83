package actors

import (
	"context"
	"fmt"
	"testing"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/meta"
	"github.com/braidmq/braid/routing"
	"github.com/braidmq/braid/topology"
	"github.com/braidmq/braid/wal"
)

// logUnits serves reads of one unit from a log per node, as the units
// actors of other nodes would (a node without a log does not answer).
type logUnits struct{ logs map[string]*wal.Log }

func (u logUnits) ReadUnit(_ context.Context, owner string, req UnitRead) (UnitData, error) {
	l := u.logs[owner]
	if l == nil {
		return UnitData{}, api.Errorf(api.CodeUnavailable, "node %s is down", owner)
	}
	d := UnitData{First: l.FirstOffset(), Next: l.NextOffset()}
	if req.ChecksumTo > 0 {
		var err error
		d.Checksum, err = checksumRecords(l, req.From, req.ChecksumTo)
		return d, err
	}
	return d, nil
}

func (logUnits) AppendUnit(string, UnitAppend, func(uint64, error)) {}
func (logUnits) DropTopic(context.Context, string, routing.TopicName, string, []topology.SegmentID) error {
	return nil
}

// Replicas compared: equal committed prefixes agree (a follower trailing
// its leader is compared over what both hold); a record that differs, in
// its payload, its key, a header or its timestamp, is a disagreement; a
// replica that does not answer is named.
func TestVerifyUnit(t *testing.T) {
	name, err := routing.ParseTopic("topic://t/n/v")
	if err != nil {
		t.Fatal(err)
	}
	seg := topology.Segment{ID: 3, State: topology.StateActive, Buckets: 1,
		Replicas: []topology.Replica{{Node: "a", Incarnation: "1"}, {Node: "b", Incarnation: "2"}, {Node: "c", Incarnation: "3"}}}
	rec := func(i int) wal.Record {
		return wal.Record{Timestamp: int64(1000 + i), Key: fmt.Appendf(nil, "k%d", i%3),
			Headers: []wal.Header{{Key: "h", Value: []byte("v")}}, Payload: fmt.Appendf(nil, "m%d", i)}
	}
	open := func(n int, change func(i int, r *wal.Record)) *wal.Log {
		l, err := wal.Open(t.TempDir(), wal.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		for i := range n {
			r := rec(i)
			if change != nil {
				change(i, &r)
			}
			if _, err := l.Append(r); err != nil {
				t.Fatal(err)
			}
		}
		return l
	}
	check := func(what string, logs map[string]*wal.Log, agree bool, from, to uint64, unanswered string) {
		t.Helper()
		m := &Manager{cfg: Config{NodeID: "z", RemoteUnits: logUnits{logs}}}
		c := m.verifyUnit(context.Background(), name, meta.TopicRecord{Incarnation: "i"}, seg, 0)
		if c.Agree != agree || c.From != from || c.To != to {
			t.Fatalf("%s: agree %v over [%d, %d), want %v over [%d, %d): %+v", what, c.Agree, c.From, c.To, agree, from, to, c)
		}
		for _, r := range c.Replicas {
			if (r.Error != "") != (r.Node == unanswered) {
				t.Fatalf("%s: replica %s answered %+v", what, r.Node, r)
			}
			if r.Error == "" && len(r.Checksum) != 64 {
				t.Fatalf("%s: replica %s gave checksum %q", what, r.Node, r.Checksum)
			}
		}
	}
	check("equal", map[string]*wal.Log{"a": open(50, nil), "b": open(50, nil), "c": open(50, nil)}, true, 0, 50, "")
	check("a follower trails", map[string]*wal.Log{"a": open(50, nil), "b": open(40, nil), "c": open(50, nil)}, true, 0, 40, "")
	check("one down", map[string]*wal.Log{"a": open(50, nil), "c": open(50, nil)}, true, 0, 50, "b")
	for what, change := range map[string]func(int, *wal.Record){
		"a payload":   func(i int, r *wal.Record) { r.Payload = append(r.Payload, 'x') },
		"a key":       func(i int, r *wal.Record) { r.Key = []byte("other") },
		"a header":    func(i int, r *wal.Record) { r.Headers[0].Value = []byte("w") },
		"a timestamp": func(i int, r *wal.Record) { r.Timestamp++ },
	} {
		differ := func(i int, r *wal.Record) {
			if i == 17 {
				change(i, r)
			}
		}
		check(what+" differs", map[string]*wal.Log{"a": open(50, nil), "b": open(50, differ), "c": open(50, nil)}, false, 0, 50, "")
		// Past what every replica holds, a difference is not compared.
		check(what+" differs past the common prefix", map[string]*wal.Log{"a": open(50, nil), "b": open(50, differ), "c": open(17, nil)}, true, 0, 17, "")
	}
	if _, err := checksumRecords(open(5, nil), 2, 9); err == nil {
		t.Fatal("a checksum past the log's end was given")
	}
}
