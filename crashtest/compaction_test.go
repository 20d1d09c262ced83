package crashtest

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/braidmq/braid/internal/poll"

	"github.com/nats-io/nats.go"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/client"
)

// TestKill9DuringCompaction kills a real `braid serve` with SIGKILL at a
// random moment of a compaction it was asked for (while it decides, writes
// or records, or after), again and again between more updates, and checks
// after each restart that the compacted view is the old one or the new
// one: every key's latest value is read last, and below the recorded
// horizons no key is kept twice. Once a compaction ends, every unit holds
// exactly one generation of compacted logs: none leaks.
func TestKill9DuringCompaction(t *testing.T) {
	kills := 4
	if v := os.Getenv("BRAID_CRASH_KILLS"); v != "" {
		fmt.Sscan(v, &kills)
		kills = max(kills/10, 4)
	}
	srv := newChildServer(t, buildBraid(t))
	if err := srv.start(); err != nil {
		t.Fatal(err)
	}
	nc := connect(t, srv.url(), "compaction")
	adm := client.NewAdmin(nc, client.WithRequestTimeout(5*time.Second))
	ready := func() {
		t.Helper()
		if err := srv.waitReady(context.Background(), nc, func(ctx context.Context) error { _, err := adm.ListTenants(ctx); return err }); err != nil {
			t.Fatal(err)
		}
	}
	ready()
	const name = "compacted"
	uri := "topic://public/default/" + name
	off := false
	if _, err := adm.CreateTopic(context.Background(), uri, 1, client.WithTopicBuckets(4), client.WithTopicPolicies(&api.Policies{AutoScale: &off})); err != nil {
		t.Fatal(err)
	}
	latest := map[string]string{}
	seq := 0
	produce := func(n int) {
		t.Helper()
		for sent := 0; sent < n; sent += 500 {
			recs := make([]api.Record, 500)
			for i := range recs {
				key := fmt.Sprint("k", (seq*7919)%700)
				recs[i] = api.Record{Key: []byte(key), Payload: []byte(fmt.Sprint(seq))}
				latest[key] = fmt.Sprint(seq)
				seq++
			}
			m, err := nc.Request(api.TopicSubject(api.ProduceBatchPrefix, "public", "default", name), api.AppendRecords(nil, recs), 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			res, err := api.DecodeResults(m.Data)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range res {
				if r.Code != 0 {
					t.Fatalf("produce: %v", r.Err())
				}
			}
		}
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	phases := map[string]int{} // where the kills landed, as the status said just before
	for k := 0; k < kills; k++ {
		produce(5000)
		if _, err := adm.Compact(context.Background(), uri); err != nil {
			t.Fatal(err)
		}
		// The kill point: a moment of the compaction, chosen at random (the
		// workload, not a wait).
		time.Sleep(time.Duration(rng.IntN(60)) * time.Millisecond)
		if st, err := adm.Compaction(context.Background(), uri); err == nil {
			phases[st.Phase]++
		}
		if err := srv.kill(); err != nil {
			t.Fatal(err)
		}
		if err := srv.start(); err != nil {
			t.Fatal(err)
		}
		ready()
		view := checkView(t, nc, name, latest)
		st, err := adm.Compaction(context.Background(), uri)
		if err != nil {
			t.Fatal(err)
		}
		horizon := map[int]uint64{}
		for _, h := range st.Horizons {
			horizon[h.Bucket] = h.Horizon
		}
		seen := map[string]bool{}
		for _, m := range view {
			if m.Offset < horizon[m.Bucket] {
				if seen[string(m.Key)] {
					t.Fatalf("generation %d: key %s kept twice below the horizons", st.Generation, m.Key)
				}
				seen[string(m.Key)] = true
			}
		}
	}
	// A compaction to its end: one generation left in each unit.
	if _, err := adm.Compact(context.Background(), uri); err != nil {
		t.Fatal(err)
	}
	var st api.CompactionStatus
	poll.Eventually(t, 30*time.Second, "the last compaction did not end", func() bool {
		var err error
		if st, err = adm.Compaction(context.Background(), uri); err != nil {
			t.Fatal(err)
		}
		return !st.Running
	})
	if st.Error != "" || st.Generation == 0 {
		t.Fatalf("the last compaction: %+v", st)
	}
	if st.Kept != uint64(len(latest)) {
		t.Fatalf("kept %d records of %d keys", st.Kept, len(latest))
	}
	view := checkView(t, nc, name, latest)
	if len(view) != len(latest) {
		t.Fatalf("the compacted view holds %d messages of %d keys", len(view), len(latest))
	}
	gens := map[string][]string{}
	filepath.WalkDir(srv.dataDir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() && strings.HasPrefix(d.Name(), "compacted-") {
			gens[filepath.Dir(path)] = append(gens[filepath.Dir(path)], d.Name())
			return filepath.SkipDir
		}
		return nil
	})
	if len(gens) != 4 {
		t.Fatalf("compacted logs in %d unit directories, want 4: %v", len(gens), gens)
	}
	for dir, g := range gens {
		if len(g) != 1 {
			t.Fatalf("%s holds generations %v after a compaction ended", dir, g)
		}
	}
	t.Logf("%d kills during compactions of %d updates over %d keys (phases just before the kills: %v): the view was whole after each", kills, seq, len(latest), phases)
}

// checkView reads the topic's compacted view and checks that each key's
// last value read is its latest, and returns it.
func checkView(t *testing.T, nc *nats.Conn, name string, latest map[string]string) []api.Message {
	t.Helper()
	var view []api.Message
	for b := 0; b < 4; b++ {
		for from := uint64(0); ; {
			req, _ := json.Marshal(api.ReadRequest{Units: []api.ReadUnit{{Segment: 0, Bucket: b, Offset: from}}, Max: 5000, Compacted: true})
			m, err := nc.Request(api.ReadSubject(api.ReadFetch, "public", "default", name), req, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			reply, err := api.DecodeReadReply(m.Data)
			if err != nil {
				t.Fatal(err)
			}
			if reply.Units[0].Code != 0 {
				t.Fatalf("unit %d: %d %s", b, reply.Units[0].Code, reply.Units[0].Message)
			}
			if len(reply.Messages) == 0 {
				break
			}
			for _, msg := range reply.Messages {
				if msg.Offset < from {
					t.Fatalf("unit %d: offset %d after %d", b, msg.Offset, from)
				}
				from = msg.Offset + 1
			}
			view = append(view, reply.Messages...)
		}
	}
	last := map[string]string{}
	for _, m := range view {
		last[string(m.Key)] = string(m.Payload)
	}
	for k, v := range latest {
		if last[k] != v {
			t.Fatalf("key %s reads %q last in the compacted view, its latest value is %q", k, last[k], v)
		}
	}
	return view
}
