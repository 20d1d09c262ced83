package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/braidmq/braid/internal/poll"

	"github.com/nats-io/nats.go"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/client"
	braidnode "github.com/braidmq/braid/node"
)

// These tests run the client against a real embedded node (braidnode.Start)
// in a temporary directory.

func startNode(t testing.TB) (*braidnode.Node, *nats.Conn) {
	t.Helper()
	node, err := braidnode.Start(context.Background(), braidnode.Config{
		DataDir: t.TempDir(), NATSListen: "127.0.0.1:-1", MetricsListen: "127.0.0.1:0",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatalf("start node: %v", err)
	}
	t.Cleanup(func() {
		if err := node.Close(); err != nil {
			t.Errorf("close node: %v", err)
		}
	})
	nc, err := nats.Connect(node.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return node, nc
}

func createTopic(t *testing.T, nc *nats.Conn, uri string, segments, buckets int) api.TopicDescription {
	t.Helper()
	d, err := client.NewAdmin(nc).CreateTopic(t.Context(), uri, segments, client.WithTopicBuckets(buckets))
	if err != nil {
		t.Fatalf("create %s: %v", uri, err)
	}
	return d
}

func activeIDs(d api.TopicDescription) []uint64 {
	var ids []uint64
	for _, s := range d.Segments {
		if s.State == "active" {
			ids = append(ids, s.ID)
		}
	}
	return ids
}

// keyed is record seq of key seq%keys.
func keyed(seq, keys int) api.Record {
	return api.Record{Key: []byte("key-" + strconv.Itoa(seq%keys)), Payload: []byte(strconv.Itoa(seq))}
}

// sendAll sends records 0..n-1 and fails the test on any callback error.
func sendAll(t *testing.T, p *client.Producer, n, keys int, before func(i int)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var mu sync.Mutex
	var errs []error
	for i := range n {
		if before != nil {
			before(i)
		}
		err := p.Send(ctx, keyed(i, keys), func(_ client.MessageID, err error) {
			if err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("record %d: %w", i, err))
				mu.Unlock()
			}
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// reader collects what a consumer reads and checks per-key order as it goes.
type reader struct {
	mu   sync.Mutex
	seen map[int]int // seq -> times delivered
	last map[string]int
	err  error
}

func newReader() *reader { return &reader{seen: map[int]int{}, last: map[string]int{}} }

func (r *reader) add(m *client.Message) {
	r.mu.Lock()
	defer r.mu.Unlock()
	seq, _ := strconv.Atoi(string(m.Payload))
	r.seen[seq]++
	if prev, ok := r.last[string(m.Key)]; ok && prev >= seq && r.err == nil {
		r.err = fmt.Errorf("key %s: %d read after %d (id %v)", m.Key, seq, prev, m.ID)
	}
	r.last[string(m.Key)] = seq
}

func (r *reader) distinct() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.seen)
}

// consume reads with c into r until r has n distinct messages, acking each.
func consume(t *testing.T, c *client.StreamConsumer, r *reader, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for r.distinct() < n {
		m, err := c.Next(ctx)
		if err != nil {
			t.Fatalf("next after %d of %d: %v", r.distinct(), n, err)
		}
		r.add(m)
		m.Ack()
	}
}

func (r *reader) check(t *testing.T, n int) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		t.Fatal(r.err)
	}
	for seq := range n {
		switch r.seen[seq] {
		case 0:
			t.Fatalf("record %d never read", seq)
		case 1:
		default:
			t.Fatalf("record %d read %d times", seq, r.seen[seq])
		}
	}
}

func TestIntegrationProduceConsumeKeyOrder(t *testing.T) {
	_, nc := startNode(t)
	const uri = "topic://public/default/orders"
	createTopic(t, nc, uri, 2, 4)
	p, err := client.NewProducer(nc, uri, client.WithBatch(100, 1<<20))
	if err != nil {
		t.Fatal(err)
	}
	const n, keys = 3000, 40
	sendAll(t, p, n, keys, nil)
	if err := p.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	c, err := client.NewStreamConsumer(nc, uri, "readers", client.WithFetch(200, 1<<20, 100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	r := newReader()
	consume(t, c, r, n)
	r.check(t, n)
	if err := c.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// TestIntegrationSplitWhileProducing splits and merges segments while a
// producer sends and a consumer reads: nothing lost, nothing duplicated,
// every key in order, whether the server absorbs the changes (the default)
// or the producer re-routes what the seals refuse (WithEpochRouting).
func TestIntegrationSplitWhileProducing(t *testing.T) {
	for _, epoch := range []bool{false, true} {
		t.Run(fmt.Sprintf("epoch-routing=%v", epoch), func(t *testing.T) { testSplitWhileProducing(t, epoch) })
	}
}

func testSplitWhileProducing(t *testing.T, epochRouting bool) {
	_, nc := startNode(t)
	const uri = "topic://public/default/elastic"
	createTopic(t, nc, uri, 1, 2)
	admin := client.NewAdmin(nc)
	p, err := client.NewProducer(nc, uri, client.WithBatch(50, 1<<20), client.WithEpochRouting(epochRouting))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	c, err := client.NewStreamConsumer(nc, uri, "readers", client.WithFetch(100, 1<<20, 50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())

	const n, keys = 6000, 64
	r := newReader()
	done := make(chan struct{})
	go func() {
		defer close(done)
		consume(t, c, r, n)
	}()
	reshape := func(what string, f func(api.TopicDescription) (api.TopicDescription, error)) {
		d, err := admin.DescribeTopic(t.Context(), uri)
		if err == nil {
			_, err = f(d)
		}
		if err != nil {
			t.Errorf("%s: %v", what, err)
		}
	}
	sendAll(t, p, n, keys, func(i int) {
		switch i {
		case 1000:
			reshape("split", func(d api.TopicDescription) (api.TopicDescription, error) {
				return admin.Split(t.Context(), uri, activeIDs(d)[0], nil)
			})
		case 2500:
			reshape("split", func(d api.TopicDescription) (api.TopicDescription, error) {
				return admin.Split(t.Context(), uri, activeIDs(d)[1], nil)
			})
		case 4000:
			reshape("merge", func(d api.TopicDescription) (api.TopicDescription, error) {
				ids := activeIDs(d)
				return admin.Merge(t.Context(), uri, ids[0], ids[1])
			})
		case 5000:
			reshape("rebucket", func(d api.TopicDescription) (api.TopicDescription, error) {
				return admin.Rebucket(t.Context(), uri, activeIDs(d)[0], 3)
			})
		}
	})
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatalf("read %d of %d", r.distinct(), n)
	}
	r.check(t, n)
	d, err := admin.DescribeTopic(t.Context(), uri)
	if err != nil {
		t.Fatal(err)
	}
	if d.Epoch != 5 {
		t.Fatalf("epoch %d after four changes, want 5", d.Epoch)
	}
}

func TestIntegrationSharedSubscription(t *testing.T) {
	_, nc := startNode(t)
	const uri = "topic://public/default/shared"
	createTopic(t, nc, uri, 2, 4)
	opts := []client.ConsumerOption{client.WithFetch(50, 1<<20, 50*time.Millisecond)}
	c1, err := client.NewStreamConsumer(nc, uri, "workers", append(opts, client.WithConsumerName("w1"))...)
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close(context.Background())
	c2, err := client.NewStreamConsumer(nc, uri, "workers", append(opts, client.WithConsumerName("w2"))...)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close(context.Background())

	p, err := client.NewProducer(nc, uri)
	if err != nil {
		t.Fatal(err)
	}
	const n, keys = 2000, 100
	sendAll(t, p, n, keys, nil)
	_ = p.Close(t.Context())

	all := newReader()
	per := []*reader{newReader(), newReader()}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var wg sync.WaitGroup
	for i, c := range []*client.StreamConsumer{c1, c2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				m, err := c.Next(ctx)
				if err != nil {
					return
				}
				all.add(m)
				per[i].add(m)
				m.Ack()
			}
		}()
	}
	poll.Until(time.Minute, func() bool { return all.distinct() >= n }) // all.check says what came
	cancel()
	wg.Wait()
	all.check(t, n)
	for i, r := range per {
		if r.distinct() == 0 {
			t.Errorf("consumer w%d read nothing: the subscription was not shared", i+1)
		}
		t.Logf("w%d read %d, holds %d units", i+1, r.distinct(), []*client.StreamConsumer{c1, c2}[i].Assigned())
	}
}

// TestIntegrationConsumerRestart closes a consumer half way and starts a new
// one in the same subscription: it continues after the last ack.
func TestIntegrationConsumerRestart(t *testing.T) {
	_, nc := startNode(t)
	const uri = "topic://public/default/resume"
	createTopic(t, nc, uri, 1, 1)
	p, err := client.NewProducer(nc, uri)
	if err != nil {
		t.Fatal(err)
	}
	const n = 500
	sendAll(t, p, n, 1, nil)
	_ = p.Close(t.Context())

	read := func(c *client.StreamConsumer, count int) []int {
		var seqs []int
		for range count {
			m, err := c.Next(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			seq, _ := strconv.Atoi(string(m.Payload))
			seqs = append(seqs, seq)
			m.Ack()
		}
		return seqs
	}
	c, err := client.NewStreamConsumer(nc, uri, "resume", client.WithConsumerName("one"))
	if err != nil {
		t.Fatal(err)
	}
	first := read(c, 200)
	if err := c.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	c, err = client.NewStreamConsumer(nc, uri, "resume", client.WithConsumerName("two"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	rest := read(c, n-200)
	got := append(first, rest...)
	for i, s := range got {
		if s != i {
			t.Fatalf("read %d at position %d: %v...", s, i, got[max(0, i-3):i+1])
		}
	}
}

func TestIntegrationAdmin(t *testing.T) {
	_, nc := startNode(t)
	a := client.NewAdmin(nc)
	ctx := t.Context()
	wantErr := func(what string, err, want error) {
		t.Helper()
		if !errors.Is(err, want) {
			t.Fatalf("%s: %v, want %v", what, err, want)
		}
	}
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}

	must("create tenant", a.CreateTenant(ctx, "acme"))
	wantErr("tenant twice", a.CreateTenant(ctx, "acme"), api.ErrAlreadyExists)
	wantErr("bad tenant", a.CreateTenant(ctx, "ac.me"), api.ErrInvalidName)
	tenants, err := a.ListTenants(ctx)
	must("list tenants", err)
	if !slices.Contains(tenants, "acme") || !slices.Contains(tenants, "public") {
		t.Fatalf("tenants %v", tenants)
	}

	must("create namespace", a.CreateNamespace(ctx, "acme/orders", nil, 2))
	wantErr("namespace twice", a.CreateNamespace(ctx, "acme/orders", nil, 0), api.ErrAlreadyExists)
	err = a.CreateNamespace(ctx, "nobody/orders", nil, 0)
	if !errors.Is(err, &api.Error{Code: api.CodeTenantNotFound}) {
		t.Fatalf("namespace of unknown tenant: %v", err)
	}
	nss, err := a.ListNamespaces(ctx, "acme")
	must("list namespaces", err)
	if !slices.Equal(nss, []string{"acme/orders"}) {
		t.Fatalf("namespaces %v", nss)
	}

	const uri = "topic://acme/orders/payments"
	d, err := a.CreateTopic(ctx, uri, 2, client.WithTopicBuckets(4))
	must("create topic", err)
	if len(activeIDs(d)) != 2 || d.Epoch != 1 {
		t.Fatalf("created %+v", d)
	}
	_, err = a.CreateTopic(ctx, uri, 2)
	wantErr("topic twice", err, api.ErrAlreadyExists)
	_, err = a.CreateTopic(ctx, "topic://acme/orders/bad name", 1)
	wantErr("bad topic", err, api.ErrInvalidName)
	_, err = a.CreateTopic(ctx, "topic://acme/orders/huge", 1<<20)
	wantErr("too many segments", err, api.ErrInvalidArgument)
	topics, err := a.ListTopics(ctx, "acme/orders")
	must("list topics", err)
	if !slices.Equal(topics, []string{uri}) {
		t.Fatalf("topics %v", topics)
	}

	d, err = a.Split(ctx, uri, 0, nil)
	must("split", err)
	if d.Epoch != 2 || len(activeIDs(d)) != 3 {
		t.Fatalf("after split: epoch %d, active %v", d.Epoch, activeIDs(d))
	}
	_, err = a.Split(ctx, uri, 0, nil)
	wantErr("split sealed", err, api.ErrLayoutRefused)
	_, err = a.Split(ctx, uri, 99, nil)
	if !errors.Is(err, &api.Error{Code: api.CodeSegmentNotFound}) && !errors.Is(err, api.ErrLayoutRefused) {
		t.Fatalf("split unknown segment: %v", err)
	}
	at := uint64(1) << 62 // segment 2 is [0, 2^62-1]: outside
	_, err = a.Split(ctx, uri, 2, &at)
	wantErr("split outside", err, api.ErrInvalidArgument)
	at = 1 << 61
	d, err = a.Split(ctx, uri, 2, &at)
	must("split at", err)
	ids := activeIDs(d)
	d, err = a.Merge(ctx, uri, ids[0], ids[1])
	must("merge", err)
	_, err = a.Merge(ctx, uri, activeIDs(d)[0], activeIDs(d)[0])
	wantErr("merge with itself", err, api.ErrLayoutRefused)
	d, err = a.Rebucket(ctx, uri, activeIDs(d)[0], 3)
	must("rebucket", err)
	if d.Epoch != 5 {
		t.Fatalf("epoch %d after four changes, want 5", d.Epoch)
	}
	described, err := a.DescribeTopic(ctx, uri)
	must("describe", err)
	if described.Epoch != d.Epoch || len(described.Segments) != len(d.Segments) {
		t.Fatalf("describe %+v, want %+v", described, d)
	}

	p, err := client.NewProducer(nc, uri)
	must("producer", err)
	sendAll(t, p, 10, 3, nil)
	_ = p.Close(ctx)
	st, err := a.Stats(ctx, uri)
	must("stats", err)
	if st.Messages != 10 {
		t.Fatalf("stats count %d messages, want 10: %+v", st.Messages, st)
	}

	must("delete", a.DeleteTopic(ctx, uri))
	_, err = a.DescribeTopic(ctx, uri)
	wantErr("describe deleted", err, api.ErrTopicNotFound)
	wantErr("delete twice", a.DeleteTopic(ctx, uri), api.ErrTopicNotFound)
	_, err = a.Stats(ctx, uri)
	wantErr("stats deleted", err, api.ErrTopicNotFound)
	_, err = client.NewProducer(nc, uri)
	wantErr("producer of deleted topic", err, api.ErrTopicNotFound)
	_, err = a.ListTopics(ctx, "acme/none")
	if err == nil || !strings.Contains(err.Error(), "NAMESPACE_NOT_FOUND") {
		t.Fatalf("list topics of unknown namespace: %v", err)
	}
}

// TestIntegrationServerRestart restarts the node under a consumer that has
// read past its durable acks: the server redelivers from its ack cursors,
// the consumer re-joins by itself, drops what it already returned, and the
// application sees every message exactly once.
func TestIntegrationServerRestart(t *testing.T) {
	dir := t.TempDir()
	start := func(listen string) *braidnode.Node {
		node, err := braidnode.Start(context.Background(), braidnode.Config{
			DataDir: dir, NATSListen: listen, MetricsListen: "127.0.0.1:0",
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		})
		if err != nil {
			t.Fatalf("start node: %v", err)
		}
		return node
	}
	node := start("127.0.0.1:-1")
	url := node.ClientURL()
	nc, err := nats.Connect(url, nats.ReconnectWait(20*time.Millisecond), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	const uri = "topic://public/default/restart"
	createTopic(t, nc, uri, 1, 2)
	p, err := client.NewProducer(nc, uri)
	if err != nil {
		t.Fatal(err)
	}
	const n = 300
	sendAll(t, p, n, 5, nil)
	_ = p.Close(t.Context())

	c, err := client.NewStreamConsumer(nc, uri, "sub", client.WithAckInterval(time.Minute),
		client.WithFetch(20, 1<<20, 50*time.Millisecond), client.WithRequestTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	r := newReader()
	consume(t, c, r, 100)
	if err := c.FlushAcks(t.Context()); err != nil {
		t.Fatal(err)
	}
	consume(t, c, r, 200) // acked, not flushed

	if err := node.Close(); err != nil {
		t.Fatal(err)
	}
	node = start(strings.TrimPrefix(url, "nats://"))
	defer node.Close()

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for r.distinct() < n {
		m, err := c.Next(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d: %v", r.distinct(), n, err)
		}
		if err != nil {
			continue // the node is coming back: fetches fail for a moment
		}
		r.add(m)
		m.Ack()
	}
	r.check(t, n)
	a := client.NewAdmin(nc)
	var st api.TopicStats
	if !poll.Until(30*time.Second, func() bool {
		_ = c.FlushAcks(ctx)
		st, err = a.Stats(ctx, uri)
		return err == nil && len(st.Subscriptions) == 1 && st.Subscriptions[0].Backlog == 0
	}) {
		t.Fatalf("backlog never reached 0: %+v, %v", st.Subscriptions, err)
	}
}

// TestIntegrationIdleConsumer: two consumers, one unit: the second is idle.
func TestIntegrationIdleConsumer(t *testing.T) {
	_, nc := startNode(t)
	const uri = "topic://public/default/narrow"
	createTopic(t, nc, uri, 1, 1)
	p, err := client.NewProducer(nc, uri)
	if err != nil {
		t.Fatal(err)
	}
	sendAll(t, p, 1, 1, nil)
	_ = p.Close(t.Context())
	fetch := client.WithFetch(10, 1<<20, 10*time.Millisecond)
	c1, err := client.NewStreamConsumer(nc, uri, "sub", fetch)
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close(context.Background())
	if _, err := c1.Next(t.Context()); err != nil {
		t.Fatal(err)
	}
	c2, err := client.NewStreamConsumer(nc, uri, "sub", fetch)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close(context.Background())
	if !poll.Until(10*time.Second, func() bool {
		if c2.Idle() {
			return true
		}
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		defer cancel()
		if m, err := c2.Next(ctx); err == nil {
			t.Fatalf("second consumer got %v", m.ID)
		}
		return false
	}) {
		t.Fatalf("second consumer not idle: assigned %d", c2.Assigned())
	}
	if c1.Idle() || c1.Assigned() != 1 {
		t.Fatalf("first consumer: idle %v, assigned %d", c1.Idle(), c1.Assigned())
	}
}
