package actors

import (
	"context"
	"fmt"
	"syscall"
	"testing"

	"github.com/braidmq/braid/api"
)

// TestManyMoreLogsThanDescriptors lowers the process's file limit, as a
// small machine's would be, and keeps far more bucket logs active than
// the limit has descriptors: the logs' descriptors are held in a cache of
// half the limit, which closes and reopens files as they are used. Every
// topic stays active (none is passivated for descriptors), every produce
// is answered, every record reads back, and the cache holds no more than
// its bound. Without the cache the logs would hit the limit (EMFILE).
func TestManyMoreLogsThanDescriptors(t *testing.T) {
	var saved syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &saved); err != nil {
		t.Skip(err)
	}
	const limit = 256
	lowered := saved
	lowered.Cur = limit
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lowered); err != nil {
		t.Skipf("cannot lower the file limit: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &saved) })

	m := newTestManager(t)
	if m.cfg.MaxOpenFiles != limit/2 {
		t.Fatalf("descriptor bound %d, want half the file limit (%d)", m.cfg.MaxOpenFiles, limit/2)
	}
	const topics, buckets = 100, 4 // 400 logs against 128 descriptors
	uri := func(i int) string { return fmt.Sprintf("topic://t/n/many%d", i) }
	for i := range topics {
		if _, err := m.CreateTopic(context.Background(), api.TopicCreateRequest{Topic: uri(i), Segments: 1, Buckets: buckets}); err != nil {
			t.Fatal(err)
		}
	}
	for pass := range 2 {
		for i := range topics {
			topic, err := m.Topic(uri(i))
			if err != nil {
				t.Fatalf("pass %d, topic %d: %v", pass, i, err)
			}
			recs := make([]api.Record, 8) // keys over every bucket
			for k := range recs {
				recs[k] = api.Record{Key: []byte(fmt.Sprint(k)), Payload: []byte(fmt.Sprintf("%d-%d-%d", pass, i, k))}
			}
			for _, r := range produceSync(t, topic, recs...) {
				if r.Err() != nil {
					t.Fatalf("pass %d, topic %d: %v", pass, i, r.Err())
				}
			}
		}
	}
	for i := range topics {
		if _, active := m.Active(uri(i)); !active {
			t.Fatalf("topic %d was passivated: descriptors must not cost activations", i)
		}
		n := 0
		for _, recs := range readAll(t, m, uri(i)) {
			n += len(recs)
		}
		if n != 16 {
			t.Fatalf("topic %d holds %d records, want 16", i, n)
		}
	}
	c := m.store.FileCounts()
	if m.store.OpenLogs() < topics*buckets || c.Evictions == 0 || c.Open > c.Max {
		t.Fatalf("%d logs open, descriptor cache %+v: want every log open, evictions, at most %d descriptors", m.store.OpenLogs(), c, c.Max)
	}
	t.Logf("%d logs open on %d descriptors (cache %+v)", m.store.OpenLogs(), c.Open, c)
}
