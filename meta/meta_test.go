package meta

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/routing"
	"github.com/braidmq/braid/topology"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func openStore(t *testing.T) *Store {
	t.Helper()
	dir := t.TempDir()
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats not ready")
	}
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		nc.Close()
		ns.Shutdown()
		ns.WaitForShutdown()
	})
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(context.Background(), js, "", 1)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestTopicLifecycleAndCompareAndSwap(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	name, _ := routing.ParseTopic("topic://acme/orders/payments")

	if _, err := s.CreateTopic(ctx, name, TopicRecord{}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("topic in a missing namespace: %v", err)
	}
	if err := s.CreateNamespace(ctx, NamespaceRecord{Tenant: "acme", Namespace: "orders"}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("namespace of a missing tenant: %v", err)
	}
	if err := s.CreateTenant(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateTenant(ctx, "acme"); !errors.Is(err, ErrExists) {
		t.Fatalf("second create: %v", err)
	}
	if err := s.CreateNamespace(ctx, NamespaceRecord{Tenant: "acme", Namespace: "orders", TopicBuckets: 8}); err != nil {
		t.Fatal(err)
	}
	layout, _ := topology.New(2, 4)
	rev, err := s.CreateTopic(ctx, name, TopicRecord{Layout: layout})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateTopic(ctx, name, TopicRecord{Layout: layout}); !errors.Is(err, ErrExists) {
		t.Fatalf("duplicate topic: %v", err)
	}
	rec, gotRev, err := s.Topic(ctx, name)
	if err != nil || gotRev != rev || rec.Layout.Epoch != 1 || rec.Topic != name.String() {
		t.Fatalf("read back %+v rev %d (want %d): %v", rec, gotRev, rev, err)
	}

	// Two controllers read the same revision; only the first write wins.
	next, _ := rec.Layout.Split(0, nil)
	rec.Layout = next
	rev2, err := s.UpdateTopic(ctx, name, rec, rev)
	if err != nil {
		t.Fatal(err)
	}
	stale := rec
	stale.Layout, _ = layout.Split(1, nil)
	if _, err := s.UpdateTopic(ctx, name, stale, rev); !errors.Is(err, ErrConflict) {
		t.Fatalf("stale update: got %v, want ErrConflict", err)
	}
	rec, gotRev, _ = s.Topic(ctx, name)
	if gotRev != rev2 || rec.Layout.Epoch != 2 {
		t.Fatalf("stale write leaked: epoch %d rev %d", rec.Layout.Epoch, gotRev)
	}

	other, _ := routing.ParseTopic("topic://acme/orders/refunds")
	if _, err := s.CreateTopic(ctx, other, TopicRecord{Layout: layout}); err != nil {
		t.Fatal(err)
	}
	if err := s.RegisterSubscription(ctx, name, "audit", "stream"); err != nil {
		t.Fatal(err)
	}
	if err := s.RegisterSubscription(ctx, name, "audit", "stream"); err != nil {
		t.Fatalf("re-register must be a no-op: %v", err)
	}
	topics, err := s.Topics(ctx, name.NamespaceName())
	if err != nil || len(topics) != 2 || topics[0] != "topic://acme/orders/payments" || topics[1] != "topic://acme/orders/refunds" {
		t.Fatalf("topics: %v %v", topics, err)
	}
	all, _ := s.AllTopics(ctx)
	if len(all) != 2 {
		t.Fatalf("all topics: %v", all)
	}
	if err := s.DeleteTopic(ctx, name); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Topic(ctx, name); !errors.Is(err, ErrNotFound) {
		t.Fatalf("deleted topic still readable: %v", err)
	}
	if subs, _ := s.Subscriptions(ctx, name); len(subs) != 0 {
		t.Fatalf("subscriptions survived the topic: %v", subs)
	}
	// A deleted topic can be created again.
	if _, err := s.CreateTopic(ctx, name, TopicRecord{Layout: layout}); err != nil {
		t.Fatalf("recreate: %v", err)
	}
	tenants, _ := s.Tenants(ctx)
	nss, _ := s.Namespaces(ctx, "acme")
	if len(tenants) != 1 || len(nss) != 1 || nss[0] != "orders" {
		t.Fatalf("tenants %v namespaces %v", tenants, nss)
	}
}

func TestNamespaceCompareAndSwapAndEpochTimes(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	if err := s.CreateTenant(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateNamespace(ctx, NamespaceRecord{Tenant: "acme", Namespace: "orders"}); err != nil {
		t.Fatal(err)
	}
	ns := routing.NamespaceName{Tenant: "acme", Namespace: "orders"}
	rec, rev, err := s.NamespaceRevision(ctx, ns)
	if err != nil {
		t.Fatal(err)
	}
	auto := false
	rec.Policies = &api.Policies{AutoScale: &auto}
	next, err := s.UpdateNamespace(ctx, rec, rev)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.UpdateNamespace(ctx, rec, rev); !errors.Is(err, ErrConflict) {
		t.Fatalf("stale namespace update: %v, want ErrConflict", err)
	}
	got, gotRev, err := s.NamespaceRevision(ctx, ns)
	if err != nil || gotRev != next || got.Policies == nil || *got.Policies.AutoScale {
		t.Fatalf("namespace after update: %+v rev %d (want %d), %v", got, gotRev, next, err)
	}

	name, _ := routing.ParseTopic("topic://acme/orders/payments")
	l, _ := topology.New(1, 4)
	if _, err := s.CreateTopic(ctx, name, TopicRecord{Layout: l, EpochTimes: map[uint64]int64{1: 1234}}); err != nil {
		t.Fatal(err)
	}
	tr, _, err := s.Topic(ctx, name)
	if err != nil || tr.EpochTimes[1] != 1234 {
		t.Fatalf("epoch times after a round trip: %v, %v", tr.EpochTimes, err)
	}
}

// TestReadsOfAStoreThatStopsAnsweringFail: with the server gone, a read,
// a write and a listing each fail within the store's timeout, saying so,
// instead of waiting for ever.
func TestReadsOfAStoreThatStopsAnsweringFail(t *testing.T) {
	opTimeout = 300 * time.Millisecond
	defer func() { opTimeout = OpTimeout }()
	dir := t.TempDir()
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats not ready")
	}
	nc, err := nats.Connect(ns.ClientURL(), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	s, err := Open(context.Background(), js, "", 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CreateTenant(context.Background(), "t"); err != nil {
		t.Fatal(err)
	}
	ns.Shutdown()
	ns.WaitForShutdown()
	for name, op := range map[string]func() error{
		"read":    func() error { _, err := s.Tenant(context.Background(), "t"); return err },
		"write":   func() error { return s.CreateTenant(context.Background(), "u") },
		"listing": func() error { _, err := s.Tenants(context.Background()); return err },
	} {
		if err := returned(t, name, op); err == nil {
			t.Fatalf("%s of a store that is gone: %v", name, err)
		}
	}
}

// returned runs op and returns its error, failing t if op has not returned
// within 5s: a call to a store that is gone fails, it does not hang. The
// event checked is the return; the 5s only bound the wait for it.
func returned(t *testing.T, what string, op func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- op() }()
	select {
	case err := <-done:
		return err
	case <-time.After(5 * time.Second):
		t.Fatalf("%s of a store that is gone: no answer within 5s", what)
		return nil
	}
}

// TestACutListingIsAnError lists a namespace of thousands of topics with
// deadlines short enough to end the listing part way: the listing is then
// an error (ErrTimeout), never a part of the keys passed off as all of
// them.
func TestACutListingIsAnError(t *testing.T) {
	s := openStore(t)
	ns := listNamespace(t, s, "cut", 1)
	names := make([]string, 3000)
	for i := range names {
		names[i] = fmt.Sprintf("t%05d", i)
	}
	createTopics(t, s, ns, names)
	cut := 0
	for _, d := range []time.Duration{time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond} {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		got, err := s.Topics(ctx, ns)
		cancel()
		switch {
		case err != nil:
			cut++
		case len(got) != len(names):
			t.Fatalf("a listing within %s returned %d of the %d topics and no error", d, len(got), len(names))
		}
	}
	t.Logf("%d of 5 listings cut by their deadline", cut)
}
