package lifecycle

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/braidmq/braid/actors"
	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/internal/poll"
	"github.com/braidmq/braid/routing"
	"github.com/braidmq/braid/topology"
	dto "github.com/prometheus/client_model/go"
)

// compactAndWait runs a compaction of uri and waits for its end.
func compactAndWait(t *testing.T, lc *Lifecycle, uri string) {
	t.Helper()
	ctx := context.Background()
	if _, err := lc.Compact(ctx, uri); err != nil {
		t.Fatal(err)
	}
	var st api.CompactionStatus
	ended := poll.Until(20*time.Second, func() bool {
		var err error
		if st, err = lc.CompactionStatus(ctx, uri); err != nil {
			t.Fatal(err)
		}
		return !st.Running
	})
	if !ended {
		t.Fatalf("compaction still running: %+v", st)
	}
	if st.Error != "" {
		t.Fatalf("compaction failed: %s", st.Error)
	}
}

// compactedView reads every unit of the topic's compacted view from 0 and
// returns "key=payload@segment" of what it holds, sorted.
func compactedView(t *testing.T, topic *actors.Topic) []string {
	t.Helper()
	var out []string
	for _, s := range topic.Layout().Segments {
		if s.State == topology.StateDeleted {
			continue
		}
		for b := 0; b < s.Buckets; b++ {
			for from := uint64(0); ; {
				kept, resume, err := topic.ReadCompacted(s.ID, b, from, 100, 0)
				if err != nil {
					t.Fatal(err)
				}
				if len(kept) == 0 && resume == from {
					break
				}
				for _, k := range kept {
					rec, err := topic.Read(s.ID, b, k.Offset, 1, 0)
					if err != nil || string(rec[0].Payload) != string(k.Record.Payload) {
						t.Fatalf("offset %d of segment %d: kept %q, the log holds %v (%v)", k.Offset, s.ID, k.Record.Payload, rec, err)
					}
					out = append(out, fmt.Sprintf("%s=%s@%d", k.Record.Key, k.Record.Payload, s.ID))
				}
				if len(kept) > 0 && resume <= kept[len(kept)-1].Offset {
					t.Fatalf("segment %d: resume %d not past the last record read (%d)", s.ID, resume, kept[len(kept)-1].Offset)
				}
				from = resume
			}
		}
	}
	slices.Sort(out)
	return out
}

// TestCompactionAcrossTheDAG: after a split, a key's value in a child
// obscures its values in the parent, a tombstone in a child deletes the
// key's value in the parent (the tombstone stays, within
// delete_retention), a key only the parent has keeps its latest value
// there; offsets do not change; a second compaction reads the first's
// output and removes its generation; a generation a crash left behind is
// removed before the next is written.
func TestCompactionAcrossTheDAG(t *testing.T) {
	lc := newTestLifecycle(t, nil)
	const uri = "topic://t/n/compacted"
	topic := createTestTopic(t, lc, uri, 1, 1)
	for _, kv := range [][2]string{{"a", "1"}, {"b", "1"}, {"c", "1"}, {"d", "1"}, {"a", "2"}, {"e", "1"}, {"d", "2"}} {
		if r := produceOne(t, topic, kv[0], kv[1]); r.Code != 0 {
			t.Fatal(r.Err())
		}
	}
	if _, err := lc.topics.Change(context.Background(), uri, topology.Split(0, nil)); err != nil {
		t.Fatal(err)
	}
	topic, _ = lc.topics.Topic(uri)
	for _, kv := range [][2]string{{"a", "3"}, {"b", "3"}, {"c", ""}} {
		if r := produceOne(t, topic, kv[0], kv[1]); r.Code != 0 || r.Segment == 0 {
			t.Fatalf("produce after the split: %+v", r)
		}
	}
	compactAndWait(t, lc, uri)
	got := compactedView(t, topic)
	seg := func(key string) uint64 {
		s, _ := topic.Layout().Owner(routing.KeyHashString(key))
		return uint64(s.ID)
	}
	want := []string{
		fmt.Sprintf("a=3@%d", seg("a")), fmt.Sprintf("b=3@%d", seg("b")), fmt.Sprintf("c=@%d", seg("c")),
		"d=2@0", "e=1@0",
	}
	slices.Sort(want)
	view := got
	if !slices.Equal(view, want) {
		t.Fatalf("compacted view %v, want %v", view, want)
	}
	st, err := lc.CompactionStatus(context.Background(), uri)
	if err != nil || st.Generation != 1 || st.Keys != 5 || st.Kept != 5 || st.Read != 10 {
		t.Fatalf("status: %+v, %v", st, err)
	}

	// A second compaction: the first's output and what came after.
	if r := produceOne(t, topic, "e", "2"); r.Code != 0 {
		t.Fatal(r.Err())
	}
	l0 := unitLog(t, topic, 0, 0)
	// A third generation's directory, as a crash would leave it.
	if err := os.MkdirAll(filepath.Join(l0.Dir(), "compacted-3"), 0o750); err != nil {
		t.Fatal(err)
	}
	compactAndWait(t, lc, uri)
	st, _ = lc.CompactionStatus(context.Background(), uri)
	if st.Generation != 2 {
		t.Fatalf("second compaction: %+v", st)
	}
	for _, g := range []string{"compacted-1", "compacted-3"} {
		if _, err := os.Stat(filepath.Join(l0.Dir(), g)); !os.IsNotExist(err) {
			t.Fatalf("%s left: %v", g, err)
		}
	}
	view = compactedView(t, topic)
	if !slices.Contains(view, fmt.Sprintf("e=2@%d", seg("e"))) || slices.Contains(view, "e=1@0") || !slices.Contains(view, "d=2@0") {
		t.Fatalf("after the second compaction: %v", view)
	}
	// The raw log is untouched.
	if recs, err := topic.Read(0, 0, 0, 100, 0); err != nil || len(recs) != 7 {
		t.Fatalf("the parent's raw log: %d records, %v", len(recs), err)
	}
}

// TestCompactionStoppedAtEachStep: a compaction stopped after writing its
// logs and before recording them leaves the old view (its logs are
// removed by the next compaction); stopped after recording, the new view
// (the old generation's logs are removed by the next). A reader never
// sees a mix, and no generation is left behind once a compaction ends.
func TestCompactionStoppedAtEachStep(t *testing.T) {
	for _, step := range []string{"written", "recorded"} {
		t.Run(step, func(t *testing.T) {
			lc := newTestLifecycle(t, nil)
			uri := "topic://t/n/stopped-" + step
			topic := createTestTopic(t, lc, uri, 1, 1)
			for _, kv := range [][2]string{{"a", "1"}, {"a", "2"}, {"b", "1"}} {
				produceOne(t, topic, kv[0], kv[1])
			}
			compactAndWait(t, lc, uri)
			produceOne(t, topic, "a", "3")
			lc.compact.step = func(s string) error {
				if s == step {
					return fmt.Errorf("stopped at %s", s)
				}
				return nil
			}
			if _, err := lc.Compact(context.Background(), uri); err != nil {
				t.Fatal(err)
			}
			var st api.CompactionStatus
			if !poll.Until(10*time.Second, func() bool { st, _ = lc.CompactionStatus(context.Background(), uri); return !st.Running }) {
				t.Fatal("still running")
			}
			if st.Error == "" {
				t.Fatalf("the compaction did not stop: %+v", st)
			}
			lc.compact.step = nil
			// As a node that restarts: the topic stopped, the record
			// read again as it activates.
			if !slices.Contains(lc.topics.ReleaseAll(), uri) {
				t.Fatal("the topic did not stop")
			}
			topic, err := lc.topics.Topic(uri)
			if err != nil {
				t.Fatal(err)
			}
			view := compactedView(t, topic)
			want := []string{"a=2@0", "a=3@0", "b=1@0"} // the old view, and a=3 after its horizon
			if step == "recorded" {
				want = []string{"a=3@0", "b=1@0"}
			}
			if !slices.Equal(view, want) {
				t.Fatalf("view %v, want %v", view, want)
			}
			l := unitLog(t, topic, 0, 0)
			gens := func() []string {
				entries, _ := os.ReadDir(l.Dir())
				var out []string
				for _, e := range entries {
					if e.IsDir() {
						out = append(out, e.Name())
					}
				}
				return out
			}
			if got := gens(); len(got) != 2 {
				t.Fatalf("generations after the stop: %v, want the recorded one and the other", got)
			}
			compactAndWait(t, lc, uri)
			if got := gens(); len(got) != 1 {
				t.Fatalf("generations after the next compaction: %v", got)
			}
			if view := compactedView(t, topic); !slices.Equal(view, []string{"a=3@0", "b=1@0"}) {
				t.Fatalf("view after the next compaction: %v", view)
			}
		})
	}
}

// TestCompactionOverThreshold: a topic with compaction_threshold_bytes is
// compacted by itself once its logs grew by that much since the last
// compaction, not before.
func TestCompactionOverThreshold(t *testing.T) {
	lc, topic := storageTopic(t, "topic://t/n/auto-compacted", `{"compaction_threshold_bytes":65536}`)
	status := func() api.CompactionStatus {
		st, err := lc.CompactionStatus(context.Background(), topic.Topic())
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	for i := 0; i < 20; i++ {
		produceOne(t, topic, fmt.Sprint("k", i%10), string(make([]byte, 1024)))
	}
	// Under the threshold: a few passes of the worker compact nothing.
	ticks := func() uint64 {
		var d dto.Metric
		if err := lc.m.storageTickSeconds.Write(&d); err != nil {
			t.Fatal(err)
		}
		return d.GetHistogram().GetSampleCount()
	}
	start := ticks()
	poll.Eventually(t, 5*time.Second, "five passes of the worker", func() bool { return ticks() >= start+5 })
	if st := status(); st.Generation != 0 || st.Running {
		t.Fatalf("compacted under the threshold: %+v", st)
	}
	for i := 0; i < 80; i++ {
		produceOne(t, topic, fmt.Sprint("k", i%10), string(make([]byte, 1024)))
	}
	poll.Eventually(t, 15*time.Second, "compacted over the threshold", func() bool { return status().Generation != 0 })
	if st := status(); st.Keys != 10 {
		t.Fatalf("status: %+v", st)
	}
}
