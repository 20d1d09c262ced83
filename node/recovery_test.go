package node

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/braidmq/braid/internal/poll"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/topology"
)

// TestRestartRecoversTopicsLayoutsLogsAndCursors stops a node after splits,
// produces and acks, starts a new one on the same data directory, and
// checks that it serves the same layout, the same messages, and resumes the
// subscription after what was acknowledged.
func TestRestartRecoversTopicsLayoutsLogsAndCursors(t *testing.T) {
	dir := t.TempDir()
	n, nc := startNode(t, dir)
	const uri = "topic://public/default/orders"
	mustAdmin(t, nc, api.AdminTopicCreate, api.TopicCreateRequest{Topic: uri, Segments: 2}, nil)
	for i := 0; i < 50; i++ {
		produce(t, nc, "orders", fmt.Sprintf("k%d", i%7), []byte(fmt.Sprintf("a%d", i)))
	}
	mustAdmin(t, nc, api.AdminTopicSplit, map[string]any{"topic": uri, "segment": 1}, nil)
	for i := 0; i < 50; i++ {
		produce(t, nc, "orders", fmt.Sprintf("k%d", i%7), []byte(fmt.Sprintf("b%d", i)))
	}
	first := fetchAll(t, nc, "orders", "sub", "c1")
	if len(first) != 100 {
		t.Fatalf("read %d messages before the restart, want 100", len(first))
	}
	for i := 0; i < 30; i++ {
		produce(t, nc, "orders", fmt.Sprintf("k%d", i%7), []byte(fmt.Sprintf("c%d", i)))
	}
	var before api.TopicDescription
	mustAdmin(t, nc, api.AdminTopicDescribe, api.TopicRequest{Topic: uri}, &before)
	var statsBefore api.TopicStats
	mustAdmin(t, nc, api.AdminTopicStats, api.TopicRequest{Topic: uri}, &statsBefore)
	stopNode(t, n, nc)

	n, nc = startNode(t, dir)
	defer stopNode(t, n, nc)
	var after api.TopicDescription
	mustAdmin(t, nc, api.AdminTopicDescribe, api.TopicRequest{Topic: uri}, &after)
	if !reflect.DeepEqual(before, after) {
		t.Fatalf("layout changed across restart:\n%+v\n%+v", before, after)
	}
	var statsAfter api.TopicStats
	mustAdmin(t, nc, api.AdminTopicStats, api.TopicRequest{Topic: uri}, &statsAfter)
	if !reflect.DeepEqual(statsBefore.Buckets, statsAfter.Buckets) {
		t.Fatalf("logs changed across restart:\n%+v\n%+v", statsBefore.Buckets, statsAfter.Buckets)
	}
	rest := fetchAll(t, nc, "orders", "sub", "c1")
	if len(rest) != 30 {
		t.Fatalf("after restart the subscription read %d messages, want exactly the 30 unacknowledged", len(rest))
	}
	for _, m := range rest {
		if m.Payload[0] != 'c' {
			t.Fatalf("acknowledged message %q delivered again after restart", m.Payload)
		}
	}
	// The topic still takes writes and layout changes.
	produce(t, nc, "orders", "k1", []byte("d"))
	mustAdmin(t, nc, api.AdminTopicMerge, map[string]any{"topic": uri, "segments": []int{2, 3}}, nil)
}

// TestCrashedBucketRestartsWithoutLosingAcknowledgedMessages makes a bucket
// actor panic between produces: the supervisor restarts it from its log and
// every acknowledged message is still there, with dense offsets.
func TestCrashedBucketRestartsWithoutLosingAcknowledgedMessages(t *testing.T) {
	n, nc := startNode(t, t.TempDir())
	defer stopNode(t, n, nc)
	const uri = "topic://public/default/crashy"
	mustAdmin(t, nc, api.AdminTopicCreate, api.TopicCreateRequest{Topic: uri, Segments: 1, Buckets: 1}, nil)
	acked := map[string]api.ProduceReply{}
	for round := 0; round < 5; round++ {
		for i := 0; i < 20; i++ {
			p := fmt.Sprintf("r%d-%d", round, i)
			acked[p] = produce(t, nc, "crashy", "key", []byte(p))
		}
		if err := n.Topics().CrashBucket(uri, topology.SegmentID(0), 0); err != nil {
			t.Fatal(err)
		}
	}
	// Produce until the restarted bucket answers again (poll with deadline).
	var e *api.Error
	if !poll.Until(10*time.Second, func() bool {
		var data []byte
		if data, _, e = request(t, nc, api.TopicSubject(api.ProducePrefix, "public", "default", "crashy"), []byte("after"), nil); e != nil {
			return false
		}
		var r api.ProduceReply
		_ = json.Unmarshal(data, &r)
		acked["after"] = r
		return true
	}) {
		t.Fatalf("bucket never came back: %v", e)
	}
	msgs := fetchAll(t, nc, "crashy", "sub", "c")
	got := map[string]uint64{}
	for i, m := range msgs {
		if m.Offset != uint64(i) {
			t.Fatalf("offset %d at position %d: offsets are not dense", m.Offset, i)
		}
		got[string(m.Payload)] = m.Offset
	}
	for p, r := range acked {
		off, ok := got[p]
		if !ok {
			t.Fatalf("acknowledged message %q lost after bucket restarts", p)
		}
		if off != r.Offset {
			t.Fatalf("message %q acknowledged at offset %d, stored at %d", p, r.Offset, off)
		}
	}
	metrics := scrape(t, n)
	if !contains(metrics, "braid_bucket_restarts_total 5") {
		t.Fatalf("restart metric missing:\n%s", grep(metrics, "restarts"))
	}
}
