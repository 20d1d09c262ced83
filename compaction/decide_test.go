package compaction

import (
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/braidmq/braid/wal"
)

// units of records, by unit, at offsets 0, 1, ...
type fixture struct {
	units []Unit
	recs  [][]wal.Record
}

func (f *fixture) scan(u int, fn func(uint64, wal.Record) error) error {
	for off, r := range f.recs[u] {
		if err := fn(uint64(off), r); err != nil {
			return err
		}
	}
	return nil
}

// kept returns "unit:offset" of what d keeps, walking every unit in order.
func (f *fixture) kept(t *testing.T, d *Decision) []string {
	t.Helper()
	var out []string
	for u := range f.units {
		for off, r := range f.recs[u] {
			ok, err := d.Keep(u, uint64(off), r)
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				out = append(out, fmt.Sprintf("%d:%d", u, off))
			}
		}
	}
	return out
}

var now = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func rec(key, payload string, age time.Duration) wal.Record {
	r := wal.Record{Payload: []byte(payload), Timestamp: now.Add(-age).UnixMilli()}
	if key != "" {
		r.Key = []byte(key)
	}
	return r
}

func decide(t *testing.T, f *fixture, rules Rules, budget int64) []string {
	t.Helper()
	rules.Now = now
	d, err := Decide(f.units, f.scan, rules, budget, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	return f.kept(t, d)
}

func equal(a, b []string) bool { return fmt.Sprint(a) == fmt.Sprint(b) }

const day = 24 * time.Hour

// TestLatestPerKeyInOneUnit: the latest record of each key stays, the
// first of a key when it is its only one; unkeyed records go unless
// retained.
func TestLatestPerKeyInOneUnit(t *testing.T) {
	t.Parallel()
	f := &fixture{units: []Unit{{Rank: 1}}, recs: [][]wal.Record{{
		rec("a", "1", 2*day), rec("b", "1", 2*day), rec("", "x", 2*day), rec("a", "2", 2*day), rec("c", "1", 2*day), rec("b", "2", 2*day),
	}}}
	rules := Rules{DeleteRetention: day}
	if got := decide(t, f, rules, 1<<20); !equal(got, []string{"0:3", "0:4", "0:5"}) {
		t.Fatalf("kept %v", got)
	}
	rules.RetainNullKey = true
	if got := decide(t, f, rules, 1<<20); !equal(got, []string{"0:2", "0:3", "0:4", "0:5"}) {
		t.Fatalf("with null keys retained: kept %v", got)
	}
}

// TestLatestAcrossTheDAG: a key's record in a descendant segment obscures
// its records in two generations of ancestors, whatever order the units
// are read in; a key only an ancestor has stays there; a tombstone in a
// child deletes the key's values in its ancestors.
func TestLatestAcrossTheDAG(t *testing.T) {
	t.Parallel()
	// Units listed child first: the rank, not the order, decides.
	f := &fixture{units: []Unit{{Segment: 3, Rank: 3}, {Segment: 0, Rank: 1}, {Segment: 1, Rank: 2}}, recs: [][]wal.Record{
		{rec("a", "3", 2*day), rec("d", "", 2*day)},                        // the grandchild: a's latest, d's tombstone
		{rec("a", "1", 2*day), rec("b", "1", 2*day), rec("d", "1", 2*day)}, // the root
		{rec("a", "2", 2*day), rec("c", "2", 2*day), rec("b", "2", 2*day)}, // the child
	}}
	got := decide(t, f, Rules{DeleteRetention: day}, 1<<20)
	if !equal(got, []string{"0:0", "2:1", "2:2"}) {
		t.Fatalf("kept %v; want a from the grandchild, b and c from the child, d deleted", got)
	}
	// A recent tombstone stays (readers that saw d's value learn of its
	// delete), the values it deletes do not.
	got = decide(t, f, Rules{DeleteRetention: 3 * day}, 1<<20)
	if !equal(got, []string{"0:0", "0:1", "2:1", "2:2"}) {
		t.Fatalf("with the tombstone within delete_retention: kept %v", got)
	}
}

// TestTombstones: add and delete in one unit, delete then re-add, and a
// tombstone alone.
func TestTombstones(t *testing.T) {
	t.Parallel()
	f := &fixture{units: []Unit{{Rank: 1}}, recs: [][]wal.Record{{
		rec("gone", "v", 3*day), rec("gone", "", 2*day),
		rec("back", "v1", 3*day), rec("back", "", 3*day), rec("back", "v2", 2*day),
		rec("only", "", 2*day),
	}}}
	if got := decide(t, f, Rules{DeleteRetention: day}, 1<<20); !equal(got, []string{"0:4"}) {
		t.Fatalf("kept %v; want only the re-added value", got)
	}
}

// TestLagKeepsYoungRecords: a record younger than compaction_lag stays
// even when a later one of its key obscures it.
func TestLagKeepsYoungRecords(t *testing.T) {
	t.Parallel()
	f := &fixture{units: []Unit{{Rank: 1}}, recs: [][]wal.Record{{
		rec("a", "1", 2*time.Hour), rec("a", "2", 30*time.Minute), rec("a", "3", time.Minute), rec("", "x", time.Minute),
	}}}
	if got := decide(t, f, Rules{DeleteRetention: day, Lag: time.Hour}, 1<<20); !equal(got, []string{"0:1", "0:2", "0:3"}) {
		t.Fatalf("kept %v", got)
	}
}

// TestPassesWithinABudget: a topic with more keys than the budget holds is
// decided in several passes, with the result of one, and no file left.
func TestPassesWithinABudget(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	f := &fixture{}
	for u := 0; u < 4; u++ {
		f.units = append(f.units, Unit{Segment: uint64(u), Rank: uint64(1 + u/2)})
		var recs []wal.Record
		for i := 0; i < 6000; i++ {
			payload := "v"
			if rng.IntN(20) == 0 {
				payload = "" // a tombstone
			}
			recs = append(recs, rec(fmt.Sprint("k", rng.IntN(5000)), payload, 2*day))
		}
		f.recs = append(f.recs, recs)
	}
	distinct := map[string]bool{}
	for _, recs := range f.recs {
		for _, r := range recs {
			distinct[string(r.Key)] = true
		}
	}
	rules := Rules{DeleteRetention: day, Now: now}
	one := decide(t, f, rules, 1<<30)
	tmp := t.TempDir()
	d, err := Decide(f.units, f.scan, rules, 1024*EntryBytes, tmp)
	if err != nil {
		t.Fatal(err)
	}
	if d.Passes < 4 || d.Keys != len(distinct) {
		t.Fatalf("%d passes over %d keys; want several over %d", d.Passes, d.Keys, len(distinct))
	}
	if got := f.kept(t, d); !equal(got, one) {
		t.Fatalf("several passes keep %d records, one pass %d", len(got), len(one))
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(tmp); len(entries) != 0 {
		t.Fatalf("left in the temporary directory: %v", entries)
	}
	if len(one) == 0 || len(one) >= len(distinct) {
		t.Fatalf("kept %d of %d keys (some deleted)", len(one), len(distinct))
	}
}
