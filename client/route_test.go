package client

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/routing"
	"github.com/braidmq/braid/topology"
)

// describe converts a topology layout to the topic.describe reply, through
// the JSON both sides share.
func description(t testing.TB, l topology.Layout) api.TopicDescription {
	t.Helper()
	b, err := json.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	var d api.TopicDescription
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	d.Topic = "topic://t/ns/x"
	return d
}

func mustRouter(t testing.TB, l topology.Layout) *router {
	t.Helper()
	r, err := newRouter(description(t, l))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestNewRouterMatchesLayout(t *testing.T) {
	l, err := topology.New(3, 5)
	if err != nil {
		t.Fatal(err)
	}
	if l, err = l.Split(1, nil); err != nil {
		t.Fatal(err)
	}
	r := mustRouter(t, l)
	if r.epoch != l.Epoch {
		t.Fatalf("epoch %d, want %d", r.epoch, l.Epoch)
	}
	if got, want := r.table.Len(), len(l.Active()); got != want {
		t.Fatalf("%d spans, want %d active segments", got, want)
	}
	for i := range 10_000 {
		key := []byte("key-" + strconv.Itoa(i))
		h := routing.KeyHash(key)
		owner, ok := l.Owner(h)
		if !ok {
			t.Fatalf("no owner for %x", h)
		}
		u := r.route(newPending(api.Record{Key: key}, nil))
		want := unit{uint64(owner.ID), routing.Bucket(h, owner.Buckets)}
		if u != want {
			t.Fatalf("key %q routed to %v, want %v", key, u, want)
		}
	}
}

func TestNewRouterUnkeyedVisitsEveryUnit(t *testing.T) {
	l, _ := topology.New(2, 5) // buckets 3 + 2
	r := mustRouter(t, l)
	seen := map[unit]int{}
	for range 50 {
		seen[r.route(newPending(api.Record{Payload: []byte("x")}, nil))]++
	}
	if len(seen) != 5 {
		t.Fatalf("round robin visited %d units, want 5: %v", len(seen), seen)
	}
	for u, n := range seen {
		if n != 10 {
			t.Errorf("unit %v got %d of 50, want 10", u, n)
		}
	}
}

func TestNewRouterRefusesBadLayouts(t *testing.T) {
	full := [2]string{"0x0000000000000000", "0xffffffffffffffff"}
	half := [2]string{"0x0000000000000000", "0x7fffffffffffffff"}
	tests := []struct {
		name string
		segs []api.SegmentInfo
	}{
		{"no active segment", []api.SegmentInfo{{ID: 0, State: "sealed", Range: full, Buckets: 1}}},
		{"gap", []api.SegmentInfo{{ID: 0, State: "active", Range: half, Buckets: 1}}},
		{"overlap", []api.SegmentInfo{
			{ID: 0, State: "active", Range: full, Buckets: 1},
			{ID: 1, State: "active", Range: half, Buckets: 1}}},
		{"bad hash", []api.SegmentInfo{{ID: 0, State: "active", Range: [2]string{"0", "0xzz"}, Buckets: 1}}},
		{"no bucket", []api.SegmentInfo{{ID: 0, State: "active", Range: full, Buckets: 0}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := newRouter(api.TopicDescription{Topic: "topic://t/n/x", Epoch: 1, Segments: tt.segs}); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}

func TestNewRouterFixedTopic(t *testing.T) {
	full := [2]string{"0x0000000000000000", "0xffffffffffffffff"}
	part := func(i int) *int { return &i }
	d := api.TopicDescription{Topic: "persistent://t/n/x", Epoch: 1, Segments: []api.SegmentInfo{
		{ID: 0, State: "active", Range: full, Buckets: 1, Partition: part(0)},
		{ID: 1, State: "active", Range: full, Buckets: 1, Partition: part(1)},
		{ID: 2, State: "active", Range: full, Buckets: 1, Partition: part(2)},
	}}
	r, err := newRouter(d)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 1000 {
		key := []byte(strconv.Itoa(i))
		want := uint64(routing.FixedPartition(routing.KeyHash(key), 3))
		if u := r.route(newPending(api.Record{Key: key}, nil)); u != (unit{want, 0}) {
			t.Fatalf("key %q routed to %v, want segment %d", key, u, want)
		}
	}
}

// rec is a test record: key k, sequence number seq in the payload.
func testRecord(k, seq int) *pending {
	key := []byte("k" + strconv.Itoa(k))
	if k < 0 {
		key = nil
	}
	return newPending(api.Record{Key: key, Payload: []byte(strconv.Itoa(seq))}, nil)
}

// checkReroute routes n records by before into per-unit queues (the state
// of a producer), re-routes them by after, and checks the producer rule:
// every record once, each at the unit after routes its key to, and every
// key's records in their original order.
func checkReroute(t *testing.T, rnd *rand.Rand, before, after topology.Layout, n, keys int) {
	t.Helper()
	rb, ra := mustRouter(t, before), mustRouter(t, after)
	old := map[unit][]*pending{}
	for seq := range n {
		k := rnd.IntN(keys+1) - 1 // -1 is unkeyed
		p := testRecord(k, seq)
		u := rb.route(p)
		old[u] = append(old[u], p)
	}
	out := reroute(old, ra)
	total := 0
	lastSeq := map[string]int{}
	for u, ps := range out {
		for _, p := range ps {
			total++
			seq, _ := strconv.Atoi(string(p.rec.Payload))
			if !p.keyed {
				if seg, ok := after.Segment(topology.SegmentID(u.segment)); !ok || seg.State != topology.StateActive || u.bucket >= seg.Buckets {
					t.Fatalf("unkeyed record %d routed to %v, not a unit of an active segment", seq, u)
				}
				continue
			}
			owner, _ := after.Owner(p.hash)
			if want := (unit{uint64(owner.ID), routing.Bucket(p.hash, owner.Buckets)}); u != want {
				t.Fatalf("record %d of key %s at %v, want %v", seq, p.rec.Key, u, want)
			}
			if prev, ok := lastSeq[string(p.rec.Key)]; ok && prev > seq {
				t.Fatalf("key %s: record %d after %d", p.rec.Key, seq, prev)
			}
			lastSeq[string(p.rec.Key)] = seq
		}
	}
	if total != n {
		t.Fatalf("%d records after re-routing, want %d", total, n)
	}
}

func TestRerouteKeepsKeyOrder(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	base, err := topology.New(2, 4)
	if err != nil {
		t.Fatal(err)
	}
	split, err := base.Split(0, nil)
	if err != nil {
		t.Fatal(err)
	}
	merged, err := split.Merge(2, 3)
	if err != nil {
		t.Fatal(err)
	}
	rebucketed, err := merged.Rebucket(1, 7)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name          string
		before, after topology.Layout
	}{
		{"split", base, split},
		{"merge", split, merged},
		{"rebucket", merged, rebucketed},
		{"three changes at once", base, rebucketed},
		{"same layout", base, base},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, keys := range []int{1, 10, 1000} {
				t.Run(fmt.Sprint(keys, "keys"), func(t *testing.T) {
					checkReroute(t, rnd, tt.before, tt.after, 5000, keys)
				})
			}
		})
	}
}

// TestRerouteRandomHistories re-routes along random histories of splits and
// merges, as a property test.
func TestRerouteRandomHistories(t *testing.T) {
	rnd := rand.New(rand.NewPCG(3, 4))
	for range 50 {
		l, err := topology.New(1+rnd.IntN(3), 4)
		if err != nil {
			t.Fatal(err)
		}
		for range 6 {
			next := l
			active := l.Active()
			switch s := active[rnd.IntN(len(active))]; {
			case rnd.IntN(2) == 0 && len(active) > 1:
				i := rnd.IntN(len(active) - 1)
				next, err = l.Merge(active[i].ID, active[i+1].ID)
			default:
				next, err = l.Split(s.ID, nil)
			}
			if err != nil {
				t.Fatal(err)
			}
			checkReroute(t, rnd, l, next, 500, 20)
			l = next
		}
	}
}

// TestRerouteRejectedFirst checks that records rejected from a unit's batch
// stay in front of the records queued behind them.
func TestRerouteRejectedFirst(t *testing.T) {
	base, _ := topology.New(1, 1)
	split, _ := base.Split(0, nil)
	rb, ra := mustRouter(t, base), mustRouter(t, split)
	var rejected, queued []*pending
	for seq := range 10 {
		p := testRecord(7, seq)
		if seq < 4 {
			rejected = append(rejected, p)
		} else {
			queued = append(queued, p)
		}
	}
	u := rb.route(rejected[0])
	out := reroute(map[unit][]*pending{u: append(rejected, queued...)}, ra)
	if len(out) != 1 {
		t.Fatalf("one key spread over %d units", len(out))
	}
	for _, ps := range out {
		for i, p := range ps {
			if string(p.rec.Payload) != strconv.Itoa(i) {
				t.Fatalf("position %d holds record %s", i, p.rec.Payload)
			}
		}
	}
}
