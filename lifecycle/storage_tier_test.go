package lifecycle

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/internal/poll"
	"github.com/nats-io/nats.go/jetstream"
)

// TestOffloadedTopicReadsFromTheTier: with offload on and a local
// retention of 0, a topic's closed files go to the remote tier and leave
// the disk; its offsets still start at 0 and read back whole (through the
// tier, below the local first offset); stats count the tier; retention
// removes from the tier too; deleting the topic leaves nothing in it.
func TestOffloadedTopicReadsFromTheTier(t *testing.T) {
	lc, topic := storageTopic(t, "topic://t/n/tiered", `{"segment_ms":30,"segment_bytes":65536,"retention":"1h","offload":true,"local_retention_ms":0}`)
	const n = 300
	for i := 0; i < n; i++ {
		if r := produceOne(t, topic, "k", string(make([]byte, 512))); r.Code != 0 {
			t.Fatal(r.Err())
		}
	}
	l := unitLog(t, topic, 0, 0)
	tr := lc.store.Tier()
	if !poll.Until(10*time.Second, func() bool { return l.FirstOffset() >= n }) {
		t.Fatalf("local first offset %d, tier %+v: the files were not offloaded", l.FirstOffset(), tr.Bytes(l.Dir()))
	}
	if first, next, err := topic.Bounds(0, 0); err != nil || first != 0 || next != n {
		t.Fatalf("bounds [%d, %d), %v", first, next, err)
	}
	for off := uint64(0); off < n; {
		recs, err := topic.Read(0, 0, off, 50, 0)
		if err != nil || len(recs) == 0 {
			t.Fatalf("read at %d: %d records, %v", off, len(recs), err)
		}
		for _, r := range recs {
			if len(r.Payload) != 512 {
				t.Fatalf("offset %d: %d bytes", off, len(r.Payload))
			}
			off++
		}
	}
	if v := counterValue(t, lc.m.tierOffloadedFiles); v == 0 {
		t.Fatal("no offload counted")
	}
	st := topic.Stats()
	if c := st.Storage; c == nil || c.FilesOffloaded == 0 || c.BytesOffloaded == 0 || c.FilesRolled == 0 || c.FilesRemoved == 0 || c.LastPass == "" {
		t.Fatalf("the worker's counts in the stats: %+v", st.Storage)
	}
	if st.TierBytes == 0 || len(st.Buckets) != 1 || st.Buckets[0].FirstOffset != 0 || st.Buckets[0].LocalFirstOffset == 0 || st.Buckets[0].TierFiles == 0 {
		t.Fatalf("stats: %+v", st)
	}
	objects := func() int {
		infos, err := tr.Store().List(context.Background())
		if err != nil && !errors.Is(err, jetstream.ErrNoObjectsFound) {
			t.Fatal(err)
		}
		return len(infos)
	}
	if objects() == 0 {
		t.Fatal("no object in the store")
	}
	// Retention of 200 ms: the tier empties (the topic is idle).
	if _, err := lc.topics.TopicPolicies(context.Background(), api.TopicPoliciesRequest{Topic: topic.Topic(),
		Policies: &api.Policies{Retention: ptr("200ms"), SegmentMs: ptr(int64(20))}}); err != nil {
		t.Fatal(err)
	}
	if !poll.Until(20*time.Second, func() bool { return objects() == 0 }) {
		t.Fatalf("%d objects left past retention", objects())
	}
	// The log's first offset moves once its tier files are removed (the
	// same pass: polled, not read at once).
	if !poll.Until(10*time.Second, func() bool { first, _, _ := topic.Bounds(0, 0); return first == n }) {
		first, _, _ := topic.Bounds(0, 0)
		t.Fatalf("first offset %d after the tier's retention, want %d", first, n)
	}
	if v := counterValue(t, lc.m.tierRemovedFiles); v == 0 || topic.Stats().Storage.TierFilesRemoved == 0 {
		t.Fatalf("no removal from the tier counted: %v, %+v", v, topic.Stats().Storage)
	}
}

// TestDeletingAnOffloadedTopicEmptiesTheTier: a topic delete removes the
// objects of its logs.
func TestDeletingAnOffloadedTopicEmptiesTheTier(t *testing.T) {
	lc, topic := storageTopic(t, "topic://t/n/tiered-deleted", `{"segment_ms":30,"retention":"1h","offload":true,"local_retention_ms":-1}`)
	for i := 0; i < 100; i++ {
		if r := produceOne(t, topic, "k", "v"); r.Code != 0 {
			t.Fatal(r.Err())
		}
	}
	tr := lc.store.Tier()
	list := func() int {
		infos, err := tr.Store().List(context.Background())
		if err != nil && !errors.Is(err, jetstream.ErrNoObjectsFound) {
			t.Fatal(err)
		}
		return len(infos)
	}
	poll.Eventually(t, 10*time.Second, "something offloaded", func() bool { return list() > 0 })
	l := unitLog(t, topic, 0, 0)
	if l.FirstOffset() != 0 {
		t.Fatalf("with local_retention_ms -1 the local copies went: first offset %d", l.FirstOffset())
	}
	if err := lc.topics.DeleteTopic(context.Background(), topic.Topic()); err != nil {
		t.Fatal(err)
	}
	if n := list(); n != 0 {
		t.Fatalf("%d objects left after the delete", n)
	}
}
