// Package frontend serves every NATS endpoint of the wire contract:
// produce (with its lean fast path over frontend/natsio when the NATS
// server is embedded), produce-batch and produce-multi, the admin table,
// stream and queue consumption, direct reads, subscriptions, and the
// forwarding of a request for a topic another node owns to that node. It
// speaks the NATS micro-service protocol (one service shell,
// microservice.go), authorizes each request by the caller's account
// (package authz) and answers errors with the codes of package api.
//
// What it owns: the translation between NATS messages and the calls of
// the topics (actors) and consumer groups (consumers). What it does not
// own: who owns a topic, the entry role and the node's membership
// (package cluster, which it asks), and the node's start, stop, embedded
// server and /metrics (package node, which makes it).
package frontend

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/braidmq/braid/actors"
	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/authz"
	"github.com/braidmq/braid/cluster"
	"github.com/braidmq/braid/consumers"
	"github.com/braidmq/braid/meta"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/prometheus/client_golang/prometheus"
)

// Config is what the front-end needs of the node's configuration.
type Config struct {
	// NodeID is the node's id.
	NodeID string
	// MicroProduce serves produce with nats.go's micro package even with
	// an embedded server (the fast path is the default there).
	MicroProduce bool
	// Server is the embedded NATS server (nil with an external one): the
	// fast produce path connects to it.
	Server *server.Server
	// Auth is how the node's connections authenticate.
	Auth Auth
	// Policy says who may do what (package authz).
	Policy authz.Policy
	Logger *slog.Logger
	// Registry is where its metrics go.
	Registry prometheus.Registerer
	// RequestLatency is braid_request_duration_seconds{service, endpoint}.
	RequestLatency *prometheus.HistogramVec
	// Compactions runs the topics' compactions (topic.compact,
	// topic.compaction); nil answers them UNAVAILABLE.
	Compactions Compactions
}

// Compactions is what the admin endpoints ask of the node's compactor
// (package lifecycle).
type Compactions interface {
	// Compact starts a compaction of a topic (one running is not started
	// again) and reports it.
	Compact(ctx context.Context, uri string) (api.CompactionStatus, error)
	// CompactionStatus reports a topic's compaction: the one running, and
	// the last one recorded.
	CompactionStatus(ctx context.Context, uri string) (api.CompactionStatus, error)
}

// Auth is how the node's connections authenticate to NATS.
type Auth struct {
	// User and Password, when set, are the node's internal user in
	// Braid's account of its embedded server (made at each start, never
	// written or logged).
	User, Password string
	// TLS reports that the embedded server's client listener takes TLS
	// connections only: the fast path then connects in-process.
	TLS bool
	// Creds reports that the node authenticates with creds or an nkey:
	// produce is then served by the micro service.
	Creds bool
}

// Frontend serves the node's NATS endpoints.
type Frontend struct {
	cfg       Config
	log       *slog.Logger
	nodeID    string
	nc        *nats.Conn
	meta      *meta.Store
	topics    *actors.Manager
	subs      *consumers.Manager
	queues    *consumers.QueueManager
	member    *cluster.Member
	policy    authz.Policy
	registry  prometheus.Registerer
	forbidden prometheus.Counter
	// requestLatency is braid_request_duration_seconds{service, endpoint}.
	requestLatency *prometheus.HistogramVec
	reads          parkedReads // read.fetch requests waiting for data
	services       []micro.Service
	clusterSvc     micro.Service // node.list, node.drain: every node, entry or not
	produceM       *produceMetrics
	fast           *fastProduce // the produce front-end with the embedded server
	// replies is the front-end whose replies the node's committer holds
	// while it acknowledges a round (HoldReplies); nil without one.
	replies atomic.Pointer[fastProduce]
	// produceInflight counts produce requests taken and not answered.
	produceInflight *inflight
	// adminSlots bounds the admin requests served at once.
	adminSlots chan struct{}
	fwd        *forwarder // forwarding to topics' owners (forward.go)
	stopOnce   sync.Once  // StopTaking
	svcMu      sync.Mutex // guards starting services against Close
	closing    bool
}

// New makes the front-end of a node: nc its connection, store the
// metadata, topics and consumer groups what it serves, member the node in
// its cluster. It serves nothing until Start.
func New(cfg Config, nc *nats.Conn, store *meta.Store, topics *actors.Manager, subs *consumers.Manager,
	queues *consumers.QueueManager, member *cluster.Member) *Frontend {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	n := &Frontend{cfg: cfg, log: cfg.Logger, nodeID: cfg.NodeID, nc: nc, meta: store, topics: topics, subs: subs, queues: queues,
		member: member, policy: cfg.Policy, registry: cfg.Registry, requestLatency: cfg.RequestLatency,
		produceInflight: newInflight(), adminSlots: make(chan struct{}, adminConcurrency)}
	n.forbidden = prometheus.NewCounter(prometheus.CounterOpts{Name: "braid_requests_forbidden_total",
		Help: "Requests refused FORBIDDEN: a tenant account addressing another tenant, or asking for an operation of the operator."})
	n.registry.MustRegister(n.forbidden)
	return n
}
