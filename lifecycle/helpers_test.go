package lifecycle

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/braidmq/braid/actors"
	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/meta"
	"github.com/braidmq/braid/routing"
	"github.com/braidmq/braid/topology"
	"github.com/braidmq/braid/wal"
	"github.com/braidmq/braid/wal/tier"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	dto "github.com/prometheus/client_model/go"
)

// newTestLifecycle runs a node's topics (an actors.Manager over a real
// embedded NATS KV and remote tier and a real actor system, in a temp
// directory, recovered) and their storage lifecycle, started: the
// compactor, and the storage worker when configure gives it a tick.
// configure changes both configs (nil: as they are). The topics' storage
// ticks re-arm the worker, as on a node.
func newTestLifecycle(t *testing.T, configure func(*actors.Config, *Config)) *Lifecycle {
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
	system := newTestSystem()
	tr, err := tier.Open(ctx, js, tier.Config{Root: dir + "/topics", CacheDir: dir + "/tier-cache"})
	if err != nil {
		t.Fatal(err)
	}
	var l *Lifecycle // set before any topic applies its policies
	cfg := actors.Config{DataDir: dir + "/topics", System: system, Meta: store, Tier: tr, Logger: discard(),
		OnStorageTick: func(tick time.Duration) { l.Rearm(tick) }}
	lcfg := Config{Meta: store, System: system, Logger: discard()}
	if configure != nil {
		configure(&cfg, &lcfg)
	}
	m := actors.NewManager(cfg)
	lcfg.Topics = m
	l = New(lcfg)
	t.Cleanup(func() {
		l.Close()
		_ = m.Close()
		system.Shutdown()
		nc.Close()
		ns.Shutdown()
		ns.WaitForShutdown()
	})
	if err := m.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Start(); err != nil {
		t.Fatal(err)
	}
	return l
}

func newTestSystem() *actor.ActorSystem {
	return actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return discard() }))
}

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// createTestTopic creates a topic (0 segments or buckets: the defaults)
// and returns its handle.
func createTestTopic(t *testing.T, l *Lifecycle, uri string, segments, buckets int) *actors.Topic {
	t.Helper()
	if _, err := l.topics.CreateTopic(context.Background(), api.TopicCreateRequest{Topic: uri, Segments: segments, Buckets: buckets}); err != nil {
		t.Fatal(err)
	}
	topic, err := l.topics.Topic(uri)
	if err != nil {
		t.Fatal(err)
	}
	return topic
}

// produceOne produces one record and returns its result.
func produceOne(t *testing.T, topic *actors.Topic, key, payload string) api.Result {
	t.Helper()
	done := make(chan api.Result, 1)
	topic.Produce([]api.Record{{Key: []byte(key), Payload: []byte(payload)}}, func(r []api.Result) { done <- r[0] })
	select {
	case r := <-done:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("produce not answered")
		return api.Result{}
	}
}

// unitLog returns the log of unit bucket of segment seg of topic, which
// this node holds.
func unitLog(t *testing.T, topic *actors.Topic, seg topology.SegmentID, bucket int) *wal.Log {
	t.Helper()
	s, ok := topic.Layout().Segment(seg)
	if !ok {
		t.Fatalf("%s has no segment %d", topic.Topic(), seg)
	}
	l, err := topic.OpenLog(s, bucket)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func counterValue(t *testing.T, c interface{ Write(*dto.Metric) error }) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

func ptr[T any](v T) *T { return &v }

// inProcUnits carries actors.RemoteUnits calls to the Manager of the
// owner named, in this process (the cluster package carries them over
// protoactor remote).
type inProcUnits struct {
	mu    sync.Mutex
	nodes map[string]*actors.Manager
}

func (u *inProcUnits) node(owner string) (*actors.Manager, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	m, ok := u.nodes[owner]
	if !ok {
		return nil, api.Errorf(api.CodeUnavailable, "no node %s", owner)
	}
	return m, nil
}

func (u *inProcUnits) ReadUnit(ctx context.Context, owner string, req actors.UnitRead) (actors.UnitData, error) {
	m, err := u.node(owner)
	if err != nil {
		return actors.UnitData{}, err
	}
	return m.ServeUnitRead(ctx, req)
}

func (u *inProcUnits) AppendUnit(owner string, req actors.UnitAppend, done func(uint64, error)) {
	m, err := u.node(owner)
	if err != nil {
		go done(0, err)
		return
	}
	go func() {
		first, err := m.ServeUnitAppend(context.Background(), req)
		done(first, err)
	}()
}

func (u *inProcUnits) DropTopic(ctx context.Context, owner string, topic routing.TopicName, incarnation string, segments []topology.SegmentID) error {
	m, err := u.node(owner)
	if err != nil {
		return err
	}
	return m.DropTopic(ctx, topic, incarnation, segments)
}

// twoNodes starts a home n1 whose new segments (but the one covering hash
// 0) are placed on n2, and n2, on one metadata store, each with its
// storage lifecycle; n2's storage worker ticks every tick.
func twoNodes(t *testing.T, tick time.Duration) (home, other *Lifecycle) {
	t.Helper()
	units := &inProcUnits{nodes: map[string]*actors.Manager{}}
	home = newTestLifecycle(t, func(c *actors.Config, _ *Config) {
		c.NodeID = "n1"
		c.Owns = func(owner string) bool { return owner == "n1" || owner == "" }
		c.RemoteUnits = units
		c.PlaceSegment = func(string, topology.SegmentID) string { return "n2" }
	})
	system := newTestSystem()
	var o *Lifecycle // set before any topic applies its policies
	m := actors.NewManager(actors.Config{DataDir: filepath.Join(t.TempDir(), "topics"), NodeID: "n2", System: system, Meta: home.meta, RemoteUnits: units,
		Owns: func(owner string) bool { return owner == "n2" }, Logger: discard(), OnStorageTick: func(d time.Duration) { o.Rearm(d) }})
	o = New(Config{Topics: m, Meta: home.meta, System: system, StorageTick: tick, Logger: discard()})
	t.Cleanup(func() {
		o.Close()
		_ = m.Close()
		system.Shutdown()
	})
	if err := m.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := o.Start(); err != nil {
		t.Fatal(err)
	}
	units.nodes["n1"], units.nodes["n2"] = home.topics, m
	return home, o
}
