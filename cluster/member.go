// Package cluster is this node as a member of its cluster: its membership
// lease, the entry role (which node takes the clients' requests), who owns
// which topic and the takeover of a lost node's topics, placement of new
// topics and segments, drain, rebalance, the moves of topics and consumer
// groups between nodes, and the node-to-node transport (protoactor
// remote, protobuf messages of cluster/clusterpb) over which nodes read
// and write each other's segments and hand consumer groups over.
//
// What it owns: the multi-node shell; the decisions it carries out are the
// pure package placement's (where things go, the lease and entry-role
// state machines). What it does not own: the NATS endpoints clients use
// and forwarding (package frontend), the node's start and stop, its
// embedded NATS server and /metrics (package node), and the topics and
// consumer groups themselves (actors, consumers).
package cluster

import (
	"fmt"
	"github.com/braidmq/braid/clock"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/braidmq/braid/actors"
	"github.com/braidmq/braid/consumers"
	"github.com/braidmq/braid/meta"
	"github.com/braidmq/braid/replica"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
)

// Config is what a Member needs of the node's configuration.
type Config struct {
	// NodeID is the node's id (resolved from its data directory), and
	// Incarnation its data directory's (ResolveIncarnation).
	NodeID      string
	Incarnation string
	// ClientURL is the NATS URL clients use, recorded in the lease.
	ClientURL string
	// LeaseTTL is how long the membership lease holds unrenewed.
	LeaseTTL time.Duration
	// RebalanceInterval is how often the entry node compares the nodes'
	// loads (negative: never).
	RebalanceInterval time.Duration
	// Routes are the NATS routes to the peers: how many nodes the
	// cluster was configured with, less this one.
	Routes []string
	// ClusterListen and ActorListen say where the actor listener goes
	// (units.go); with neither, the node runs alone, without one.
	ClusterListen, ActorListen string
	// ActorDial maps other nodes' actor addresses to the addresses dialled
	// for them (node.Config.ActorDial).
	ActorDial map[string]string
	Logger    *slog.Logger
	Registry  prometheus.Registerer
	// Clients starts (and Unclients stops) the services that take the
	// clients' requests, as the node takes (loses) the entry role;
	// started false says it did not (the node closes).
	Clients   func() (started bool, err error)
	Unclients func()
	// StopTaking stops every service of the node for good: another run
	// of its id took its lease.
	StopTaking func()
	// Clock is the time leases, the entry role and placement go by; nil
	// is the real clock (tests of clock trouble offset it).
	Clock clock.Clock
	// RaftTick is the tick of the node's raft groups (replica.Host; 100
	// ms if 0): a group without a leader elects one in 10 to 20 ticks.
	RaftTick time.Duration
	// StateJournal takes the state changes of the node's raft groups
	// (replica.StateJournal); the replica host closes it. None if nil.
	StateJournal *replica.StateJournal
	// DeadAfter is how long a node's lease may be lapsed before the copies
	// it holds count as lost and are made again elsewhere
	// (DefaultDeadAfter if 0).
	DeadAfter time.Duration
	// ReplicaCopyRate bounds the bytes a second copies of sealed units
	// fetch (replicacopy.go; 0 or negative: unbounded).
	ReplicaCopyRate int64
}

// Member is the node as a member of its cluster. Its methods are safe for
// concurrent use.
type Member struct {
	cfg      Config
	clock    clock.Clock
	nodeID   string
	log      *slog.Logger
	nc       *nats.Conn
	meta     *meta.Store
	system   *actor.ActorSystem
	registry prometheus.Registerer
	remote   *remote.Remote // nil without a cluster (units.go)
	// topics, subs and queues are the node's topics and consumer groups,
	// attached once made (Attach): they are made with the Member's
	// functions (Owns, PlaceSegment, PrepareGroup...).
	topics *actors.Manager
	subs   *consumers.Manager
	queues *consumers.QueueManager
	// attached is closed once they are (what other nodes ask waits for
	// it: units.go).
	attached chan struct{}

	members *membership // its lease; nil until it joined
	serving atomic.Bool // it serves the topics of layouts without owners
	// servingNode is the node that serves the topics of layouts without
	// owners (written before nodes had ids).
	servingNode string
	ownersMu    sync.Mutex
	owners      map[string]ownerEntry // topics other nodes own (topicByName)
	// takeovers, takeoverTotal and takeoverSeconds: topics moved off lost
	// nodes here (takeover.go).
	takeovers       takeovers
	groupMoves      groupMoves
	draining        atomic.Bool // node.drain (drain.go)
	rebalanced      prometheus.Counter
	groupMovesTotal prometheus.Counter
	takeoverTotal   prometheus.Counter
	takeoverSeconds prometheus.Histogram
	// entry says the node holds the entry role and takes the clients'
	// requests (see entry.go).
	entry atomic.Bool
	// replicas is the node's replica host (raft.go); nil without a
	// cluster. replicaOpener opens a replica a message asks for.
	replicas      *replica.Host
	replicaOpener atomic.Pointer[func(group string, from replica.Peer)]
	raftCounters  raftCounters
	raftPeersDown prometheus.Counter
	// groupReplicas are the raft groups of consumer groups' state this
	// node runs (grouplog.go).
	groupReplicas groupReplicaSet
	// groupSweep paces the sweeps of group state replicas (groupsweep.go).
	groupSweep struct {
		last    atomic.Int64 // unix ns of the last sweep's start
		running atomic.Bool
	}
	// groupsShort counts the consumer groups homed here whose state is
	// not on the replicas wanted at their last look (groupLog.short).
	groupsShort atomic.Int64
	// copies paces and counts the files this node copies from others.
	copies copyMeter
}

// New makes the Member of node cfg.NodeID, talking to the other nodes
// through nc and store, and to their actors through system.
func New(cfg Config, nc *nats.Conn, store *meta.Store, system *actor.ActorSystem) *Member {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	n := &Member{cfg: cfg, nodeID: cfg.NodeID, log: cfg.Logger, nc: nc, meta: store, system: system, registry: cfg.Registry,
		attached: make(chan struct{}), clock: clock.Or(cfg.Clock)}
	n.takeoverTotal = prometheus.NewCounter(prometheus.CounterOpts{Name: "braid_topic_takeovers_total",
		Help: "Topics whose owner's lease ran out, or whose replicated segments' owner its raft peers took for down, that this node moved: their lost node's active segments sealed, successors placed on a live node."})
	n.takeoverSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "braid_topic_takeover_seconds",
		Help: "Time to move one topic off a lost node (read its record, compare-and-swap the new layout).", Buckets: prometheus.ExponentialBuckets(0.001, 4, 8)})
	n.raftPeersDown = prometheus.NewCounter(prometheus.CounterOpts{Name: "braid_replica_peers_down_total",
		Help: "Times this node's replicas took another node for down: no raft message from it for ten raft ticks."})
	n.groupMovesTotal = prometheus.NewCounter(prometheus.CounterOpts{Name: "braid_consumer_group_moves_total",
		Help: "Consumer groups whose state this node took over from their former home (their topic moved here)."})
	n.rebalanced = prometheus.NewCounter(prometheus.CounterOpts{Name: "braid_rebalanced_topics_total",
		Help: "Topics this node, as the entry node, had moved from the most to the least loaded node."})
	n.registry.MustRegister(n.takeoverTotal, n.takeoverSeconds, n.groupMovesTotal, n.rebalanced)
	return n
}

// Attach gives the Member the node's topics and consumer groups (once).
func (n *Member) Attach(topics *actors.Manager, subs *consumers.Manager, queues *consumers.QueueManager) {
	n.topics, n.subs, n.queues = topics, subs, queues
	close(n.attached)
}

// NodeID is the node's id.
func (n *Member) NodeID() string { return n.nodeID }

// Serving reports whether the node serves the topics whose layouts name
// no owner (written before nodes had ids).
func (n *Member) Serving() bool { return n.serving.Load() }

// Entry reports whether the node holds the entry role.
func (n *Member) Entry() bool { return n.entry.Load() }

// Draining reports whether the node is being drained.
func (n *Member) Draining() bool { return n.draining.Load() }

// adminTimeout bounds what the Member does for one request (a move, a
// group's hand-over, a read of the metadata store for one).
const adminTimeout = 30 * time.Second

// StartServices subscribes to what the other nodes ask of this one
// (drains, evictions, moves, namespace policy changes, nodes that left)
// and starts the rebalancer.
func (n *Member) StartServices() error {
	if err := n.startDrainService(); err != nil {
		return err
	}
	if err := n.startEvictService(); err != nil {
		return err
	}
	if err := n.startRebalancer(); err != nil {
		return err
	}
	if _, err := n.nc.Subscribe(nsPoliciesSubject, n.onNamespacePolicies); err != nil {
		return fmt.Errorf("subscribing to namespace policy changes: %w", err)
	}
	return nil
}

// TryEntry takes the entry role if it is free (at start; the renewals try
// again each round).
func (n *Member) TryEntry() { n.members.tryEntry(n.clock.Now(), n.mono()) }

// StartRenewing starts renewing the lease (once the node serves: losing
// the lease stops what it serves).
func (n *Member) StartRenewing() { n.members.start() }

// Leave stops renewing and releases the lease (and the entry role), so
// that the others see the node gone at once.
func (n *Member) Leave() {
	if n.members != nil {
		n.members.leave()
	}
}

// StopRemote stops the actor listener (after the topics closed).
func (n *Member) StopRemote() {
	if n.replicas != nil {
		n.replicas.Close()
	}
	if n.remote != nil {
		n.remote.Shutdown(false)
	}
}

// Clustered reports whether the node runs in a cluster (with an actor
// listener): consumer groups' homes are recorded then.
func (n *Member) Clustered() bool { return n.remote != nil }
