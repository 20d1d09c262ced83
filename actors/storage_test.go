package actors

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/topology"
	dto "github.com/prometheus/client_model/go"
)

// storageTopic creates a topic of one segment and one bucket with the
// storage policies js on a manager whose storage worker ticks every 10 ms.
func storageTopic(t *testing.T, uri, js string) (*Manager, *Topic) {
	t.Helper()
	m := newTestManagerWith(t, func(c *Config) { c.StorageTick = 10 * time.Millisecond })
	if err := m.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	var p api.Policies
	if err := json.Unmarshal([]byte(js), &p); err != nil {
		t.Fatal(err)
	}
	if _, err := m.CreateTopic(context.Background(), api.TopicCreateRequest{Topic: uri, Segments: 1, Buckets: 1, Policies: &p}); err != nil {
		t.Fatal(err)
	}
	topic, err := m.Topic(uri)
	if err != nil {
		t.Fatal(err)
	}
	return m, topic
}

// produceFor produces 1 KiB records for d and returns how many.
func produceFor(t *testing.T, topic *Topic, d time.Duration) int {
	t.Helper()
	n := 0
	for end := time.Now().Add(d); time.Now().Before(end); n++ {
		done := make(chan api.Result, 1)
		topic.Produce([]api.Record{{Key: []byte("k"), Payload: make([]byte, 1024)}}, func(r []api.Result) { done <- r[0] })
		if r := <-done; r.Code != 0 {
			t.Fatal(r.Err())
		}
	}
	return n
}

// TestStorageWorkerRetainsByTime: with a retention of 300 ms and files
// rolling every 50 ms, a log written steadily keeps a bounded number of
// bytes on disk, its first offset moves on, and what is left reads.
func TestStorageWorkerRetainsByTime(t *testing.T) {
	m, topic := storageTopic(t, "topic://t/n/retained", `{"retention":"300ms","segment_ms":50,"segment_bytes":16777216}`)
	n := produceFor(t, topic, 1500*time.Millisecond)
	l, err := topic.unitLog(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	// The newest record is well within retention (everything expires in
	// the end: production stopped).
	if recs, err := topic.Read(0, 0, uint64(n)-1, 1, 0); err != nil || len(recs) != 1 {
		t.Fatalf("reading the newest record: %d records, %v", len(recs), err)
	}
	// Once the worker has seen the last files expire, at most a
	// retention's worth (plus a file and a tick) is left.
	deadline := time.Now().Add(5 * time.Second)
	for l.FirstOffset() < uint64(n)/2 {
		if time.Now().After(deadline) {
			t.Fatalf("first offset %d after %d records over 1.5 s with a retention of 300 ms", l.FirstOffset(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if l.SizeBytes() > int64(n)*1100/2 {
		t.Fatalf("%d bytes on disk for %d records of 1 KiB, retention 300 ms of 1.5 s", l.SizeBytes(), n)
	}
	if l.NextOffset() != uint64(n) {
		t.Fatalf("next offset %d, want %d", l.NextOffset(), n)
	}
	if _, err := topic.Read(0, 0, 0, 10, 0); err == nil {
		t.Fatal("a read below the first offset found records")
	}
	if v := counterValue(t, m.m.storageRolled); v == 0 {
		t.Fatal("no roll by age counted")
	}
	if v := counterValue(t, m.m.storageRemovedFiles); v == 0 {
		t.Fatal("no removal counted")
	}
}

// TestStorageWorkerRetainsByBytes: with retention forever and
// retention_bytes of 64 KiB, the topic keeps at most that plus its open
// file; the open file is never removed.
func TestStorageWorkerRetainsByBytes(t *testing.T) {
	_, topic := storageTopic(t, "topic://t/n/bounded", `{"retention":"-1s","segment_ms":-1,"segment_bytes":16384,"retention_bytes":65536}`)
	n := produceFor(t, topic, 500*time.Millisecond)
	l, err := topic.unitLog(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for l.SizeBytes() > 65536+2*16384+70000 {
		if time.Now().After(deadline) {
			t.Fatalf("%d bytes on disk after %d records, retention_bytes 64 KiB", l.SizeBytes(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if l.NextOffset() != uint64(n) || l.FirstOffset() == 0 {
		t.Fatalf("offsets [%d, %d) after %d records", l.FirstOffset(), l.NextOffset(), n)
	}
	if recs, err := topic.Read(topology.SegmentID(0), 0, uint64(n)-1, 1, 0); err != nil || len(recs) != 1 {
		t.Fatalf("the newest record: %d, %v", len(recs), err)
	}
}

func counterValue(t *testing.T, c interface{ Write(*dto.Metric) error }) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}
