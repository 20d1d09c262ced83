// Package node assembles a Braid server and runs it: its configuration,
// start and stop in a documented order (Start, Close), the embedded NATS
// server (or the connection to an external one, with its security), the
// data directory's lock, the metadata store and remote tier, and the
// Prometheus /metrics, /healthz, /readyz endpoints (and the /ui page it is
// handed).
//
// What it owns: wiring and order. What it does not own: the NATS endpoints
// (package frontend), the node's place in its cluster (package cluster),
// the topics (actors), their logs' lifecycle (lifecycle) and consumer
// groups (consumers) it makes, and any streaming logic.
package node

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/braidmq/braid/cluster"
	"github.com/braidmq/braid/frontend"
	"github.com/braidmq/braid/lifecycle"
	"github.com/braidmq/braid/wal/tier"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/braidmq/braid/actors"
	"github.com/braidmq/braid/authz"
	"github.com/braidmq/braid/consumers"
	"github.com/braidmq/braid/meta"
	"github.com/braidmq/braid/replica"
	"github.com/braidmq/braid/wal"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Node is one running Braid server.
type Node struct {
	cfg  Config
	log  *slog.Logger
	ns   *server.Server // nil with an external NATS
	nc   *nats.Conn
	auth natsAuth // how the node's connections authenticate
	// requestLatency is braid_request_duration_seconds{service, endpoint}.
	requestLatency *prometheus.HistogramVec
	meta           *meta.Store
	system         *actor.ActorSystem
	topics         *actors.Manager
	life           *lifecycle.Lifecycle // the storage worker and the compactor
	subs           *consumers.Manager
	subsView       subscriptionsView // the consumer groups, as topic controllers see them
	queues         *consumers.QueueManager
	member         *cluster.Member    // the node in its cluster (package cluster)
	front          *frontend.Frontend // the NATS endpoints (package frontend)
	metrics        *http.Server
	metricsL       net.Listener
	registry       *prometheus.Registry
	dirLock        *os.File  // the data directory's LOCK, held while the node runs
	nodeID         string    // the node's id in its cluster
	incarnation    string    // its data directory's incarnation
	dataSince      time.Time // when the data directory got it
	url            string    // the NATS URL it connected to
	tier           *tier.Tier

	svcMu   sync.Mutex // guards closing
	closing bool
}

// Start starts a node and returns once it serves requests. It goes step
// by step, each needing those before it (Close undoes them in the reverse
// order):
//
//  1. metrics: the registry and the metrics every node has;
//  2. data directory: made, locked (one process at a time), its node id
//     and its incarnation;
//  3. NATS: the embedded server (unless an external one is named), the
//     node's connection;
//  4. metadata: Braid's account checked, the KV store opened and the
//     tenant public with its namespace default made, the remote tier;
//  5. cluster: the actor system, the actor listener, the membership lease
//     and the serving role (package cluster);
//  6. topics: the log store and the topic manager, recovered from disk
//     (package actors), then their logs' lifecycle: the storage worker and
//     the compactor (package lifecycle);
//  7. consumer groups: the stream and queue subscriptions' managers
//     (package consumers);
//  8. front-end: the endpoints of forwarded requests, the entry role
//     (which starts the client services where it is taken), what every
//     node answers (package frontend);
//  9. /metrics, /healthz, /readyz, /ui;
//  10. the lease's renewals: from now on, losing the lease stops the node
//     taking requests.
func Start(ctx context.Context, cfg Config) (_ *Node, err error) {
	cfg, err = cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	n := &Node{cfg: cfg, log: cfg.Logger, registry: prometheus.NewRegistry()}
	defer func() {
		if err != nil {
			n.Close()
		}
	}()
	steps := []func(context.Context) error{n.registerMetrics, n.openDataDir, n.connectNATS, n.openMetadata, n.joinCluster,
		n.startTopics, n.startConsumers, n.startFrontend, n.startMetrics}
	for _, step := range steps {
		if err := step(ctx); err != nil {
			return nil, err
		}
	}
	n.member.StartRenewing()
	n.log.Info("braid node started", "node", n.nodeID, "serving", n.member.Serving(), "nats", redactURL(n.url), "data_dir", cfg.DataDir,
		"metrics", n.MetricsAddr(), "durability", cfg.Durability, "commit_sync", cfg.CommitSync)
	return n, nil
}

// registerMetrics makes the metrics every node has (step 1).
func (n *Node) registerMetrics(context.Context) error {
	n.requestLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "braid_request_duration_seconds",
		Help:    "Time from a request's receipt to its answer, by service and endpoint (produce: until the records are durable).",
		Buckets: prometheus.ExponentialBuckets(0.00005, 2.5, 14)}, []string{"service", "endpoint"})
	n.registry.MustRegister(n.requestLatency)
	buildInfo := prometheus.NewGauge(prometheus.GaugeOpts{Name: "braid_build_info", Help: "1, labelled with the build's version and Go's.",
		ConstLabels: prometheus.Labels{"version": cmp.Or(n.cfg.Version, "devel"), "go_version": runtime.Version()}})
	buildInfo.Set(1)
	n.registry.MustRegister(buildInfo)
	n.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return nil
}

// openDataDir makes and locks the data directory and reads (or makes) the
// node's id and the directory's incarnation there (step 2).
func (n *Node) openDataDir(context.Context) (err error) {
	if err := os.MkdirAll(n.cfg.DataDir, 0o755); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	if n.dirLock, err = lockDataDir(n.cfg.DataDir); err != nil {
		return err
	}
	if n.nodeID, err = cluster.ResolveNodeID(n.cfg.DataDir, n.cfg.NodeID); err != nil {
		return err
	}
	if n.incarnation, err = cluster.ResolveIncarnation(n.cfg.DataDir); err != nil {
		return err
	}
	n.dataSince, err = cluster.IncarnationSince(n.cfg.DataDir)
	return err
}

// connectNATS starts the embedded NATS server, unless an external one is
// named, and connects to it (step 3).
func (n *Node) connectNATS(context.Context) (err error) {
	n.url = n.cfg.NATSURL
	var auth natsAuth
	if n.url == "" {
		if n.url, auth, err = n.startNATS(); err != nil {
			return err
		}
	}
	auth.creds = n.cfg.NATSCreds != "" || n.cfg.NATSNkey != ""
	n.auth = auth
	secure, err := n.connectOptions(auth)
	if err != nil {
		return err
	}
	connOpts := []nats.Option{nats.Name("braid-server"), nats.MaxReconnects(-1),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			// A subscription over its pending limits drops requests (their
			// senders time out and may resend): say so where operators look.
			subject := ""
			if sub != nil {
				subject = sub.Subject
			}
			n.log.Warn("NATS asynchronous error", "subject", subject, "err", err)
		})}
	connOpts = append(connOpts, secure...)
	connURL := n.url
	if n.ns != nil {
		// The embedded server is in this process: connect through memory
		// instead of loopback TCP, which spares the kernel two copies of
		// every byte produced or consumed; no TLS there (a tls:// URL
		// would ask for it).
		connOpts = append(connOpts, nats.InProcessServer(n.ns))
		connURL = strings.Replace(n.url, "tls://", "nats://", 1)
	}
	if n.nc, err = nats.Connect(connURL, connOpts...); err != nil {
		return fmt.Errorf("connect to NATS at %s: %w", redactURL(n.url), err)
	}
	return nil
}

// openMetadata checks Braid's account, opens the metadata store, makes
// the first records and opens the remote tier (step 4).
func (n *Node) openMetadata(ctx context.Context) (err error) {
	js, err := jetstream.New(n.nc)
	if err != nil {
		return err
	}
	if err := n.checkBraidAccount(ctx, js); err != nil {
		return err
	}
	if n.meta, err = n.openMeta(ctx, js); err != nil {
		return err
	}
	// In a cluster whose JetStream is still electing the metadata bucket's
	// leaders (a node restarting into it) the first writes may go
	// unanswered: tried again for up to a minute, as the opening was.
	bctx, cancel := context.WithTimeout(ctx, time.Minute)
	_, err = untilJetStream(bctx, n, "the metadata store's first records", func(ctx context.Context) (struct{}, error) {
		return struct{}{}, n.bootstrap(ctx)
	})
	cancel()
	if err != nil {
		return err
	}
	// The remote tier: an object store bucket in the same JetStream,
	// replicated as the metadata is.
	n.tier, err = n.openTier(ctx, js)
	return err
}

// joinCluster starts the actor system and the node's member of its
// cluster: the actor listener, the lease, the serving role (step 5).
func (n *Node) joinCluster(ctx context.Context) error {
	n.system = actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return n.log.With("lib", "protoactor")
	}))
	// The raft groups' state changes go to one journal of the node, synced
	// once a round for all of them (replica.StateJournal); only a node in
	// a cluster runs raft groups.
	var states *replica.StateJournal
	if n.cfg.ActorListen != "" || n.cfg.ClusterListen != "" {
		j, err := replica.OpenStateJournal(filepath.Join(n.cfg.DataDir, "raft-journal"), n.cfg.DataDir, n.cfg.LogFS, 0)
		if err != nil {
			return fmt.Errorf("opening the raft state journal: %w", err)
		}
		j.OnError(func(err error) {
			n.log.Error("the raft state journal failed", "err", err)
		})
		states = j
	}
	n.member = cluster.New(cluster.Config{NodeID: n.nodeID, Incarnation: n.incarnation, ClientURL: n.ClientURL(), LeaseTTL: n.cfg.LeaseTTL, Clock: n.cfg.LeaseClock,
		RebalanceInterval: n.cfg.RebalanceInterval, Routes: n.cfg.Routes, ClusterListen: n.cfg.ClusterListen, ActorListen: n.cfg.ActorListen,
		ActorDial: n.cfg.ActorDial,
		Logger:    n.log, Registry: n.registry,
		// The entry role starts and stops the front-end's client services;
		// the front-end is made before the role can be taken (TryEntry in
		// step 8, the renewals in step 10).
		Clients: func() (bool, error) { return n.front.StartClients() }, Unclients: func() { n.front.StopClients() },
		StopTaking: n.stopTaking, RaftTick: n.cfg.RaftTick, DeadAfter: n.cfg.DeadAfter, StateJournal: states,
		ReplicaCopyRate: n.cfg.ReplicaCopyRate},
		n.nc, n.meta, n.system)
	if err := n.member.StartRemote(); err != nil {
		return err
	}
	if err := n.member.Join(ctx); err != nil {
		return err
	}
	return n.member.ClaimServing(ctx)
}

// startTopics makes the topic manager over the node's logs, recovers the
// topics on its disk and starts their logs' lifecycle (step 6).
func (n *Node) startTopics(ctx context.Context) error {
	cfg := n.cfg
	durability, _ := wal.ParseDurability(cfg.Durability)
	// The sync of the logs the journal does not take: syncfs beside an
	// always journal (logs it cannot journal: few), fdatasync beside an
	// adaptive one (the logs that wrote much: a syncfs would write back
	// every journaled log's file too).
	commitSync, _ := wal.ParseSyncMode(cfg.CommitSync)
	if cfg.CommitSync == CommitAuto {
		commitSync = wal.SyncEach
	}
	journalDir, directBytes := "", 0
	if cfg.CommitSync == CommitJournal || cfg.CommitSync == CommitAuto {
		journalDir = filepath.Join(cfg.DataDir, "journal")
	}
	if cfg.CommitSync == CommitAuto {
		directBytes = DirectRoundBytes
	}
	defaults := actors.DefaultDefaults
	defaults.Durability = durability
	defaults.SyncInterval = cfg.SyncInterval
	defaults.MaxPayloadBytes = cfg.MaxPayloadBytes
	defaults.ReplicationFactor = cfg.ReplicationFactor
	if c := frontend.PayloadCeiling(n.nc); defaults.MaxPayloadBytes > c {
		n.log.Warn("--max-payload is over what NATS carries in one message here: the broker default is lowered to it (raise max_payload in the NATS server's configuration)",
			"max_payload_flag", cfg.MaxPayloadBytes, "nats_max_payload", c+frontend.PayloadFraming, "default", c)
		defaults.MaxPayloadBytes = c
	}
	n.topics = actors.NewManager(actors.Config{
		DataDir: filepath.Join(cfg.DataDir, "topics"), NodeID: n.nodeID, Owns: n.member.Owns, RemoteUnits: n.member.RemoteUnits(), FS: cfg.LogFS, System: n.system, Meta: n.meta, Defaults: defaults,
		Publish: n.nc.Publish, Registerer: n.registry, Logger: n.log, Subscriptions: &n.subsView,
		IdleTimeout: cfg.TopicIdleTimeout, InUse: n.subsView.running, MaxOpenLogs: cfg.MaxOpenLogs, MaxOpenFiles: cfg.MaxOpenFiles, CommitSync: commitSync, JournalDir: journalDir, JournalDirectBytes: directBytes, HoldReplies: n.holdReplies, AckFence: n.member.Fence,
		PlaceSegment: n.member.PlaceSegment, Evict: n.member.Evict, MoveOffDamaged: n.member.MoveOffDamaged, ReportDamaged: n.member.ReportDamaged, Tier: n.tier, OnStorageTick: n.rearmStorage,
		Incarnation: n.incarnation, DataSince: n.dataSince, Replicas: n.member.Replicas(), PlaceReplicas: n.member.PlaceReplicas,
		ReplicaLost: n.member.ReplicaLost, LiveNodes: n.member.LiveNodes, CopyReplica: n.member.CopyReplica,
	})
	// Made before any topic applies its policies (they activate once the
	// consumer groups and the front-end are there, steps 7 and 8).
	n.life = lifecycle.New(lifecycle.Config{Topics: n.topics, Meta: n.meta, System: n.system, StorageTick: cfg.StorageTick,
		Registerer: n.registry, Logger: n.log})
	if err := n.topics.Recover(ctx); err != nil {
		return err
	}
	if r := n.member.Replicas(); r != nil {
		// Raft logs commit in the rounds of the bucket logs' commit group:
		// one journal write and sync a round covers the node's logs of both
		// kinds.
		r.SetCommits(n.topics.Store().CommitGroup())
	}
	// Replicas open only now: the journal replayed what a crash left of
	// their logs (Recover), before any of them opens.
	n.member.SetReplicaOpener(n.topics.OpenReplica)
	return n.life.Start()
}

// rearmStorage passes a topic's storage_tick to the storage worker
// (actors.Config.OnStorageTick).
func (n *Node) rearmStorage(tick time.Duration) { n.life.Rearm(tick) }

// startFrontend makes the front-end, takes the entry role if it is free
// and serves what every node answers (step 8).
func (n *Node) startFrontend(context.Context) error {
	n.front = frontend.New(frontend.Config{NodeID: n.nodeID, MicroProduce: n.cfg.MicroProduce, Server: n.ns, Auth: n.auth.frontend(),
		Policy: authz.Policy{BraidAccount: n.cfg.BraidAccount, OperatorAccount: n.cfg.OperatorAccount, Tenants: n.cfg.TenantAccounts},
		Logger: n.log, Registry: n.registry, RequestLatency: n.requestLatency, Compactions: n.life}, n.nc, n.meta, n.topics, n.subs, n.queues, n.member)
	if err := n.front.Start(); err != nil {
		return err
	}
	// Only the entry node takes clients' requests (cluster/entry.go): NATS
	// picks a queue group's member at random across a cluster, so requests
	// of one connection spread over several nodes would reach an owner by
	// several paths, out of order. Through one node they stay in order;
	// it forwards what other nodes own.
	n.member.TryEntry()
	return n.front.AddClusterService()
}

// natsStartTimeout bounds the embedded NATS server's start.
const natsStartTimeout = time.Minute

func (n *Node) startNATS() (string, natsAuth, error) {
	opts, err := n.embeddedOptions()
	if err != nil {
		return "", natsAuth{}, err
	}
	if n.cfg.NATSListen != "" || n.cfg.NATSConfig == "" {
		host, port, err := splitHostPort(n.cfg.NATSListen)
		if err != nil {
			return "", natsAuth{}, err
		}
		opts.Host, opts.Port = host, port
	}
	if opts.Port > 0 {
		// nats-server only logs a listen failure (and the node would wait
		// for a server that never comes up): try the address first.
		l, err := net.Listen("tcp", net.JoinHostPort(cmp.Or(opts.Host, "0.0.0.0"), strconv.Itoa(opts.Port)))
		if err != nil {
			return "", natsAuth{}, fmt.Errorf("embedded NATS cannot listen on %s:%d (--nats-listen or --nats-config): %w", opts.Host, opts.Port, err)
		}
		l.Close()
	}
	opts.JetStream = true
	if opts.StoreDir == "" {
		opts.StoreDir = filepath.Join(n.cfg.DataDir, "nats")
	}
	// Only metadata goes through JetStream: syncing it on every write
	// costs nothing on the data path and keeps layouts durable.
	opts.SyncAlways = true
	if opts.MaxPayload == 0 {
		opts.MaxPayload = natsMaxPayload
	}
	opts.NoSigs, opts.NoLog = true, true
	// No shared subject cache: nearly every subject the node's connections
	// publish to is a requester's reply inbox, used once, which the cache
	// stored and then evicted (a lock, a copy of the subject, and a
	// sweeping goroutine per thousand replies: about 5% of the node's CPU
	// under single-message produce). Each connection's own cache still
	// serves the subjects it publishes to again and again.
	opts.NoSublistCache = true
	if n.cfg.ClusterListen != "" {
		if err := n.clusterOptions(opts); err != nil {
			return "", natsAuth{}, err
		}
	} else if opts.Cluster.Port != 0 && opts.ServerName == "" {
		opts.ServerName = n.nodeID // a cluster from the configuration file
	}
	auth, err := n.secureEmbedded(opts)
	if err != nil {
		return "", natsAuth{}, err
	}
	auth.tls = opts.TLSConfig != nil && !opts.AllowNonTLS
	ns, err := server.NewServer(opts)
	if err != nil {
		return "", natsAuth{}, fmt.Errorf("embedded NATS: %w", err)
	}
	ns.Start()
	// A clustered server recovering its JetStream on a busy machine (three
	// nodes starting at once on two cores) can take more than 10 s.
	if !ns.ReadyForConnections(natsStartTimeout) {
		ns.Shutdown()
		return "", natsAuth{}, fmt.Errorf("embedded NATS did not start within %s", natsStartTimeout)
	}
	n.ns = ns
	if auth.open {
		n.log.Warn("the embedded NATS server authenticates nobody: any client that reaches it can read and write every tenant and Braid's metadata (configure accounts with --nats-config; see docs/security.md)",
			"listen", ns.ClientURL())
	}
	return ns.ClientURL(), auth, nil
}

// bootstrap creates the tenant "public" and namespace "public/default" on
// first start, as Pulsar does.
func (n *Node) bootstrap(ctx context.Context) error {
	if err := n.meta.CreateTenant(ctx, "public"); err != nil && !errors.Is(err, meta.ErrExists) {
		return fmt.Errorf("metadata store: create the tenant public: %w (is the store damaged?)", err)
	}
	err := n.meta.CreateNamespace(ctx, meta.NamespaceRecord{Tenant: "public", Namespace: "default"})
	// In a forming cluster another node may have just created the tenant,
	// and the bucket's leader may be changing: look again for a while.
	for deadline := time.Now().Add(10 * time.Second); errors.Is(err, meta.ErrNotFound) && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		err = n.meta.CreateNamespace(ctx, meta.NamespaceRecord{Tenant: "public", Namespace: "default"})
	}
	if err != nil && !errors.Is(err, meta.ErrExists) {
		return fmt.Errorf("metadata store: create the namespace public/default: %w (is the store damaged?)", err)
	}
	return nil
}

func (n *Node) startMetrics(context.Context) error {
	if n.cfg.MetricsListen == "off" {
		return nil
	}
	l, err := net.Listen("tcp", n.cfg.MetricsListen)
	if err != nil {
		return fmt.Errorf("metrics listener: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(n.registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("/readyz", n.readyz)
	if n.cfg.UI != nil {
		mux.Handle("/ui/", n.cfg.UI(n.nc))
		mux.Handle("/ui", http.RedirectHandler("/ui/", http.StatusMovedPermanently))
	}
	if n.cfg.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	n.metricsL = l
	n.metrics = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = n.metrics.Serve(l) }()
	return nil
}

// readyz answers 200 when the node takes requests: connected to NATS, its
// membership lease current (not fenced) and not closing; else 503 saying
// why.
func (n *Node) readyz(w http.ResponseWriter, _ *http.Request) {
	var why string
	n.svcMu.Lock()
	closing := n.closing
	n.svcMu.Unlock()
	switch {
	case closing:
		why = "closing"
	case n.nc == nil || !n.nc.IsConnected():
		why = "not connected to NATS"
	default:
		if err := n.member.Fence(); err != nil {
			why = err.Error()
		}
	}
	if why != "" {
		http.Error(w, "not ready: "+why, http.StatusServiceUnavailable)
		return
	}
	_, _ = w.Write([]byte("ready\n"))
}

// holdReplies is the front-end's HoldReplies (once it is made).
func (n *Node) holdReplies() func() {
	if n.front == nil {
		return func() {}
	}
	return n.front.HoldReplies()
}

// stopTaking stops taking requests (another run of the node's id took its
// lease).
func (n *Node) stopTaking() {
	if n.front != nil {
		n.front.StopTaking()
	}
}

// NodeID is the node's id in its cluster.
func (n *Node) NodeID() string { return n.nodeID }

// Serving reports whether the node serves the cluster's topics.
func (n *Node) Serving() bool { return n.member.Serving() }

// ClientURL is the NATS URL clients use.
func (n *Node) ClientURL() string {
	if n.ns != nil {
		return n.ns.ClientURL()
	}
	return redactURL(n.cfg.NATSURL) // it is logged and recorded: never a password
}

// MetricsAddr is the address /metrics is served on ("" when off).
func (n *Node) MetricsAddr() string {
	if n.metricsL == nil {
		return ""
	}
	return n.metricsL.Addr().String()
}

// Topics is the node's topic manager (for tests and tools in-process).
func (n *Node) Topics() *actors.Manager { return n.topics }

// shutdownAnswerTimeout bounds how long Close waits for the produce
// requests under way to be answered.
const shutdownAnswerTimeout = 10 * time.Second

// clientFlushTimeout bounds how long Close waits for the embedded server
// to write out what it holds for its clients.
const clientFlushTimeout = 3 * time.Second

// flushClients waits, up to timeout, until the embedded server has written
// to its clients everything it holds for them (the last replies): its own
// shutdown gives a client only 100 ms to take them, which a busy machine
// misses.
func (n *Node) flushClients(timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		connz, err := n.ns.Connz(&server.ConnzOptions{Limit: 1 << 20})
		if err != nil {
			return
		}
		pending := 0
		for _, c := range connz.Conns {
			pending += c.Pending
		}
		if pending == 0 {
			return
		}
		if time.Now().After(deadline) {
			n.log.Warn("stopping NATS with replies its clients have not taken", "bytes", pending, "waited", timeout)
			return
		}
		<-tick.C
	}
}

// Close stops serving, flushes and closes every log, and stops NATS.
func (n *Node) Close() error {
	// Stop taking requests, then answer every produce request taken
	// (with its result, or UNAVAILABLE from the stopping topics) before
	// the logs close.
	n.svcMu.Lock()
	n.closing = true
	n.svcMu.Unlock()
	if n.front != nil {
		if left := n.front.Drain(shutdownAnswerTimeout); left > 0 {
			n.log.Error("stopping with produce requests unanswered", "requests", left, "waited", shutdownAnswerTimeout)
		}
	}
	if n.member != nil {
		n.member.Leave()
	}
	if n.metrics != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = n.metrics.Shutdown(ctx)
		cancel()
	}
	var first error
	if n.subs != nil {
		first = n.subs.Close()
	}
	if n.queues != nil {
		if err := n.queues.Close(); err != nil && first == nil {
			first = err
		}
	}
	if n.life != nil {
		n.life.Close() // its compactions read the topics' logs
	}
	if n.topics != nil {
		if err := n.topics.Close(); err != nil && first == nil {
			first = err
		}
	}
	if n.front != nil {
		n.front.Close() // after the topics answered what they took
	}
	if n.member != nil {
		n.member.StopRemote()
	}
	if n.system != nil {
		n.system.Shutdown()
	}
	if n.nc != nil {
		// The replies written so far reach the server before the close.
		_ = n.nc.FlushTimeout(5 * time.Second)
		_ = n.nc.Drain()
		n.nc.Close()
	}
	if n.ns != nil {
		n.flushClients(clientFlushTimeout)
		n.ns.Shutdown()
		n.ns.WaitForShutdown()
	}
	if n.dirLock != nil {
		n.dirLock.Close()
		n.dirLock = nil
	}
	return first
}
