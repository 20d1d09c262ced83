package cluster

import (
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/braidmq/braid/cluster/clusterpb"
	"github.com/braidmq/braid/internal/labels"
	"github.com/braidmq/braid/meta"
	"github.com/braidmq/braid/placement"
	"github.com/braidmq/braid/replica"
	"github.com/braidmq/braid/topology"
	"github.com/prometheus/client_golang/prometheus"
)

// The transport of replication (package replica). Every node runs one
// replica.Host for the raft groups of the replicated units it holds; a
// host's batch for a peer (one per peer per round) travels as a
// clusterpb.RaftBatch over protoactor remote, without a reply, to the
// peer's raft actor (raftActorName), which hands it to its host. The
// batch names both nodes with their data directories' incarnations: a
// batch for another incarnation of the receiver (sent to the node as it
// was before its disk was replaced) is dropped and counted there. The
// peer's actor address comes from its lease as this node last counted
// the leases; a batch for a node that is not live then is dropped (raft
// sends again, and the host's beacons notice the silence).

// raftActorName names every node's actor that takes raft batches.
const raftActorName = "braid-raft"

// raftCounters count the raft batches this node could not send, and the
// messages it could not decode.
type raftCounters struct {
	unsent, undecodable atomic.Uint64
}

// startReplicas starts the node's replica host and its raft actor (part of
// StartRemote).
func (n *Member) startReplicas() error {
	self := replica.Peer{Node: n.nodeID, Incarnation: n.cfg.Incarnation}
	n.replicas = replica.NewHost(replica.HostConfig{Self: self, Send: n.sendRaft, TickInterval: n.cfg.RaftTick,
		Logger: replica.NewLogger(n.log), StateJournal: n.cfg.StateJournal,
		OnUnknown: func(group string, from replica.Peer) {
			if strings.HasPrefix(group, groupRaftPrefix) {
				n.openGroupFollower(group, from)
				return
			}
			if open := n.replicaOpener.Load(); open != nil {
				(*open)(group, from)
			}
		},
		OnPeerDown: func(node string, since time.Time) {
			n.raftPeersDown.Inc()
			n.log.Warn("a node sent no raft message for a while: taken for down by this node's replicas (its groups here elect without it; its replicated topics move before its lease lapses)",
				"node", node, "silent_for", time.Since(since).Round(time.Millisecond))
			go n.moveOffSilent(node)
		}})
	props := actor.PropsFromFunc(n.receiveRaft, actor.WithDispatcher(labels.Dispatcher("braid_actor", raftActorName)))
	if _, err := n.system.Root.SpawnNamed(props, raftActorName); err != nil {
		return err
	}
	n.registerReplicaMetrics()
	return nil
}

// Replicas returns the node's replica host (nil without a cluster).
func (n *Member) Replicas() *replica.Host { return n.replicas }

// SetReplicaOpener sets what the host asks about a message for a group it
// does not run (the topic manager opens the replica if the layout names
// this node as one).
func (n *Member) SetReplicaOpener(open func(group string, from replica.Peer)) {
	n.replicaOpener.Store(&open)
}

// sendRaft sends one batch to a peer (replica.HostConfig.Send).
func (n *Member) sendRaft(to replica.Peer, batch []replica.Envelope) {
	if n.members == nil {
		n.raftCounters.unsent.Add(1)
		return
	}
	r, ok := n.members.liveView()[to.Node]
	if !ok || r.ActorAddr == "" {
		n.raftCounters.unsent.Add(1)
		return
	}
	msg := &clusterpb.RaftBatch{FromNode: n.nodeID, FromIncarnation: n.cfg.Incarnation, ToNode: to.Node, ToIncarnation: to.Incarnation,
		Envelopes: make([]*clusterpb.RaftEnvelope, 0, len(batch))}
	for _, e := range batch {
		env := &clusterpb.RaftEnvelope{Group: e.Group}
		switch {
		case e.Message != nil:
			b, err := proto.Marshal(e.Message)
			if err != nil {
				n.raftCounters.unsent.Add(1)
				n.log.Error("a raft message could not be encoded; dropped", "group", e.Group, "type", e.Message.GetType().String(), "err", err)
				continue
			}
			env.Message = b
		case e.Quiesce != nil:
			env.QuietFrom, env.QuietTerm, env.QuietCommit = e.Quiesce.From, e.Quiesce.Term, e.Quiesce.Commit
		}
		msg.Envelopes = append(msg.Envelopes, env)
	}
	n.system.Root.Send(actor.NewPID(r.ActorAddr, raftActorName), msg)
}

// receiveRaft hands a peer's batch to the host, in the order it came.
func (n *Member) receiveRaft(ctx actor.Context) {
	msg, ok := ctx.Message().(*clusterpb.RaftBatch)
	if !ok || n.replicas == nil {
		return
	}
	batch := make([]replica.Envelope, 0, len(msg.Envelopes))
	for _, env := range msg.Envelopes {
		e := replica.Envelope{Group: env.Group}
		if len(env.Message) > 0 {
			m := new(pb.Message)
			if err := proto.Unmarshal(env.Message, m); err != nil {
				n.raftCounters.undecodable.Add(1)
				n.log.Error("a raft message from another node could not be decoded; dropped", "from", msg.FromNode, "group", env.Group, "err", err)
				continue
			}
			e.Message = m
		} else if env.QuietFrom != 0 {
			e.Quiesce = &replica.Quiet{From: env.QuietFrom, Term: env.QuietTerm, Commit: env.QuietCommit}
		}
		batch = append(batch, e)
	}
	n.replicas.Deliver(replica.Peer{Node: msg.FromNode, Incarnation: msg.FromIncarnation},
		replica.Peer{Node: msg.ToNode, Incarnation: msg.ToIncarnation}, batch)
}

// registerReplicaMetrics exports the host's counters.
func (n *Member) registerReplicaMetrics() {
	c := n.replicas.Counters()
	counter := func(name, help string, f func() uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(f()) })
	}
	for _, col := range []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "braid_replica_groups", Help: "Raft groups of replicated units this node runs a replica of."},
			func() float64 { return float64(n.replicas.Len()) }),
		counter("braid_replica_stale_incarnation_dropped_total", "Raft batches dropped because they were for another incarnation of this node (its data directory before it was replaced).", c.StaleIncarnation.Load),
		counter("braid_replica_unknown_group_dropped_total", "Raft messages dropped for a group this node does not run (it may open it: a replica whose node restarted).", c.UnknownGroup.Load),
		counter("braid_replica_failed_total", "Replicas that failed: their log or state could not be written, or raft stopped on an entry their log could not give (a damaged frame). The error log names the group.", c.Failed.Load),
		counter("braid_replica_not_member_dropped_total", "Raft messages dropped because their sender is not the member the group knows (another incarnation of its node, or another node).", c.NotMember.Load),
		n.raftPeersDown,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "braid_replica_under_replicated_segments", Help: "Segments of the topics active here as their home with fewer live copies than their replication factor (sealed and active)."},
			func() float64 {
				if n.topics == nil {
					return 0
				}
				return float64(n.topics.UnderReplicated())
			}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "braid_replica_under_replicated_groups", Help: "Consumer groups running here as their home whose replicated state is not on the replicas of their topic's home segment at their last look (every 10 s): a lost copy not made again yet."},
			func() float64 { return float64(n.groupsShort.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "braid_replica_copy_bytes_left", Help: "Bytes left to copy of the sealed units' copies this node is making again (from other nodes' replicas)."},
			func() float64 { return float64(n.copies.left.Load()) }),
		counter("braid_replica_copied_bytes_total", "Bytes this node copied from other nodes' replicas to make lost copies of sealed units again (paced by --replica-copy-rate).",
			func() uint64 { return uint64(n.copies.copied.Load()) }),
		counter("braid_replica_copy_mismatches_total", "Copied files (sealed units, consumer group state) that did not match their source's SHA-256: removed and copied again.",
			func() uint64 { return uint64(n.copies.mismatched.Load()) }),
		counter("braid_replica_quiesced_total", "Times a raft group went quiet here (an idle group stops ticking).", c.Quiesced.Load),
		counter("braid_replica_batches_sent_total", "Raft batches this node sent (one per peer per round, beacons included).", c.Batches.Load),
		counter("braid_replica_batches_unsent_total", "Raft batches dropped because their node was not live at the last count, or a message could not be encoded.", n.raftCounters.unsent.Load),
		counter("braid_replica_messages_undecodable_total", "Raft messages from other nodes that could not be decoded, dropped.", n.raftCounters.undecodable.Load),
	} {
		_ = n.registry.Register(col)
	}
	if j := n.cfg.StateJournal; j != nil {
		for _, col := range []prometheus.Collector{
			counter("braid_replica_state_syncs_total", "Writes and fdatasyncs of the node's raft state journal (one a round for every group whose hard state or marks changed).",
				func() uint64 { return j.Counts().Syncs }),
			counter("braid_replica_state_records_total", "Raft group states (hard state, marks) made durable in the node's raft state journal.",
				func() uint64 { return j.Counts().Records }),
			counter("braid_replica_state_checkpoints_total", "Checkpoints of the node's raft state journal (the groups' latest states written to their state files, older journal files removed).",
				func() uint64 { return j.Counts().Checkpoints }),
			counter("braid_replica_state_failures_total", "Failed writes, syncs, rolls or checkpoints of the node's raft state journal (logged at error).",
				func() uint64 { return j.Counts().Failures }),
		} {
			_ = n.registry.Register(col)
		}
	}
}

// PlaceReplicas names the n replicas of a segment owned by owner (key its
// topic and id): owner first, then other live nodes that take new work
// (placement.Replicas), each with the incarnation its lease records. A
// node whose lease records none (an earlier release) holds no replica.
func (n *Member) PlaceReplicas(key, owner string, count int) []topology.Replica {
	if n.members == nil {
		return nil
	}
	// The leases as the last renewal counted them (every third of a
	// lease), not read again: listing them can take a third of a lease
	// while a node is being lost (JetStream makes the listing's
	// consumer), which is when copies are placed for a takeover. The
	// nodes taken for down are passed over below.
	var recs []meta.NodeRecord
	for _, r := range n.members.liveView() {
		recs = append(recs, r)
	}
	if len(recs) == 0 {
		recs = n.members.liveNodes(0)
	}
	if owner != n.nodeID && !slices.ContainsFunc(recs, func(r meta.NodeRecord) bool { return r.ID == owner }) {
		recs = n.members.liveNodes(0) // the owner joined since the view was read
	}
	inc := map[string]string{n.nodeID: n.cfg.Incarnation}
	var nodes []meta.NodeRecord
	for _, r := range recs {
		if r.Incarnation == "" || r.ActorAddr == "" || r.ID != owner && n.raftSilent(r.ID) {
			continue // no copy goes to a node taken for down (the owner is the caller's choice)
		}
		if r.ID != n.nodeID {
			inc[r.ID] = r.Incarnation
		}
		nodes = append(nodes, r)
	}
	if inc[owner] == "" {
		return nil
	}
	var out []topology.Replica
	for _, id := range placement.Replicas(placementNodes(nodes), key, owner, count) {
		out = append(out, topology.Replica{Node: id, Incarnation: inc[id]})
	}
	return out
}

// DefaultDeadAfter is how long a node's lease may be lapsed before the
// copies it holds count as lost (ReplicaLost).
const DefaultDeadAfter = 30 * time.Second

// ReplicaLost says whether the copy node held under incarnation is lost:
// the node's lease (as last read) is live under another incarnation (it
// came back with an empty data directory), or lapsed longer ago than
// dead_after.
func (n *Member) ReplicaLost(node, incarnation string) bool {
	if n.members == nil || node == n.nodeID && incarnation == n.cfg.Incarnation {
		return false
	}
	if node == n.nodeID {
		return true
	}
	all := n.members.all.Load()
	if all == nil {
		return false
	}
	r, ok := (*all)[node]
	switch {
	case !ok:
		return false // not read yet: no verdict
	case r.Incarnation != "" && r.Incarnation != incarnation:
		return true
	}
	expires := n.members.leaseExpiry(r)
	now := n.mono()
	if now.Before(expires) {
		return false
	}
	deadAfter := n.cfg.DeadAfter
	if deadAfter == 0 {
		deadAfter = DefaultDeadAfter
	}
	return now.Sub(expires) > deadAfter
}

// LiveNodes counts the live nodes that take new work, as last read.
func (n *Member) LiveNodes() int {
	if n.members == nil {
		return 1
	}
	count := 0
	for _, r := range n.members.liveView() {
		if !r.Draining && !r.Starting && n.members.holds(r) {
			count++
		}
	}
	return count
}
