package meta

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/braidmq/braid/routing"
	"github.com/braidmq/braid/topology"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// openStoppable is openStore for tests and benchmarks, with a stop that
// shuts the server down (the store then stops answering).
func openStoppable(tb testing.TB) (*Store, func()) {
	tb.Helper()
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: tb.TempDir(), NoSigs: true, NoLog: true})
	if err != nil {
		tb.Fatal(err)
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		tb.Fatal("nats not ready")
	}
	nc, err := nats.Connect(srv.ClientURL(), nats.MaxReconnects(-1))
	if err != nil {
		tb.Fatal(err)
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			srv.Shutdown()
			srv.WaitForShutdown()
		})
	}
	tb.Cleanup(func() {
		nc.Close()
		stop()
	})
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatal(err)
	}
	s, err := Open(context.Background(), js, "", 1)
	if err != nil {
		tb.Fatal(err)
	}
	return s, stop
}

// listNamespace creates tenant acme and namespace acme/<ns> with buckets
// topic buckets.
func listNamespace(t testing.TB, s *Store, ns string, buckets int) routing.NamespaceName {
	t.Helper()
	ctx := context.Background()
	if err := s.CreateTenant(ctx, "acme"); err != nil && !errors.Is(err, ErrExists) {
		t.Fatal(err)
	}
	if err := s.CreateNamespace(ctx, NamespaceRecord{Tenant: "acme", Namespace: ns, TopicBuckets: buckets}); err != nil {
		t.Fatal(err)
	}
	return routing.NamespaceName{Tenant: "acme", Namespace: ns}
}

func topicIn(ns routing.NamespaceName, name string) routing.TopicName {
	return routing.TopicName{Scheme: routing.SchemeScalable, Tenant: ns.Tenant, Namespace: ns.Namespace, Name: name}
}

// createTopics creates the topics names of ns, eight at a time.
func createTopics(t testing.TB, s *Store, ns routing.NamespaceName, names []string) {
	t.Helper()
	l, _ := topology.New(1, 1)
	var wg sync.WaitGroup
	errs := make([]error, len(names))
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < len(names); i += 8 {
				_, errs[i] = s.CreateTopic(context.Background(), topicIn(ns, names[i]), TopicRecord{Layout: l})
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("create %s: %v", names[i], err)
		}
	}
}

// pageAll pages through ns limit topics at a time from cursor and returns
// every URI in order, checking each page's size.
func pageAll(t *testing.T, s *Store, ns routing.NamespaceName, cursor string, limit int) []string {
	t.Helper()
	var all []string
	for pages := 0; ; pages++ {
		if pages > 100000 {
			t.Fatal("paging does not end")
		}
		uris, next, err := s.TopicsPage(context.Background(), ns, cursor, limit)
		if err != nil {
			t.Fatalf("page after %q: %v", cursor, err)
		}
		if len(uris) > limit {
			t.Fatalf("page of %d topics, limit %d", len(uris), limit)
		}
		if next != "" && len(uris) != limit {
			t.Fatalf("a page of %d (limit %d) with a next page %q", len(uris), limit, next)
		}
		all = append(all, uris...)
		if next == "" {
			return all
		}
		cursor = next
	}
}

func wantCount(t *testing.T, s *Store, ns routing.NamespaceName, want int64) {
	t.Helper()
	got, err := s.TopicCount(context.Background(), ns)
	if err != nil || got != want {
		t.Fatalf("topic count of %s: %d, %v; want %d", ns, got, err, want)
	}
}

// TestTopicsPagePagesThroughEveryTopicInOrder: 2,500 topics spread over 8
// topic buckets, paged 1000, 500 (an exact multiple), 2500, 2501 and 10000
// at a time, and 7 at a time from a cursor in the middle, come back
// sorted, each once, the same as the full listing.
func TestTopicsPagePagesThroughEveryTopicInOrder(t *testing.T) {
	s := openStore(t)
	ns := listNamespace(t, s, "many", 8)
	other := listNamespace(t, s, "other", 1)
	rng := rand.New(rand.NewPCG(1, 2))
	names := make([]string, 2500)
	for i, j := range rng.Perm(len(names)) {
		names[i] = fmt.Sprintf("t-%x-%d", rng.Uint32(), j)
	}
	createTopics(t, s, ns, names)
	createTopics(t, s, other, []string{"a", "t-0", "zz"}) // never listed with ns
	want, err := s.Topics(context.Background(), ns)
	if err != nil || len(want) != len(names) {
		t.Fatalf("full listing: %d topics, %v", len(want), err)
	}
	if !sort.StringsAreSorted(want) {
		t.Fatal("full listing not sorted")
	}
	for _, limit := range []int{1000, 500, 2500, 2501, 10000} {
		got := pageAll(t, s, ns, "", limit)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("limit %d: %d topics, not the %d of the listing in order", limit, len(got), len(want))
		}
	}
	// Small pages from the middle on (every page reads every key: paging
	// all 2,500 seven at a time takes 40 s under the race detector).
	from := want[2200]
	got := pageAll(t, s, ns, from[strings.LastIndexByte(from, '/')+1:], 7)
	if fmt.Sprint(got) != fmt.Sprint(want[2201:]) {
		t.Fatalf("limit 7 after %s: %d topics, not the last %d of the listing in order", from, len(got), len(want)-2201)
	}
	// The first page of 1000 and where it says to go on.
	page, next, err := s.TopicsPage(context.Background(), ns, "", 1000)
	if err != nil || len(page) != 1000 || fmt.Sprint(page) != fmt.Sprint(want[:1000]) || next == "" {
		t.Fatalf("first page: %d topics, next %q, %v", len(page), next, err)
	}
	wantCount(t, s, ns, 2500)
	wantCount(t, s, other, 3)
}

// TestTopicsPageCursors: a cursor in the middle (a name that exists, one
// that does not, before all and after all), the last page, an empty
// namespace, and cursors and limits that are refused.
func TestTopicsPageCursors(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	ns := listNamespace(t, s, "orders", 4)
	empty := listNamespace(t, s, "empty", 4)
	createTopics(t, s, ns, []string{"b", "d", "f", "h", "j"})
	uri := func(names ...string) string {
		out := make([]string, len(names))
		for i, n := range names {
			out[i] = topicIn(ns, n).String()
		}
		return fmt.Sprint(out)
	}
	for _, c := range []struct {
		cursor string
		limit  int
		want   string
		next   string
	}{
		{"", 2, uri("b", "d"), "d"},
		{"d", 2, uri("f", "h"), "h"},
		{"h", 2, uri("j"), ""},
		{"e", 2, uri("f", "h"), "h"}, // not a topic: after it all the same
		{"a", 10, uri("b", "d", "f", "h", "j"), ""},
		{"A", 1, uri("b"), "b"},     // before every name, in byte order
		{"j", 5, uri(), ""},         // after the last
		{"zzz", 5, uri(), ""},       // after every name
		{"f", 2, uri("h", "j"), ""}, // an exact last page has no next
		{"", 5, uri("b", "d", "f", "h", "j"), ""},
	} {
		got, next, err := s.TopicsPage(ctx, ns, c.cursor, c.limit)
		if err != nil || fmt.Sprint(got) != c.want || next != c.next {
			t.Errorf("page after %q, limit %d: %v next %q, %v; want %v next %q", c.cursor, c.limit, got, next, err, c.want, c.next)
		}
	}
	got, next, err := s.TopicsPage(ctx, empty, "", 1000)
	if err != nil || len(got) != 0 || got == nil || next != "" {
		t.Fatalf("empty namespace: %#v next %q, %v", got, next, err)
	}
	wantCount(t, s, empty, 0)
	if _, _, err := s.TopicsPage(ctx, routing.NamespaceName{Tenant: "acme", Namespace: "nope"}, "", 10); !errors.Is(err, ErrNotFound) {
		t.Fatalf("namespace without a record: %v, want ErrNotFound", err)
	}
	for _, bad := range []struct {
		cursor string
		limit  int
	}{{"", 0}, {"", -1}, {"a.b", 10}, {"a b", 10}, {"*", 10}, {">", 10}, {string(make([]byte, 1000)), 10}} {
		if _, _, err := s.TopicsPage(ctx, ns, bad.cursor, bad.limit); !errors.Is(err, ErrBadPage) {
			t.Errorf("cursor %q limit %d: %v, want ErrBadPage", bad.cursor, bad.limit, err)
		}
	}
}

// TestTopicsPageListsEveryBucketGrouping: namespaces of one bucket, of
// fewer buckets than listings, of more (several buckets a listing) and of
// more than the listings take (one listing) all page in order; and the
// filters of a page name every bucket once.
func TestTopicsPageListsEveryBucketGrouping(t *testing.T) {
	for _, buckets := range []int{1, 3, 16, 17, 40, 4096, 4097, 65536} {
		seen := map[string]int{}
		groups := pageFilters(routing.NamespaceName{Tenant: "t", Namespace: "n"}, buckets)
		if len(groups) > pageListings {
			t.Fatalf("%d buckets: %d listings", buckets, len(groups))
		}
		for _, g := range groups {
			if len(g) > pageFiltersPerListing {
				t.Fatalf("%d buckets: a listing of %d filters", buckets, len(g))
			}
			for _, f := range g {
				seen[f]++
			}
		}
		if len(seen) == 1 && seen["topic.t.n.*.*"] == 1 {
			if buckets > 1 && buckets <= pageListings*pageFiltersPerListing {
				t.Fatalf("%d buckets listed in one", buckets)
			}
			continue
		}
		for b := range buckets {
			if f := fmt.Sprintf("topic.t.n.%d.*", b); seen[f] != 1 {
				t.Fatalf("%d buckets: %s in %d listings", buckets, f, seen[f])
			}
		}
		if len(seen) != buckets {
			t.Fatalf("%d buckets: %d filters", buckets, len(seen))
		}
	}

	s := openStore(t)
	names := make([]string, 300)
	for i := range names {
		names[i] = fmt.Sprintf("n%03d", (i*37)%300)
	}
	for _, buckets := range []int{1, 5, 40, 5000} {
		ns := listNamespace(t, s, "b"+strconv.Itoa(buckets), buckets)
		createTopics(t, s, ns, names)
		want, _ := s.Topics(context.Background(), ns)
		for _, limit := range []int{64, 300} {
			if got := pageAll(t, s, ns, "", limit); fmt.Sprint(got) != fmt.Sprint(want) || len(got) != 300 {
				t.Fatalf("%d buckets, limit %d: %d topics, not the listing in order", buckets, limit, len(got))
			}
		}
		wantCount(t, s, ns, 300)
	}
}

// TestTopicCountFollowsCreatesAndDeletes: the count goes up with creates
// and down with deletes, and not with a create of a topic that exists, a
// second delete or the delete of a topic that never was; a record that
// does not decode (a quarantined topic) is deleted and uncounted too.
func TestTopicCountFollowsCreatesAndDeletes(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	ns := listNamespace(t, s, "orders", 3)
	wantCount(t, s, ns, 0)
	names := make([]string, 40)
	for i := range names {
		names[i] = "t" + strconv.Itoa(i)
	}
	createTopics(t, s, ns, names)
	wantCount(t, s, ns, 40)
	l, _ := topology.New(1, 1)
	if _, err := s.CreateTopic(ctx, topicIn(ns, "t0"), TopicRecord{Layout: l}); !errors.Is(err, ErrExists) {
		t.Fatalf("second create: %v", err)
	}
	wantCount(t, s, ns, 40)
	for _, name := range names[:10] {
		if err := s.DeleteTopic(ctx, topicIn(ns, name)); err != nil {
			t.Fatal(err)
		}
	}
	wantCount(t, s, ns, 30)
	if err := s.DeleteTopic(ctx, topicIn(ns, "t0")); err != nil {
		t.Fatalf("second delete: %v", err)
	}
	if err := s.DeleteTopic(ctx, topicIn(ns, "never")); err != nil {
		t.Fatalf("delete of a topic that never was: %v", err)
	}
	wantCount(t, s, ns, 30)
	createTopics(t, s, ns, names[:5]) // created again
	wantCount(t, s, ns, 35)

	// A record that does not decode.
	bad := topicIn(ns, "t20")
	if _, err := s.kv.Put(ctx, topicKey(bad, 3), []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Topic(ctx, bad); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("read of the bad record: %v", err)
	}
	if err := s.DeleteTopic(ctx, bad); err != nil {
		t.Fatalf("delete of the bad record: %v", err)
	}
	wantCount(t, s, ns, 34)
	uris, _, err := s.TopicsPage(ctx, ns, "", 1000)
	if err != nil || len(uris) != 34 {
		t.Fatalf("listing after the deletes: %d topics, %v", len(uris), err)
	}
}

// TestTopicCountIsExactUnderConcurrency: many creates at once in a
// namespace of one topic bucket (so every count shard is contended), then
// deletes at once, several of each topic: the count is exact.
func TestTopicCountIsExactUnderConcurrency(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	ns := listNamespace(t, s, "busy", 1)
	const workers, each = 32, 12
	l, _ := topology.New(1, 1)
	var wg sync.WaitGroup
	errs := make(chan error, workers*each*3)
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				// Every topic is created by two workers: one of them wins.
				name := fmt.Sprintf("w%d-%d", (w/2)*2, i)
				if _, err := s.CreateTopic(ctx, topicIn(ns, name), TopicRecord{Layout: l}); err != nil && !errors.Is(err, ErrExists) {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	wantCount(t, s, ns, workers/2*each)

	// A layout update racing each delete does not keep the topic alive.
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				name := topicIn(ns, fmt.Sprintf("w%d-%d", (w/2)*2, i))
				if w%2 == 0 {
					if rec, rev, err := s.Topic(ctx, name); err == nil {
						if _, err := s.UpdateTopic(ctx, name, rec, rev); err != nil && !errors.Is(err, ErrConflict) && !errors.Is(err, ErrNotFound) {
							errs <- err
						}
					}
				}
				if i%3 == 0 {
					continue // kept
				}
				if err := s.DeleteTopic(ctx, name); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	kept := int64(workers / 2 * ((each + 2) / 3))
	wantCount(t, s, ns, kept)
	uris, _, err := s.TopicsPage(ctx, ns, "", 10000)
	if err != nil || int64(len(uris)) != kept {
		t.Fatalf("listing: %d topics, %v; want %d", len(uris), err, kept)
	}
}

// TestTopicsPageOfAStoreThatStopsAnsweringFails: with the server gone, a
// page and a count fail within the store's timeout instead of hanging.
func TestTopicsPageOfAStoreThatStopsAnsweringFails(t *testing.T) {
	s, stop := openStoppable(t)
	ns := listNamespace(t, s, "orders", 2)
	createTopics(t, s, ns, []string{"a", "b"})
	opTimeout = 300 * time.Millisecond
	defer func() { opTimeout = OpTimeout }()
	stop()
	for name, op := range map[string]func() error{
		"page":  func() error { _, _, err := s.TopicsPage(context.Background(), ns, "", 10); return err },
		"count": func() error { _, err := s.TopicCount(context.Background(), ns); return err },
	} {
		start := time.Now()
		err := op()
		if err == nil || time.Since(start) > 5*time.Second {
			t.Fatalf("%s of a store that is gone: %v after %s", name, err, time.Since(start))
		}
	}
}

// BenchmarkTopicsPage measures one page of 1000 (and one count) in a
// namespace of BRAID_BENCH_TOPICS topics (default 20000) over 16 topic
// buckets. The keys (and the count) are written straight to the bucket, in
// parallel.
func BenchmarkTopicsPage(b *testing.B) {
	n := 20000
	if v, err := strconv.Atoi(os.Getenv("BRAID_BENCH_TOPICS")); err == nil && v > 0 {
		n = v
	}
	s, _ := openStoppable(b)
	ns := listNamespace(b, s, "bench", 16)
	var wg sync.WaitGroup
	const writers = 64
	for w := range writers {
		wg.Go(func() {
			for i := w; i < n; i += writers {
				name := topicIn(ns, fmt.Sprintf("topic-%08d", i))
				if _, err := s.kv.Put(context.Background(), topicKey(name, 16), []byte("{}")); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if _, err := s.kv.Put(context.Background(), countKey(ns, 0), []byte(`{"count":`+strconv.Itoa(n)+`}`)); err != nil {
		b.Fatal(err)
	}
	cursor := fmt.Sprintf("topic-%08d", n/2)
	// The deadline of an admin request, not the store's own OpTimeout.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b.Run("page", func(b *testing.B) {
		for b.Loop() {
			uris, _, err := s.TopicsPage(ctx, ns, cursor, 1000)
			if err != nil || len(uris) != min(1000, n-n/2-1) {
				b.Fatalf("%d topics, %v", len(uris), err)
			}
		}
	})
	b.Run("count", func(b *testing.B) {
		for b.Loop() {
			c, err := s.TopicCount(context.Background(), ns)
			if err != nil || c != int64(n) {
				b.Fatalf("count %d, %v", c, err)
			}
		}
	})
}
