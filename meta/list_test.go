package meta

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
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

// pageOrder is the URIs of names of ns in page order: by topic bucket of
// a namespace of buckets buckets, then by name.
func pageOrder(ns routing.NamespaceName, buckets int, names []string) []string {
	ps := make([]position, len(names))
	for i, n := range names {
		ps[i] = position{routing.TopicBucket(topicIn(ns, n), buckets), n}
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].less(ps[j]) })
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = topicIn(ns, p.name).String()
	}
	return out
}

// cursorOf is the cursor of the page after topic name of ns.
func cursorOf(ns routing.NamespaceName, buckets int, name string) string {
	return encodeCursor(position{routing.TopicBucket(topicIn(ns, name), buckets), name})
}

// pageAll pages through ns (of buckets topic buckets) limit topics at a
// time from cursor and returns every URI in order and the pages taken,
// checking each page: at most limit topics, exactly limit when a next
// page follows, in page order; and that paging ends.
func pageAll(t *testing.T, s *Store, ns routing.NamespaceName, buckets int, cursor string, limit int) (all []string, pages int) {
	t.Helper()
	for ; ; pages++ {
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
		var names []string
		for _, u := range uris {
			names = append(names, u[strings.LastIndexByte(u, '/')+1:])
		}
		if got := fmt.Sprint(uris); got != fmt.Sprint(pageOrder(ns, buckets, names)) {
			t.Fatalf("page after %q not by bucket then name: %s", cursor, got)
		}
		if next != "" && next != cursorOf(ns, buckets, names[len(names)-1]) {
			t.Fatalf("page after %q: next %q, not its last topic's cursor", cursor, next)
		}
		all = append(all, uris...)
		if next == "" {
			return all, pages + 1
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

// randomNames is n distinct topic names in a random order.
func randomNames(n int, seed uint64) []string {
	rng := rand.New(rand.NewPCG(seed, 2))
	names := make([]string, n)
	for i, j := range rng.Perm(n) {
		names[i] = fmt.Sprintf("t-%x-%d", rng.Uint32(), j)
	}
	return names
}

// TestTopicsPagePagesThroughEveryTopicOnce: namespaces of 1, 3 and 64
// topic buckets, paged at several limits (1, exact multiples, the whole,
// more than the whole, odd sizes), and from a cursor near the end, list
// every topic once, the same set as the full listing, in page order: the
// buckets in turn, each bucket's names sorted.
func TestTopicsPagePagesThroughEveryTopicOnce(t *testing.T) {
	s := openStore(t)
	other := listNamespace(t, s, "other", 1)
	createTopics(t, s, other, []string{"a", "t-0", "zz"}) // never listed with the others
	for _, c := range []struct {
		buckets, topics int
		limits          []int
	}{
		{1, 120, []int{7, 40, 120, 121}},
		{3, 90, []int{1, 5, 30, 31, 90, 10000}},
		{64, 1200, []int{97, 300, 600, 1200, 1201}},
	} {
		ns := listNamespace(t, s, "b"+strconv.Itoa(c.buckets), c.buckets)
		names := randomNames(c.topics, uint64(c.buckets))
		createTopics(t, s, ns, names)
		full, err := s.Topics(context.Background(), ns)
		if err != nil || len(full) != c.topics {
			t.Fatalf("%d buckets: full listing of %d topics, %v", c.buckets, len(full), err)
		}
		want := pageOrder(ns, c.buckets, names)
		for _, limit := range c.limits {
			got, pages := pageAll(t, s, ns, c.buckets, "", limit)
			if strings.Join(got, " ") != strings.Join(want, " ") {
				t.Fatalf("%d buckets, limit %d: %d topics, not the %d in page order", c.buckets, limit, len(got), len(want))
			}
			sorted := slices.Clone(got)
			sort.Strings(sorted)
			if !slices.Equal(sorted, full) {
				t.Fatalf("%d buckets, limit %d: not the topics of the full listing", c.buckets, limit)
			}
			if wantPages := max(1, (c.topics+limit-1)/limit); pages != wantPages {
				t.Fatalf("%d buckets, limit %d: %d pages, want %d", c.buckets, limit, pages, wantPages)
			}
		}
		// Small pages from near the end on.
		from := want[len(want)-40]
		got, _ := pageAll(t, s, ns, c.buckets, cursorOf(ns, c.buckets, from[strings.LastIndexByte(from, '/')+1:]), 7)
		if strings.Join(got, " ") != strings.Join(want[len(want)-39:], " ") {
			t.Fatalf("%d buckets, limit 7 after %s: %d topics, not the last 39 in page order", c.buckets, from, len(got))
		}
		wantCount(t, s, ns, int64(c.topics))
	}
	wantCount(t, s, other, 3)
}

// TestTopicsPageCursors: cursors in the middle of a bucket, at the end of
// one, in an empty bucket, in the last bucket and after the last topic,
// of names that are not topics; pages that fill exactly at the end of a
// bucket (a next page only if a topic follows); an empty namespace; and
// cursors and limits that are refused.
func TestTopicsPageCursors(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	const buckets = 4
	ns := listNamespace(t, s, "orders", buckets)
	empty := listNamespace(t, s, "empty", buckets)
	// Three topics in each of buckets 0, 1 and 3; bucket 2 empty.
	in := map[int][]string{}
	for i := 0; len(in[0]) < 3 || len(in[1]) < 3 || len(in[3]) < 3; i++ {
		n := "t" + strconv.Itoa(i)
		if b := routing.TopicBucket(topicIn(ns, n), buckets); b != 2 && len(in[b]) < 3 {
			in[b] = append(in[b], n)
		}
	}
	var names []string
	for _, b := range []int{0, 1, 3} {
		sort.Strings(in[b])
		names = append(names, in[b]...)
	}
	createTopics(t, s, ns, names)
	// names is in page order: in[0], in[1], in[3].
	uri := func(names ...string) string {
		out := make([]string, len(names))
		for i, n := range names {
			out[i] = topicIn(ns, n).String()
		}
		return fmt.Sprint(out)
	}
	cur := func(n string) string { return cursorOf(ns, buckets, n) }
	for _, c := range []struct {
		cursor string
		limit  int
		want   string
		next   string
	}{
		{"", 2, uri(names[0], names[1]), cur(names[1])},
		{"", 3, uri(names[:3]...), cur(names[2])},                            // exactly bucket 0, more follow
		{cur(names[0]), 1, uri(names[1]), cur(names[1])},                     // middle of a bucket
		{cur(names[1]), 3, uri(names[2], names[3], names[4]), cur(names[4])}, // across buckets
		{cur(names[2]), 2, uri(names[3], names[4]), cur(names[4])},           // end of bucket 0
		{cur(names[3]), 2, uri(names[4], names[5]), cur(names[5])},           // fills at the end of bucket 1
		{cur(names[5]), 2, uri(names[6], names[7]), cur(names[7])},           // end of bucket 1, over empty bucket 2
		{"2.a", 5, uri(names[6:]...), ""},                                    // in the empty bucket
		{cur(names[6]), 2, uri(names[7], names[8]), ""},                      // an exact last page has no next
		{cur(names[6]), 5, uri(names[7], names[8]), ""},                      // in the last bucket
		{cur(names[8]), 5, uri(), ""},                                        // after the last
		{"3.zzz", 5, uri(), ""},                                              // after every name
		{"0.A", 1, uri(names[0]), cur(names[0])},                             // before every name, in byte order
		{"0.zzz", 1, uri(names[3]), cur(names[3])},                           // not a topic: after it all the same
		{"1.zzz", 4, uri(names[6:]...), ""},
		{"", 9, uri(names...), ""},
		{"", 10, uri(names...), ""},
	} {
		got, next, err := s.TopicsPage(ctx, ns, c.cursor, c.limit)
		if err != nil || fmt.Sprint(got) != c.want || next != c.next {
			t.Errorf("page after %q, limit %d: %v next %q, %v; want %v next %q", c.cursor, c.limit, got, next, err, c.want, c.next)
		}
	}

	// A namespace whose topics are all in its first buckets: the page
	// that ends with the last of them has no next page.
	early := listNamespace(t, s, "early", buckets)
	first := names[:6] // buckets 0 and 1 of ns, and so of early
	createTopics(t, s, early, first)
	if got, next, err := s.TopicsPage(ctx, early, cursorOf(early, buckets, first[2]), 3); err != nil || len(got) != 3 || next != "" {
		t.Errorf("last page before empty buckets: %v next %q, %v", got, next, err)
	}

	for _, cursor := range []string{"", "3.a"} {
		got, next, err := s.TopicsPage(ctx, empty, cursor, 1000)
		if err != nil || len(got) != 0 || got == nil || next != "" {
			t.Fatalf("empty namespace after %q: %#v next %q, %v", cursor, got, next, err)
		}
	}
	wantCount(t, s, empty, 0)
	if _, _, err := s.TopicsPage(ctx, routing.NamespaceName{Tenant: "acme", Namespace: "nope"}, "", 10); !errors.Is(err, ErrNotFound) {
		t.Fatalf("namespace without a record: %v, want ErrNotFound", err)
	}
	for _, bad := range []struct {
		cursor string
		limit  int
	}{
		{"", 0}, {"", -1}, {"0.a", 0},
		{"a", 10}, {"0", 10}, {"t1", 10}, {"a.b", 10}, {".a", 10}, {"0.", 10},
		{"4.a", 10}, {"5.a", 10}, {"1048576.a", 10}, {"99999999999999999999.a", 10},
		{"-1.a", 10}, {"+1.a", 10}, {"01.a", 10}, {" 1.a", 10}, {"1 .a", 10},
		{"1.a.b", 10}, {"1.a b", 10}, {"1.*", 10}, {"1.>", 10}, {"*.a", 10}, {">", 10},
		{"1." + strings.Repeat("x", 1000), 10}, {"1.\x00", 10}, {string(make([]byte, 1000)), 10},
	} {
		if _, _, err := s.TopicsPage(ctx, ns, bad.cursor, bad.limit); !errors.Is(err, ErrBadPage) {
			t.Errorf("cursor %q limit %d: %v, want ErrBadPage", bad.cursor, bad.limit, err)
		}
	}
	if _, _, err := s.TopicsPage(ctx, listNamespace(t, s, "one", 1), "1.a", 10); !errors.Is(err, ErrBadPage) {
		t.Errorf("bucket 1 of a namespace of one: %v, want ErrBadPage", err)
	}
}

// TestTopicsPageListsWholeWhenCheaper: a page goes on bucket by bucket
// while the buckets are full enough for the listings left to cost less
// than one of the whole namespace, and lists the whole namespace in a
// small or sparse one, or in a large store that makes every listing dear.
func TestTopicsPageListsWholeWhenCheaper(t *testing.T) {
	for _, c := range []struct {
		what                                     string
		need, rest, buckets, listed, seen, store int
		whole                                    bool
	}{
		{"20,000 topics over 64, the store theirs", 700, 63, 64, 1, 312, 20000, false},
		{"one more topic wanted", 1, 63, 64, 1, 312, 20000, false},
		{"the last bucket left", 1001, 1, 64, 63, 63 * 312, 20000, false},
		{"1,000,000 over 64", 1001, 63, 64, 1, 15625, 1000000, false},
		{"20,000 over 64 in a store of 1,000,000", 700, 63, 64, 1, 312, 1000000, true},
		{"2,000 over 64 in a store of 80,000", 970, 63, 64, 1, 31, 80000, true},
		{"2,000 over 64, the store theirs", 970, 63, 64, 1, 31, 2000, true},
		{"2,000 over 64, a page of 10", 11, 63, 64, 1, 31, 2000, false},
		{"an empty bucket of 65,536", 1001, 65535, 65536, 1, 0, 1000, true},
		{"a topic a bucket of 65,536", 1001, 65535, 65536, 1, 1, 65536, true},
		{"an empty bucket of 2", 1001, 1, 2, 1, 0, 1000, false},
	} {
		if got := listWhole(c.need, c.rest, c.buckets, c.listed, c.seen, c.store); got != c.whole {
			t.Errorf("%s: list the whole namespace %v, want %v", c.what, got, c.whole)
		}
	}
}

// TestTopicsPageOfManyBuckets: namespaces of thousands of topic buckets,
// empty, sparse and of about a topic a bucket, page in order in a few
// listings a page: the cursor's bucket, maybe a few more (empty ones cost
// no scan), then the whole namespace.
func TestTopicsPageOfManyBuckets(t *testing.T) {
	s := openStore(t)
	var listings, pages int
	pageStats = func(l, _ int) { listings += l; pages++ }
	defer func() { pageStats = nil }()
	for _, c := range []struct{ buckets, topics int }{{65536, 50}, {5000, 0}, {1000, 400}} {
		ns := listNamespace(t, s, "many"+strconv.Itoa(c.buckets), c.buckets)
		names := randomNames(c.topics, 7)
		createTopics(t, s, ns, names)
		want := pageOrder(ns, c.buckets, names)
		for _, limit := range []int{9, 1000} {
			listings, pages = 0, 0
			got, _ := pageAll(t, s, ns, c.buckets, "", limit)
			if strings.Join(got, " ") != strings.Join(want, " ") {
				t.Fatalf("%d buckets, limit %d: %d topics, not the %d in page order", c.buckets, limit, len(got), len(want))
			}
			if listings > 5*pages {
				t.Errorf("%d buckets, limit %d: %d listings for %d pages", c.buckets, limit, listings, pages)
			}
		}
	}
}

// TestTopicsPageCost logs one page's cost (time, listings, keys sent) in
// a namespace of 8,000 topics over 64 topic buckets against one of one
// bucket, and checks that the pages of 64 buckets read a few buckets'
// keys, not all. The keys are written straight to the store.
func TestTopicsPageCost(t *testing.T) {
	s := openStore(t)
	const n = 8000
	var listings, keys int
	pageStats = func(l, k int) { listings, keys = l, k }
	defer func() { pageStats = nil }()
	for _, buckets := range []int{64, 1} {
		ns := listNamespace(t, s, "cost"+strconv.Itoa(buckets), buckets)
		var wg sync.WaitGroup
		for w := range 16 {
			wg.Go(func() {
				for i := w; i < n; i += 16 {
					if _, err := s.kv.Put(context.Background(), topicKey(topicIn(ns, fmt.Sprintf("topic-%06d", i)), buckets), []byte("{}")); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		cursor := cursorOf(ns, buckets, fmt.Sprintf("topic-%06d", n/2))
		for _, limit := range []int{100, 1000} {
			var best time.Duration
			for range 3 {
				start := time.Now()
				uris, _, err := s.TopicsPage(context.Background(), ns, cursor, limit)
				if d := time.Since(start); best == 0 || d < best {
					best = d
				}
				if err != nil || len(uris) != limit {
					t.Fatalf("%d buckets: a page of %d, %v", buckets, len(uris), err)
				}
			}
			t.Logf("%d topics in %d buckets: a page of %d in %v, %d listings, %d keys sent", n, buckets, limit, best, listings, keys)
			if buckets == 64 && keys > n/2 {
				t.Errorf("a page of %d read %d keys", limit, keys)
			}
		}
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
		if err := returned(t, name, op); err == nil {
			t.Fatalf("%s of a store that is gone: %v", name, err)
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
	cursor := cursorOf(ns, 16, fmt.Sprintf("topic-%08d", n/2))
	// The deadline of an admin request, not the store's own OpTimeout.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b.Run("page", func(b *testing.B) {
		for b.Loop() {
			uris, _, err := s.TopicsPage(ctx, ns, cursor, 1000)
			if err != nil || len(uris) > 1000 {
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
