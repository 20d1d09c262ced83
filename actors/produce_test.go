package actors

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/internal/poll"
	"github.com/braidmq/braid/meta"
	"github.com/braidmq/braid/routing"
	"github.com/braidmq/braid/topology"
	"github.com/braidmq/braid/wal"
	"github.com/braidmq/braid/wal/tier"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// newTestManager runs a Manager over a real embedded NATS KV and a real
// actor system, in a temp directory.
func newTestManager(t *testing.T) *Manager {
	t.Helper()
	return newTestManagerWith(t, nil)
}

// newTestManagerWith is newTestManager with the config changed by
// configure (nil: as it is).
func newTestManagerWith(t *testing.T, configure func(*Config)) *Manager {
	t.Helper()
	dir := t.TempDir()
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir + "/nats", NoSigs: true, NoLog: true})
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
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	store, err := meta.Open(ctx, js, "", 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.CreateTenant(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	if err := store.CreateNamespace(ctx, meta.NamespaceRecord{Tenant: "t", Namespace: "n"}); err != nil {
		t.Fatal(err)
	}
	system := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}))
	tr, err := tier.Open(ctx, js, tier.Config{Root: dir + "/topics", CacheDir: dir + "/tier-cache"})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{DataDir: dir + "/topics", System: system, Meta: store, Tier: tr,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if configure != nil {
		configure(&cfg)
	}
	m := NewManager(cfg)
	t.Cleanup(func() {
		_ = m.Close()
		system.Shutdown()
		nc.Close()
		ns.Shutdown()
		ns.WaitForShutdown()
	})
	return m
}

// createTestTopic creates a topic (0 segments or buckets: the defaults)
// and returns its handle.
func createTestTopic(t *testing.T, m *Manager, uri string, segments, buckets int) *Topic {
	t.Helper()
	if _, err := m.CreateTopic(context.Background(), api.TopicCreateRequest{Topic: uri, Segments: segments, Buckets: buckets}); err != nil {
		t.Fatal(err)
	}
	topic, err := m.Topic(uri)
	if err != nil {
		t.Fatal(err)
	}
	return topic
}

// mergeLowest is the merge of the two active segments of topic uri lowest
// in the key space.
func mergeLowest(t *testing.T, m *Manager, uri string) topology.Op {
	t.Helper()
	topic, err := m.Topic(uri)
	if err != nil {
		t.Fatal(err)
	}
	a := topic.Layout().Active()
	return topology.Merge(a[0].ID, a[1].ID)
}

func produceSync(t *testing.T, topic *Topic, recs ...api.Record) []api.Result {
	t.Helper()
	return produceSyncAt(t, topic, 0, recs...)
}

func produceSyncAt(t *testing.T, topic *Topic, epoch uint64, recs ...api.Record) []api.Result {
	t.Helper()
	ch := make(chan []api.Result, 1)
	topic.ProduceAt(recs, epoch, func(r []api.Result) { ch <- r })
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("produce was never answered")
		return nil
	}
}

// TestEpochProduceRoutedByAStaleLayoutIsRefusedWithTheNewEpoch routes
// appends that name their layout epoch (the Go client's contract) by the
// layout of before a split, as a request racing the split would: the
// sealed bucket refuses them whole with SEGMENT_SEALED and the epoch of the
// new layout, and stores nothing; the producer re-routes them.
func TestEpochProduceRoutedByAStaleLayoutIsRefusedWithTheNewEpoch(t *testing.T) {
	m := newTestManager(t)
	const uri = "topic://t/n/orders"
	topic := createTestTopic(t, m, uri, 1, 1)
	stale := topic.state.Load()
	desc, err := m.Change(context.Background(), uri, topology.Split(0, nil))
	if err != nil {
		t.Fatal(err)
	}
	current := topic.state.Load()

	replay := *stale
	replay.changed = make(chan struct{})
	topic.state.Store(&replay)
	recs := []api.Record{{Key: []byte("a"), Payload: []byte("1")}, {Key: []byte("b"), Payload: []byte("2")}}
	res := produceSyncAt(t, topic, stale.layout.Epoch, recs...)
	for i, r := range res {
		e := api.AsError(r.Err())
		if e == nil || e.Code != api.CodeSegmentSealed || e.Epoch != desc.Epoch {
			t.Fatalf("record %d: got %+v, want SEGMENT_SEALED at epoch %d", i, r, desc.Epoch)
		}
	}
	topic.state.Store(current)
	if first, next, _ := topic.Bounds(0, 0); next != first {
		t.Fatalf("the sealed segment took %d records", next-first)
	}
	// By the current layout the same records land in the children; named
	// by the old epoch, they are refused again (their segment is newer).
	for i, r := range produceSyncAt(t, topic, current.layout.Epoch, recs...) {
		owner, _ := current.layout.Owner(routing.KeyHash(recs[i].Key))
		if r.Err() != nil || r.Segment != uint64(owner.ID) {
			t.Fatalf("record %d: %+v, want segment %d", i, r, owner.ID)
		}
	}
	for i, r := range produceSyncAt(t, topic, stale.layout.Epoch, recs...) {
		if e := api.AsError(r.Err()); e == nil || e.Code != api.CodeSegmentSealed {
			t.Fatalf("record %d routed by epoch %d: %+v, want SEGMENT_SEALED", i, stale.layout.Epoch, r)
		}
	}
}

// TestAppendReachingASealedBucketIsForwarded sends appends straight to the
// bucket of a segment a split sealed, as a producer that knows nothing of
// layouts can get them there: they land in the children that own their
// keys, never refused, and the sealed segment stores nothing after its
// seal.
func TestAppendReachingASealedBucketIsForwarded(t *testing.T) {
	m := newTestManager(t)
	const uri = "topic://t/n/late"
	topic := createTestTopic(t, m, uri, 1, 1)
	stale := topic.state.Load()
	if _, err := m.Change(context.Background(), uri, topology.Split(0, nil)); err != nil {
		t.Fatal(err)
	}
	current := topic.state.Load()
	var recs []api.Record
	for i := range 8 {
		recs = append(recs, api.Record{Key: []byte(fmt.Sprintf("k%d", i)), Payload: []byte(fmt.Sprintf("v%d", i))})
	}
	p := &produceCall{t: topic, results: make([]api.Result, len(recs)), recs: make([]wal.Record, len(recs))}
	members := make([]int, len(recs))
	for i := range recs {
		p.recs[i] = wal.Record{Key: recs[i].Key, Payload: recs[i].Payload}
		members[i] = i
	}
	got := make(chan []api.Result, 1)
	p.done = func(r []api.Result) { got <- r }
	p.pending.Store(1)
	m.system.Root.Send(stale.buckets[0][0], appendReq{records: p.recs, sink: p, members: members})
	var res []api.Result
	select {
	case res = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("the late append was never answered")
	}
	for i, r := range res {
		owner, _ := current.layout.Owner(routing.KeyHash(recs[i].Key))
		if r.Err() != nil || r.Segment != uint64(owner.ID) {
			t.Fatalf("record %d: %+v, want it in segment %d", i, r, owner.ID)
		}
		back, err := topic.Read(owner.ID, r.Bucket, r.Offset, 1, 1<<20)
		if err != nil || len(back) != 1 || string(back[0].Payload) != string(recs[i].Payload) {
			t.Fatalf("record %d reads back as %v, %v", i, back, err)
		}
	}
	if first, next, _ := topic.Bounds(0, 0); next != first {
		t.Fatalf("the sealed segment took %d records", next-first)
	}
}

func TestValidateRefusesOversizedRecordsWhole(t *testing.T) {
	m := newTestManager(t)
	const uri = "topic://t/n/limits"
	if _, err := m.CreateTopic(context.Background(), api.TopicCreateRequest{Topic: uri}); err != nil {
		t.Fatal(err)
	}
	topic, _ := m.Topic(uri)
	res := produceSync(t, topic, api.Record{Payload: []byte("ok")}, api.Record{Payload: make([]byte, 1<<20+1)})
	for _, r := range res {
		if r.Code != api.CodePayloadTooLarge.Number {
			t.Fatalf("want PAYLOAD_TOO_LARGE for the whole batch, got %+v", res)
		}
	}
	if st := topic.Stats(); st.Messages != 0 {
		t.Fatalf("a refused batch stored %d messages", st.Messages)
	}
	res = produceSync(t, topic, api.Record{Key: make([]byte, MaxKeyBytes+1), Payload: []byte("x")})
	if res[0].Code != api.CodeInvalidArgument.Number {
		t.Fatalf("oversized key: %+v", res[0])
	}
}

// TestBucketRestartedDuringASealStaysSealed: a bucket that restarts while a
// layout change is between its seal and its publish (the layout it reads
// still says active) takes its seal from the change under way, so it
// cannot take an append into a segment that is being sealed; once the
// change is rolled back, a restarted bucket takes appends again.
func TestBucketRestartedDuringASealStaysSealed(t *testing.T) {
	m := newTestManager(t)
	const uri = "topic://t/n/sealing"
	topic := createTestTopic(t, m, uri, 1, 1)
	rec := api.Record{Key: []byte("a"), Payload: []byte("1")}
	// Appends may go straight to the committer of a running bucket (its
	// lane), so wait until the crashed bucket is starting again: its lane
	// is closed from its crash until it has read its seal, and the
	// appends below queue behind its start.
	started := make(chan struct{}, 4)
	hook := func(UnitKey) { started <- struct{}{} }
	bucketStarting.Store(&hook)
	defer bucketStarting.Store(nil)
	restart := func() {
		t.Helper()
		if err := m.CrashBucket(uri, 0, 0); err != nil {
			t.Fatal(err)
		}
		select {
		case <-started:
		case <-time.After(10 * time.Second):
			t.Fatal("the crashed bucket did not start again")
		}
	}
	epoch := topic.Epoch() + 1
	topic.setSealing([]topology.SegmentID{0}, epoch)
	restart()
	if !poll.Until(10*time.Second, func() bool {
		r := produceSyncAt(t, topic, topic.Epoch(), rec)[0]
		e := api.AsError(r.Err())
		if e != nil && e.Code == api.CodeSegmentSealed && e.Epoch == epoch {
			return true
		}
		if e != nil && e.Code != api.CodeUnavailable {
			t.Fatalf("append during the seal: %v", e)
		}
		if e == nil {
			t.Fatalf("a bucket restarted during a seal took an append at offset %d", r.Offset)
		}
		return false
	}) {
		t.Fatal("the bucket did not come back")
	}
	topic.setSealing(nil, 0)
	restart()
	poll.EventuallyNil(t, 10*time.Second, "after the rollback", func() error { return produceSync(t, topic, rec)[0].Err() })
}

// TestProduceGroupsRecordsPerUnitInOrder sends a request whose records all
// route to one unit (the Go producer's batches, sent whole) and one that
// mixes units and unkeyed records (grouped per unit): every record lands in
// its key's unit, a unit's records at consecutive offsets in request order.
func TestProduceGroupsRecordsPerUnitInOrder(t *testing.T) {
	m := newTestManager(t)
	const uri = "topic://t/n/groups"
	topic := createTestTopic(t, m, uri, 1, 4)
	table := topic.state.Load().table
	byBucket := map[int][][]byte{}
	for i := 0; len(byBucket[0]) < 6 || len(byBucket[1]) < 2; i++ {
		key := []byte(fmt.Sprintf("k%d", i))
		_, b, _ := table.Route(key)
		byBucket[b] = append(byBucket[b], key)
	}
	check := func(name string, recs []api.Record) {
		t.Helper()
		res := produceSync(t, topic, recs...)
		last := map[int]uint64{}
		for i, r := range res {
			if r.Err() != nil {
				t.Fatalf("%s: record %d: %v", name, i, r.Err())
			}
			if len(recs[i].Key) > 0 {
				if _, b, _ := table.Route(recs[i].Key); r.Bucket != b {
					t.Fatalf("%s: record %d in bucket %d, its key routes to %d", name, i, r.Bucket, b)
				}
			}
			if prev, ok := last[r.Bucket]; ok && r.Offset != prev+1 {
				t.Fatalf("%s: record %d at offset %d of bucket %d, after %d", name, i, r.Offset, r.Bucket, prev)
			}
			last[r.Bucket] = r.Offset
			got, err := topic.Read(0, r.Bucket, r.Offset, 1, 1<<20)
			if err != nil || len(got) != 1 || string(got[0].Payload) != string(recs[i].Payload) {
				t.Fatalf("%s: record %d reads back as %v, %v", name, i, got, err)
			}
		}
	}
	var one []api.Record
	for i, k := range byBucket[0][:4] {
		one = append(one, api.Record{Key: k, Payload: []byte(fmt.Sprintf("one-%d", i))})
	}
	check("one unit", one)
	mixed := []api.Record{
		{Key: byBucket[0][4], Payload: []byte("m0")},
		{Key: byBucket[1][0], Payload: []byte("m1")},
		{Payload: []byte("m2")},
		{Key: byBucket[0][5], Payload: []byte("m3")},
		{Key: byBucket[1][1], Payload: []byte("m4")},
	}
	check("mixed", mixed)
}

// TestSealedAtBeforeTheFirstState asks a topic for a segment's seal before
// it has published any state, as the buckets of a new topic's first
// segments do when they start (it used to dereference the missing state
// and panic, restarting the bucket), then with a layout that seals it and
// with a change under way that will.
func TestSealedAtBeforeTheFirstState(t *testing.T) {
	var topic Topic
	if got := topic.sealedAt(0); got != 0 {
		t.Fatalf("sealedAt before any state = %d, want 0 (active)", got)
	}
	l, err := topology.New(1, 1)
	if err != nil {
		t.Fatal(err)
	}
	split, err := l.Split(0, nil)
	if err != nil {
		t.Fatal(err)
	}
	topic.state.Store(&topicState{layout: l})
	topic.setSealing([]topology.SegmentID{0}, split.Epoch)
	if got := topic.sealedAt(0); got != split.Epoch {
		t.Fatalf("sealedAt during the split = %d, want %d", got, split.Epoch)
	}
	topic.setSealing(nil, 0)
	topic.state.Store(&topicState{layout: split})
	seg, _ := split.Segment(0)
	if got := topic.sealedAt(0); got != seg.SealedEpoch || got == 0 {
		t.Fatalf("sealedAt after the split = %d, want %d", got, seg.SealedEpoch)
	}
}

// TestControllerRestartReloadsFromTheStore crashes a topic's controller
// in the middle of a split, after the layout was written to the store: the
// restarted controller serves the layout the store holds, not the one it
// had in memory, and the topic goes on taking and serving appends; a plain
// crash afterwards leaves it serving changes too.
func TestControllerRestartReloadsFromTheStore(t *testing.T) {
	m := newTestManager(t)
	var crashed atomic.Bool
	m.afterStep = func(_ string, _ int, s topology.Step) {
		if s.Kind == topology.StepPersist && crashed.CompareAndSwap(false, true) {
			panic("crash after the compare-and-swap")
		}
	}
	const uri = "topic://t/n/restarted"
	topic := createTestTopic(t, m, uri, 1, 1)
	before := produceSync(t, topic, api.Record{Key: []byte("k"), Payload: []byte("before")})[0]
	if before.Err() != nil {
		t.Fatal(before.Err())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	_, err := m.Change(ctx, uri, topology.Split(0, nil))
	cancel()
	if err == nil {
		t.Fatal("the crashed change answered success")
	}
	if !poll.Until(10*time.Second, func() bool { return topic.Epoch() == 2 && len(topic.Layout().Active()) == 2 }) {
		t.Fatalf("after the restart the topic serves epoch %d with %d active segments, want the store's epoch 2 with 2",
			topic.Epoch(), len(topic.Layout().Active()))
	}
	var res api.Result
	poll.Until(10*time.Second, func() bool { // the check below says what came
		res = produceSync(t, topic, api.Record{Key: []byte("k"), Payload: []byte("after")})[0]
		return res.Err() == nil
	})
	if res.Err() != nil || res.Segment == 0 {
		t.Fatalf("append after the restart: %+v, want it in a child of segment 0", res)
	}
	if got, err := topic.Read(0, 0, before.Offset, 1, 1<<20); err != nil || len(got) != 1 || string(got[0].Payload) != "before" {
		t.Fatalf("the record from before reads back as %v, %v", got, err)
	}
	m.system.Root.Send(topic.pid, controllerCrash{})
	poll.EventuallyNil(t, 10*time.Second, "split after a crash", func() error {
		_, err := m.Change(context.Background(), uri, topology.Split(topic.Layout().Active()[0].ID, nil))
		return err
	})
	if topic.Epoch() != 3 {
		t.Fatalf("epoch %d after the second split, want 3", topic.Epoch())
	}
}
