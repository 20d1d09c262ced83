package node

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/braidmq/braid/clock"
	"github.com/braidmq/braid/consumers"
	"github.com/braidmq/braid/frontend"
	"github.com/braidmq/braid/topology"
	"github.com/braidmq/braid/wal"
)

// Config assembles a node. The zero value of every field but DataDir has a
// default (see Defaults).
type Config struct {
	// DataDir holds the bucket logs, the subscriptions and, with the
	// embedded NATS server, its JetStream store. Default ./data.
	DataDir string
	// NATSListen is host:port of the embedded NATS server (port -1 or 0
	// picks a free one). Default 127.0.0.1:4222. Ignored with NATSURL.
	NATSListen string
	// NATSURL connects to an external NATS (with JetStream) instead of
	// embedding one.
	NATSURL string
	// NATSConfig is a nats-server configuration file for the embedded
	// server (accounts, users, TLS, cluster... as NATS documents them).
	// NATSListen, ClusterListen and Routes, when set, override its
	// listeners. Ignored with NATSURL.
	NATSConfig string
	// BraidAccount is the NATS account Braid's services, metadata and
	// JetStream live in when the embedded server has accounts (default
	// "BRAID"); tenants reach them through service imports (security.go).
	BraidAccount string
	// OperatorAccount, when set, is the account whose requests may do what
	// only the operator may (create tenants, drain nodes, address every
	// tenant). Braid's own account always may.
	OperatorAccount string
	// TenantAccounts maps accounts to tenants, for accounts not named as
	// their tenants (with JWTs an account is known by its public key).
	TenantAccounts map[string]string
	// Credentials of Braid's connection to an external NATS (NATSURL), or
	// to the embedded one when its configuration uses JWTs: a .creds file,
	// an nkey seed file, and TLS (a CA to trust, a client certificate and
	// key).
	NATSCreds, NATSNkey, TLSCA, TLSCert, TLSKey string
	// Version is the build's version, for braid_build_info.
	Version string
	// UI, when set, serves /ui/ on the metrics listener (package ui: the
	// web page), making its NATS requests over the node's connection.
	UI func(*nats.Conn) http.Handler
	// MetricsListen is host:port of the /metrics HTTP endpoint; "" or "off"
	// disables it. Default 127.0.0.1:9470.
	MetricsListen string
	// Pprof serves Go's profiles under /debug/pprof/ on the metrics
	// listener (off by default: a profile shows what the node is doing).
	Pprof bool
	// Durability is the broker default for bucket logs: always, interval, none.
	Durability string
	// SyncInterval is the fsync period of the interval mode.
	SyncInterval time.Duration
	// MaxPayloadBytes is the broker default max payload of one message.
	MaxPayloadBytes int
	// MicroProduce serves the produce endpoints through a nats.go micro
	// service even with the embedded server, as with an external one,
	// instead of the lean front-end (fastproduce.go); for tests and
	// comparisons.
	MicroProduce bool
	// Logger receives structured logs; default slog.Default().
	Logger *slog.Logger
	// TopicIdleTimeout is how long a topic stays active unused before its
	// actors stop and its logs close (it activates again on its next
	// request); 0 is actors.DefaultIdleTimeout, negative never.
	TopicIdleTimeout time.Duration
	// MaxOpenLogs bounds the bucket logs open at once; 0 is ten for each
	// descriptor of MaxOpenFiles (actors.DefaultMaxOpenLogs).
	MaxOpenLogs int
	// MaxOpenFiles bounds the file descriptors bucket logs hold at once;
	// 0 is half the process's file limit (actors.DefaultMaxOpenFiles).
	MaxOpenFiles int
	// CommitSync is how the node's rounds of bucket log commits are made
	// durable: "auto" (the default: the logs with little written since
	// their last commit through the node's journal, the others by an
	// fdatasync each, all submitted together; see
	// wal.Journal.SyncDirectlyFrom), "journal" (every round: one write
	// and one fdatasync of the node's journal under <data-dir>/journal;
	// see wal.Journal), "syncfs" (one syncfs of the data directory's file
	// system per round) or "fdatasync" (one per log, submitted together).
	CommitSync string
	// LogFS is the file system bucket logs are written through; nil is
	// the operating system's. For tests (a disk that fills up).
	LogFS wal.FS

	// NodeID names the node in its cluster (a name: letters, digits, '-'
	// and '_'). "" uses the one the data directory's node-id file holds,
	// or makes one (n and 8 hex digits) and writes it there; a data
	// directory keeps its id, and a different NodeID for it is refused.
	NodeID string
	// ClusterListen is host:port of the embedded NATS server's cluster
	// (route) listener; "" runs the node alone.
	ClusterListen string
	// ActorListen is host:port of the actor listener (protoactor remote),
	// which other nodes read this node's segments through; "" is the
	// cluster listener's host and any free port (and none without a
	// cluster).
	ActorListen string
	// ActorDial maps other nodes' actor addresses (host:port, as they
	// advertise them) to the address this node dials for each instead: a
	// proxy or a NAT between the nodes, or a fault-injecting link in a
	// test. Addresses not in it are dialled as they are.
	ActorDial map[string]string
	// ClusterAdvertise is the route address the embedded NATS server
	// gives its peers to connect to it by ("": its cluster listener):
	// the address through a proxy or a NAT. Routes to it given in their
	// --routes are dialled as given.
	ClusterAdvertise string
	// ClusterName is the embedded NATS cluster's name; default "braid".
	ClusterName string
	// Routes are the cluster listeners of the other nodes
	// (nats://host:port); with ClusterListen.
	Routes []string
	// MetaReplicas is the metadata store's replicas; 0 is 3 when the
	// embedded cluster has three or more servers (this one and its
	// Routes), else 1.
	MetaReplicas int
	// StorageTick is how often the storage worker rolls and trims the
	// open bucket logs by their topics' storage policies; 0 is
	// DefaultStorageTick, negative never.
	StorageTick time.Duration
	// TierCacheBytes bounds the files the node keeps downloaded from the
	// remote tier for reads (default DefaultTierCacheBytes).
	TierCacheBytes int64
	// RebalanceInterval is how often the entry node compares the nodes'
	// loads and moves topics from the most to the least loaded one
	// (rebalance.go); 0 is DefaultRebalanceInterval, negative never.
	RebalanceInterval time.Duration
	// LeaseTTL is how long the node's membership lease holds unrenewed; it
	// renews it every third of that. Default 4s.
	LeaseTTL time.Duration
	// LeaseClock is the clock the membership lease and the entry role go
	// by (nil: the real one). Tests of clock trouble step its wall clock
	// (clock.Stepped): leases are measured on its clock that never steps.
	LeaseClock clock.Clock
	// ReplicationFactor is how many copies of each bucket log the segments
	// of new layouts get, on as many nodes (raft groups, package
	// replica), and of their consumer groups' state; 1 keeps one copy, as
	// before replication. 0 is 3 in a cluster of three or more nodes
	// (this one and its routes), else 1.
	ReplicationFactor int
	// GroupCompactAfter is how many records a consumer group's state log
	// holds before it is rewritten as one snapshot (0:
	// consumers.DefaultCompactAfter).
	GroupCompactAfter int
	// RaftTick is the tick of the node's raft groups (default 100 ms): a
	// group whose leader is gone elects another in 10 to 20 ticks.
	RaftTick time.Duration
	// DeadAfter is how long a node's lease may be lapsed before the
	// copies it holds count as lost and the active segments that had one
	// get a full set of replicas again (default 30 s).
	DeadAfter time.Duration
	// ReplicaCopyRate bounds the bytes a second this node copies from
	// others to make lost copies of sealed units again (default
	// DefaultReplicaCopyRate; negative: unbounded).
	ReplicaCopyRate int64
}

// DefaultReplicaCopyRate is the default ReplicaCopyRate: 64 MiB a second,
// a fraction of a disk's sequential rate, so that a node making copies
// again still serves its writes and reads.
const DefaultReplicaCopyRate = 64 << 20

// DefaultGroupCompactAfter is the default GroupCompactAfter.
const DefaultGroupCompactAfter = consumers.DefaultCompactAfter

// CommitJournal is the CommitSync that commits every round through the
// node's journal; CommitAuto (the default) only the rounds of many logs
// with little written to each (DirectRoundBytes).
const (
	CommitJournal = "journal"
	CommitAuto    = "auto"
)

// DirectRoundBytes is, under CommitAuto, what a log writes between two
// commits for the commit to sync its own file instead of journaling: such
// a log pays less for its fdatasync than for writing everything twice.
const DirectRoundBytes = 16 << 10

// Default values.
const (
	DefaultDataDir       = "./data"
	DefaultNATSListen    = "127.0.0.1:4222"
	DefaultMetricsListen = "127.0.0.1:9470"
	DefaultClusterName   = "braid"
	DefaultLeaseTTL      = 4 * time.Second
	// DefaultStorageTick is how often the storage worker runs.
	DefaultStorageTick = time.Minute
	// DefaultTierCacheBytes bounds the remote tier's read cache.
	DefaultTierCacheBytes = 256 << 20
	// DefaultRebalanceInterval is how often the entry node compares loads.
	DefaultRebalanceInterval = 30 * time.Second
	// natsMaxPayload is the embedded server's max message size: a produce
	// batch may carry up to MaxPayloadBytes of payload plus framing.
	natsMaxPayload = frontend.EmbeddedMaxPayload
	// DefaultBraidAccount is the account Braid lives in on a NATS server
	// with accounts.
	DefaultBraidAccount = "BRAID"
)

func (c Config) withDefaults() (Config, error) {
	if c.DataDir == "" {
		c.DataDir = DefaultDataDir
	}
	if c.NATSListen == "" && c.NATSConfig == "" {
		c.NATSListen = DefaultNATSListen
	}
	if c.BraidAccount == "" {
		c.BraidAccount = DefaultBraidAccount
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return c, fmt.Errorf("a TLS client certificate needs its key: give both --tls-cert and --tls-key")
	}
	if c.MetricsListen == "" {
		c.MetricsListen = DefaultMetricsListen
	}
	if c.Durability == "" {
		c.Durability = "always"
	}
	if _, err := wal.ParseDurability(c.Durability); err != nil {
		return c, fmt.Errorf("durability: %w", err)
	}
	if c.CommitSync == "" {
		c.CommitSync = CommitAuto
	}
	if _, err := wal.ParseSyncMode(c.CommitSync); err != nil && c.CommitSync != CommitJournal && c.CommitSync != CommitAuto {
		return c, fmt.Errorf("commit sync %q: want auto, journal, syncfs or fdatasync", c.CommitSync)
	}
	if c.SyncInterval == 0 {
		c.SyncInterval = wal.DefaultSyncInterval
	}
	if c.MaxPayloadBytes == 0 {
		c.MaxPayloadBytes = 1 << 20
	}
	if c.MaxPayloadBytes < 1 || c.MaxPayloadBytes > natsMaxPayload-64<<10 {
		return c, fmt.Errorf("max payload %d must be in [1, %d]", c.MaxPayloadBytes, natsMaxPayload-64<<10)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.ClusterName == "" {
		c.ClusterName = DefaultClusterName
	}
	if c.ClusterListen == "" && len(c.Routes) > 0 {
		return c, fmt.Errorf("routes %v need a cluster listener (--cluster-listen)", c.Routes)
	}
	for from, to := range c.ActorDial {
		for _, a := range []string{from, to} {
			if _, p, err := net.SplitHostPort(a); err != nil || p == "" {
				return c, fmt.Errorf("actor dial %s=%s: want host:port=host:port", from, to)
			}
		}
	}
	if c.ClusterAdvertise != "" {
		if _, p, err := net.SplitHostPort(c.ClusterAdvertise); err != nil || p == "" {
			return c, fmt.Errorf("cluster advertise %q: want host:port", c.ClusterAdvertise)
		}
		if c.ClusterListen == "" {
			return c, fmt.Errorf("cluster advertise %s needs a cluster listener (--cluster-listen)", c.ClusterAdvertise)
		}
	}
	if c.ClusterListen != "" && c.NATSURL != "" {
		return c, fmt.Errorf("cluster listen %s: the embedded NATS cluster is not used with an external NATS (--nats-url)", c.ClusterListen)
	}
	if c.MetaReplicas < 0 || c.MetaReplicas > 5 {
		return c, fmt.Errorf("meta replicas %d must be in [0, 5]", c.MetaReplicas)
	}
	if c.MetaReplicas == 0 {
		c.MetaReplicas = 1
		if c.ClusterListen != "" && 1+len(c.Routes) >= 3 {
			c.MetaReplicas = 3
		}
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = DefaultLeaseTTL
	}
	if c.TierCacheBytes <= 0 {
		c.TierCacheBytes = DefaultTierCacheBytes
	}
	if c.StorageTick == 0 {
		c.StorageTick = DefaultStorageTick
	}
	if c.RebalanceInterval == 0 {
		c.RebalanceInterval = DefaultRebalanceInterval
	}
	if c.LeaseTTL < 300*time.Millisecond {
		return c, fmt.Errorf("lease TTL %s is under 300ms", c.LeaseTTL)
	}
	if c.ReplicationFactor == 0 {
		c.ReplicationFactor = 1
		if c.ClusterListen != "" && 1+len(c.Routes) >= 3 {
			c.ReplicationFactor = 3
		}
	}
	if c.GroupCompactAfter < 0 {
		return c, fmt.Errorf("group compact-after %d must be 0 (the default) or more", c.GroupCompactAfter)
	}
	if c.ReplicationFactor < 1 || c.ReplicationFactor > topology.MaxReplicas {
		return c, fmt.Errorf("replication factor %d must be in [1, %d]", c.ReplicationFactor, topology.MaxReplicas)
	}
	if c.ReplicationFactor > 1 && c.ClusterListen == "" {
		return c, fmt.Errorf("replication factor %d needs a cluster (--cluster-listen and --routes): one node holds one copy", c.ReplicationFactor)
	}
	if c.ReplicationFactor > 1+len(c.Routes) {
		return c, fmt.Errorf("replication factor %d is more than the %d nodes of the cluster (this one and its --routes)", c.ReplicationFactor, 1+len(c.Routes))
	}
	if c.RaftTick == 0 {
		c.RaftTick = 100 * time.Millisecond
	}
	if c.DeadAfter < 0 {
		return c, fmt.Errorf("dead after %s is negative", c.DeadAfter)
	}
	if c.RaftTick < 10*time.Millisecond {
		return c, fmt.Errorf("raft tick %s is under 10ms", c.RaftTick)
	}
	if c.ReplicaCopyRate == 0 {
		c.ReplicaCopyRate = DefaultReplicaCopyRate
	}
	if c.ReplicaCopyRate > 0 && c.ReplicaCopyRate < 1<<20 {
		return c, fmt.Errorf("replica copy rate %d bytes a second is under 1 MiB (a copy moves 1 MiB chunks); negative for no bound", c.ReplicaCopyRate)
	}
	return c, nil
}

// splitHostPort parses host:port, accepting port -1 (any free port).
func splitHostPort(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("listen address %q: %w", addr, err)
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < -1 || port > 65535 {
		return "", 0, fmt.Errorf("listen address %q: bad port", addr)
	}
	if port == 0 {
		port = -1
	}
	return host, port, nil
}
