package lifecycle

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/braidmq/braid/actors"
	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/internal/poll"
	"github.com/braidmq/braid/routing"
	"github.com/braidmq/braid/topology"
	dto "github.com/prometheus/client_model/go"
)

// TestStorageWorkerAppliesTheHomesPolicies: the storage worker of a node
// that holds a segment of another node's topic applies the topic's own
// policies (from its record) to its log: with retention forever it keeps
// records older than the broker default's retention; once the topic's
// retention is an hour, they go.
func TestStorageWorkerAppliesTheHomesPolicies(t *testing.T) {
	home, other := twoNodes(t, 10*time.Millisecond)
	forever, small := "-1s", int64(4096)
	const uri = "topic://t/n/kept"
	if _, err := home.topics.CreateTopic(context.Background(), api.TopicCreateRequest{Topic: uri, Segments: 1, Buckets: 1,
		Policies: &api.Policies{Retention: &forever, SegmentBytes: &small}}); err != nil {
		t.Fatal(err)
	}
	topic, err := home.topics.Topic(uri)
	if err != nil {
		t.Fatal(err)
	}
	high, key := splitOffN2(t, home.topics, topic)
	old := time.Now().Add(-10 * 24 * time.Hour).UnixMilli() // past the broker default's 7 days
	for i := 0; i < 40; i++ {
		done := make(chan api.Result, 1)
		topic.Produce([]api.Record{{Key: []byte(key), Payload: make([]byte, 1024), Time: old}}, func(r []api.Result) { done <- r[0] })
		if r := <-done; r.Code != 0 {
			t.Fatal(r.Err())
		}
	}
	ticks := func() uint64 {
		var m dto.Metric
		if err := other.m.storageTickSeconds.Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetHistogram().GetSampleCount()
	}
	start := ticks()
	poll.Eventually(t, 5*time.Second, "five passes of the worker", func() bool { return ticks() >= start+5 })
	if first, next, err := topic.Bounds(high, 0); err != nil || first != 0 || next != 40 {
		t.Fatalf("the held segment's log: [%d, %d), %v; want [0, 40)", first, next, err)
	}
	hour, roll := "1h", int64(100)
	if _, err := home.topics.TopicPolicies(context.Background(), api.TopicPoliciesRequest{Topic: uri, Policies: &api.Policies{Retention: &hour, SegmentMs: &roll}}); err != nil {
		t.Fatal(err)
	}
	// The holder reads the record again within 5 s (HeldRecord).
	var first, next uint64
	gone := poll.Until(5*time.Second+10*time.Second, func() bool {
		first, next, err = topic.Bounds(high, 0)
		return err == nil && first == 40 && next == 40
	})
	if !gone {
		t.Fatalf("the held segment's log after a retention of an hour: [%d, %d), %v; want its records ten days old gone", first, next, err)
	}
}

// splitOffN2 splits segment 0 of topic and returns its child on n2 and a
// key of that child's range.
func splitOffN2(t *testing.T, home *actors.Manager, topic *actors.Topic) (topology.SegmentID, string) {
	t.Helper()
	if _, err := home.Change(context.Background(), topic.Topic(), topology.Split(0, nil)); err != nil {
		t.Fatal(err)
	}
	owned := topic.Layout().OwnedActive("n2")
	if len(owned) != 1 {
		t.Fatalf("n2 owns %v after the split", owned)
	}
	for i := 0; ; i++ {
		k := "k" + strconv.Itoa(i)
		if s, ok := topic.Layout().Owner(routing.KeyHashString(k)); ok && s.ID == owned[0] {
			return owned[0], k
		}
	}
}
