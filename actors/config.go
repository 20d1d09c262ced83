package actors

import (
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/braidmq/braid/meta"
	"github.com/braidmq/braid/replica"
	"github.com/braidmq/braid/routing"
	"github.com/braidmq/braid/scaling"
	"github.com/braidmq/braid/topology"
	"github.com/braidmq/braid/wal"
	"github.com/braidmq/braid/wal/tier"
	"github.com/prometheus/client_golang/prometheus"
)

// Defaults are the broker-wide policy defaults (the last level of
// topic → namespace → broker resolution).
type Defaults struct {
	Durability        wal.Durability
	SyncInterval      time.Duration
	SegmentBytes      int
	MaxPayloadBytes   int
	EntryBucketBudget int
	// ReplicationFactor is the copies of new segments (0 or 1: one).
	ReplicationFactor int
	// Scaling is the broker default scaling policy; its EntryBucketBudget
	// is overridden by the one above.
	Scaling scaling.Policy
}

// DefaultDefaults are the broker defaults when none are configured.
var DefaultDefaults = Defaults{
	Durability:        wal.DurabilityAlways,
	SyncInterval:      wal.DefaultSyncInterval,
	SegmentBytes:      int(scaling.Default.SegmentBytes),
	MaxPayloadBytes:   1 << 20,
	EntryBucketBudget: 4,
	Scaling:           scaling.Default,
}

// MaxKeyBytes bounds a message key.
const MaxKeyBytes = 4096

// Config assembles a Manager.
type Config struct {
	// DataDir is where bucket logs live.
	DataDir string
	// NodeID is the node's id: the owner the layouts record for the
	// segments it creates ("" records none).
	NodeID string
	// Owns says whether this node owns a topic whose layout names owner
	// (see LayoutOwner); a topic it does not own is not activated
	// (NotOwnerError). nil owns every topic.
	Owns func(owner string) bool
	// FS is the file system bucket logs are written through; nil is the
	// operating system's (wal.OSFS). Tests put a full disk here.
	FS       wal.FS
	System   *actor.ActorSystem
	Meta     *meta.Store
	Defaults Defaults
	// RemoteUnits reads the bucket logs of segments other nodes own; nil
	// reads every segment here.
	RemoteUnits RemoteUnits
	// Publish sends a layout push; nil disables pushes.
	Publish    func(subject string, data []byte) error
	Registerer prometheus.Registerer
	Logger     *slog.Logger
	// Subscriptions tells controllers about the topics' subscriptions
	// (consumer counts for scaling, drained segments for retention); nil
	// means a topic has none.
	Subscriptions SubscriptionsView
	// IdleTimeout is how long a topic stays active unused before it is
	// passivated (its actors stopped, its logs closed); 0 means
	// DefaultIdleTimeout, negative never.
	IdleTimeout time.Duration
	// InUse reports whether something else holds a topic active (its
	// consumer groups); nil means nothing does.
	InUse func(topic string) bool
	// MaxOpenLogs bounds the bucket logs open at once (0: from the
	// process's file limit, see DefaultMaxOpenLogs).
	MaxOpenLogs int
	// MaxOpenFiles bounds the file descriptors bucket logs hold at once
	// (0: half the process's file limit, see DefaultMaxOpenFiles); their
	// files are closed and opened again as needed (wal.FileCache).
	MaxOpenFiles int
	// CommitSync is how the node's rounds of bucket log commits are made
	// durable (see wal.CommitGroup): one syncfs of the data directory's
	// file system per round (wal.SyncFS, the default), or an fdatasync
	// per log, submitted together (wal.SyncEach).
	CommitSync wal.SyncMode
	// JournalDir, when set, holds the node's journal: the commits of
	// bucket logs under DurabilityAlways are made durable by one write
	// and one fdatasync of the journal per round, not by a sync of each
	// log (see wal.Journal); Recover replays what a crash left in it.
	// Empty: no journal, each round syncs the logs' files (CommitSync).
	JournalDir string
	// JournalDirectBytes, with a journal, makes it adaptive: a log that
	// writes this much between two commits commits by a sync of its own
	// file instead of journaling (see
	// wal.Journal.SyncDirectlyFrom); 0 journals every round.
	JournalDirectBytes int
	// JournalBytes is the size past which the journal rolls to a new file
	// and checkpoints the old one; 0 is wal.DefaultJournalBytes.
	JournalBytes int64
	// HoldReplies, when set, is called by the node's committer before it
	// acknowledges a round of appends, and the function it returns after:
	// the front-end may hold the replies meanwhile and send them in one
	// write.
	HoldReplies func() (release func())
	// PlaceSegment, when set, names the node a new segment of a topic
	// goes to (not the one covering hash 0, which stays with the topic's
	// home); "" keeps it here. See placement.go.
	PlaceSegment func(topic string, seg topology.SegmentID) string
	// Incarnation is this node's data directory's incarnation: with
	// NodeID, what names its replicas.
	Incarnation string
	// DataSince is when the data directory got its incarnation (zero:
	// unknown): a topic made after it whose sealed segment this node
	// owns but holds no directory of was never written here (remote.go).
	DataSince time.Time
	// Replicas, when set, runs this node's replicas of replicated units
	// (package replica; replicated.go); nil: no segment is replicated.
	Replicas *replica.Host
	// PlaceReplicas, when set, names the replicas of a new segment owned
	// by owner: owner first, then up to n-1 other live nodes, each with
	// its incarnation (fewer when fewer nodes live).
	PlaceReplicas func(key string, owner string, n int) []topology.Replica
	// ReplicaLost, when set, says whether the copy a node held under an
	// incarnation is lost: the node is back under another incarnation
	// (an empty data directory), or its lease lapsed longer ago than the
	// cluster's dead_after. LiveNodes counts the live nodes that take new
	// work.
	ReplicaLost func(node, incarnation string) bool
	LiveNodes   func() int
	// CopyReplica, when set, has node copy every bucket of a sealed
	// replicated segment from sources (live replicas, in order).
	CopyReplica func(node string, topic routing.TopicName, incarnation string, seg topology.SegmentID, buckets int, sources []string) error
	// Evict, when set, says whether a node must give up the segments it
	// owns (move): its lease lapsed (gone), or it is being drained; the
	// homes of their topics relocate them.
	Evict func(node string) (move, gone bool)
	// MoveOffDamaged, when set, moves topic uri, homed here, to another
	// node: this node's copy of one of its active replicated units lost
	// entries it had stored (replica.ErrDamaged), so it cannot lead that
	// unit's group, and the unit's writes go nowhere until the topic has
	// another home. Called at most once a minute a topic.
	MoveOffDamaged func(uri string)
	// ReportDamaged, when set, tells node home, the home of a topic, that
	// this node's copy of one of its units is damaged (DamageReport): the
	// home has it made again from the other replicas (repair.go).
	ReportDamaged func(home string, r DamageReport) error
	// Tier is the remote tier closed files are offloaded to (the offload
	// policy); nil: none, offload does nothing.
	Tier *tier.Tier
	// AckFence, when set, is asked before appends made durable are
	// acknowledged: an error answers them with it instead (the node's
	// lease has run out, and another node may have sealed its segments).
	AckFence func() error
	// OnStorageTick, when set, is told the storage_tick of a topic as it
	// applies its policies (activated, created, or its or its namespace's
	// policies changed): the storage worker, run by whoever set it
	// (package lifecycle), then visits the topic's logs that often.
	OnStorageTick func(tick time.Duration)
}
