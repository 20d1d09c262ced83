package client

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/braidmq/braid/internal/poll"

	"github.com/nats-io/nats.go"

	"github.com/braidmq/braid/api"
	braidnode "github.com/braidmq/braid/node"
)

// TestProducersShareRequests runs many producers on one connection
// against a real node: their batches share produce-multi requests (fewer
// requests than batches), every record is appended, and each producer's
// records land in its topic's one unit in Send order.
func TestProducersShareRequests(t *testing.T) {
	nc := startMuxNode(t)
	const topics, perTopic = 40, 100
	producers := topicProducers(t, nc, "share", topics, func(int) time.Duration { return 0 })
	mux := producers[0].mux
	for _, p := range producers {
		if p.mux != mux {
			t.Fatal("producers of one connection do not share its mux")
		}
	}
	var mu sync.Mutex
	offsets := make([][]uint64, topics) // per topic, in Send order
	for i := range offsets {
		offsets[i] = make([]uint64, perTopic)
	}
	var errs []error
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for n := range perTopic {
		for i, p := range producers {
			err := p.Send(ctx, api.Record{Key: []byte("k"), Payload: []byte(fmt.Sprint(n))}, func(id MessageID, err error) {
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, err)
					return
				}
				offsets[i][n] = id.Offset
			})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, p := range producers {
		if err := p.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, err := range errs {
		t.Fatal(err)
	}
	for i, offs := range offsets {
		for n, off := range offs {
			if off != uint64(n) {
				t.Fatalf("topic %d: record %d at offset %d, want %d (Send order)", i, n, off, n)
			}
		}
	}
	mux.mu.Lock()
	requests, parts := mux.lastID, mux.parts
	mux.mu.Unlock()
	if parts <= requests {
		t.Fatalf("%d batches in %d requests: no request carried more than one", parts, requests)
	}
	t.Logf("%d batches in %d requests", parts, requests)
	for _, p := range producers {
		if err := p.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	muxes.Lock()
	left := muxes.byConn[nc]
	muxes.Unlock()
	if left != nil {
		t.Fatal("the connection's mux outlived its producers")
	}
}

// TestLingerEndsWithoutWakingEachSender sends one record to each of many
// producers of one connection, half lingering 50 ms and half 5 ms (so an
// earlier deadline arrives after a later one), and never flushes: every
// record is appended when its linger ends, cut by the connection's
// lingerer rather than by each producer's sender.
func TestLingerEndsWithoutWakingEachSender(t *testing.T) {
	nc := startMuxNode(t)
	const topics = 60
	producers := topicProducers(t, nc, "linger", topics, func(i int) time.Duration {
		if i%2 == 1 {
			return 5 * time.Millisecond
		}
		return 50 * time.Millisecond
	})
	// Each sender has looked and found nothing to do before the sends.
	for _, p := range producers {
		poll.Eventually(t, 10*time.Second, "a producer's sender never went to sleep", func() bool {
			p.mu.Lock()
			defer p.mu.Unlock()
			return p.sleeping
		})
	}
	done := make(chan error, topics)
	for _, p := range producers {
		if err := p.Send(t.Context(), api.Record{Key: []byte("k"), Payload: []byte("v")}, func(_ MessageID, err error) {
			done <- err
		}); err != nil {
			t.Fatal(err)
		}
	}
	timeout := time.After(30 * time.Second)
	for range topics {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-timeout:
			t.Fatal("records lingering with no Flush were never sent")
		}
	}
	l := producers[0].mux.lingerer
	l.mu.Lock()
	collected := l.collected
	l.mu.Unlock()
	if collected < topics {
		t.Fatalf("the lingerer collected %d producers, want all %d", collected, topics)
	}
	for _, p := range producers {
		if err := p.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
}

// startMuxNode starts a node and returns a connection to it; both close
// when the test ends.
func startMuxNode(t *testing.T) *nats.Conn {
	t.Helper()
	node, err := braidnode.Start(context.Background(), braidnode.Config{DataDir: t.TempDir(), NATSListen: "127.0.0.1:-1",
		MetricsListen: "127.0.0.1:0", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = node.Close() })
	nc, err := nats.Connect(node.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// topicProducers creates n topics of one bucket, <prefix>0.., and a
// producer on nc for each, lingering linger(i).
func topicProducers(t *testing.T, nc *nats.Conn, prefix string, n int, linger func(i int) time.Duration) []*Producer {
	t.Helper()
	admin := NewAdmin(nc)
	producers := make([]*Producer, n)
	for i := range producers {
		uri := fmt.Sprintf("topic://public/default/%s%d", prefix, i)
		if _, err := admin.CreateTopic(t.Context(), uri, 1, WithTopicBuckets(1)); err != nil {
			t.Fatal(err)
		}
		p, err := NewProducer(nc, uri, WithLinger(linger(i)))
		if err != nil {
			t.Fatal(err)
		}
		producers[i] = p
	}
	return producers
}
