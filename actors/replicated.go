package actors

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/logstore"
	"github.com/braidmq/braid/meta"
	"github.com/braidmq/braid/replica"
	"github.com/braidmq/braid/routing"
	"github.com/braidmq/braid/topology"
	"github.com/braidmq/braid/wal"
)

// Replicated units. A segment whose layout names replicas
// (topology.Segment.Replicas: its owner first, then other nodes, each with
// its data directory's incarnation) keeps each bucket log on every one of
// them, replicated by one raft group per bucket (package replica) whose
// log is the bucket log itself. The owner, the topic's home, leads the
// groups: its bucket actor proposes each batch (replicaCommitter) and
// acknowledges its producers once the batch is committed, durable on a
// majority of the replicas. Readers of any replica's log see what is
// committed, no more (the group sets the log's read limit). A follower
// opens its replica when the first raft message for it arrives
// (OpenReplica), once the topic's record says it is one. A bucket sealed by
// a layout change seals its group too (a seal entry in the raft log), so
// that every replica agrees where the sealed unit ends.

// raftStateFile is the replica's state file, in the unit's log directory.
const raftStateFile = logstore.RaftStateFile

// replicaSealWait bounds how long a read of a sealed replicated unit waits
// for its replicas to agree where it ends (a new leader elected among the
// survivors, its seal entry committed).
const replicaSealWait = 3 * time.Second

// replicaLeadTimeout bounds how long a bucket waits to take the lead of its
// group before it refuses appends.
const replicaLeadTimeout = 5 * time.Second

// groupName names the raft group of a unit of a topic's incarnation.
func groupName(key UnitKey, incarnation string) string {
	return key.Topic.String() + "#" + incarnation + "#" + strconv.FormatUint(uint64(key.Segment), 10) + "#" + strconv.Itoa(key.Bucket)
}

// parseGroupName reverses groupName.
func parseGroupName(name string) (UnitKey, string, error) {
	parts := strings.Split(name, "#")
	if len(parts) != 4 {
		return UnitKey{}, "", fmt.Errorf("group %q: not topic#incarnation#segment#bucket", name)
	}
	topic, err := routing.ParseTopic(parts[0])
	if err != nil {
		return UnitKey{}, "", err
	}
	seg, err := strconv.ParseUint(parts[2], 10, 64)
	if err != nil {
		return UnitKey{}, "", fmt.Errorf("group %q: segment: %w", name, err)
	}
	bucket, err := strconv.Atoi(parts[3])
	if err != nil || bucket < 0 {
		return UnitKey{}, "", fmt.Errorf("group %q: bad bucket", name)
	}
	return UnitKey{Topic: topic, Segment: topology.SegmentID(seg), Bucket: bucket}, parts[1], nil
}

// withReplicas gives the segments ids of l, owned by owner, their
// replicas when segments get several copies here (Config.
// ReplicationFactor): owner first, then other live nodes. Fewer live
// nodes than the factor give fewer copies, logged.
func (m *Manager) withReplicas(topic string, l topology.Layout, ids []topology.SegmentID, owner string, n int) topology.Layout {
	if n <= 1 || m.cfg.PlaceReplicas == nil || m.cfg.Replicas == nil {
		return l
	}
	out := l
	out.Segments = slices.Clone(l.Segments)
	for i := range out.Segments {
		s := &out.Segments[i]
		if !slices.Contains(ids, s.ID) || s.Owner != owner {
			continue
		}
		reps := m.placeReplicas(topic, s.ID, owner, n)
		if len(reps) < n {
			m.log.Error("fewer live nodes than the replication factor: the segment gets fewer copies",
				"topic", topic, "segment", s.ID, "replicas", len(reps), "replication_factor", n)
		}
		if len(reps) > 0 {
			// One copy too: a group of one, which the home gives more
			// copies once more nodes live (rereplicate.go).
			s.Replicas = reps
		}
	}
	return out
}

// checkReplication refuses a replication_factor this node's cluster cannot
// honour: above 1 without a cluster, or above its live nodes.
func (m *Manager) checkReplication(p *api.Policies) error {
	if p == nil || p.ReplicationFactor == nil || *p.ReplicationFactor <= 1 {
		return nil
	}
	n := *p.ReplicationFactor
	if m.cfg.Replicas == nil || m.cfg.LiveNodes == nil {
		return api.Errorf(api.CodeInvalidPolicy, "replication_factor %d needs a cluster: this node runs alone", n)
	}
	if live := m.cfg.LiveNodes(); n > live {
		return api.Errorf(api.CodeInvalidPolicy, "replication_factor %d is above the %d live nodes of the cluster", n, live)
	}
	return nil
}

// replicationFactor is the topic's resolved replication_factor.
func (t *Topic) replicationFactor() int {
	return t.mgr.resolve(t.policies.Load(), t.nsPolicies.Load()).ReplicationFactor
}

// replicated says whether s is a segment whose copies raft keeps (placed
// with a replication factor above 1, however many copies it got).
func replicated(s topology.Segment) bool { return len(s.Replicas) > 0 }

// peersOf names the replicas of s by raft id.
func peersOf(s topology.Segment) map[uint64]replica.Peer {
	out := make(map[uint64]replica.Peer, len(s.Replicas))
	for i, r := range s.Replicas {
		out[uint64(i+1)] = replica.Peer{Node: r.Node, Incarnation: r.Incarnation}
	}
	return out
}

// startGroup starts this node's replica of the group of unit key (a
// segment s of the topic's incarnation) over its log l, making the
// group's state first if this is its first start here. A group that runs
// already is returned as it is.
func (m *Manager) startGroup(key UnitKey, incarnation string, s topology.Segment, l *wal.Log) (*replica.Group, error) {
	host := m.cfg.Replicas
	if host == nil {
		return nil, api.Errorf(api.CodeUnavailable, "segment %d of %s is replicated, and this node runs no replicas (no cluster)", key.Segment, key.Topic)
	}
	name := groupName(key, incarnation)
	m.groupsMu.Lock()
	if g := host.Group(name); g != nil {
		if g.Storage().Log() == l {
			m.groupsMu.Unlock()
			return g, nil
		}
		// The group runs over a log the store has closed and opened again
		// since (its sweep of idle logs, a bucket's Reopen): the new one
		// shows its readers nothing until a group runs over it (a replica's
		// log does not say what is committed), so a reader of it would
		// take the unit for empty. The group starts again over it, from the
		// commit its state recorded.
		m.groupsMu.Unlock()
		g.Stop()
		m.log.Warn("a replica ran over a log opened again since: started again over the new one", "group", name)
		return m.startGroup(key, incarnation, s, l)
	}
	if err := m.damagedGroups[name]; err != nil {
		m.groupsMu.Unlock()
		return nil, err
	}
	if w := m.groupsOpening[name]; w != nil {
		// Another caller starts it: its outcome is this one's.
		m.groupsMu.Unlock()
		<-w.done
		return w.g, w.err
	}
	if m.groupsOpening == nil {
		m.groupsOpening = map[string]*groupStart{}
	}
	w := &groupStart{done: make(chan struct{})}
	m.groupsOpening[name] = w
	m.groupsMu.Unlock()
	w.g, w.err = m.startGroupNamed(name, key, incarnation, s, l)
	m.groupsMu.Lock()
	if errors.Is(w.err, replica.ErrDamaged) {
		// Said once: its readers go to the other replicas, and the group
		// goes on with them.
		m.m.damagedReads.Inc()
		m.log.Error("this node's copy of a replicated unit lost entries it had stored (damage): it takes no part in its group, and its reads go to the other replicas",
			"unit", key.String(), "group", name, "err", w.err)
		w.err = damagedCopyError{api.Errorf(api.CodeUnavailable, "%s: node %s's copy is damaged (%v); read another replica", key, m.cfg.NodeID, w.err)}
		if m.damagedGroups == nil {
			m.damagedGroups = map[string]error{}
		}
		m.damagedGroups[name] = w.err
	}
	delete(m.groupsOpening, name)
	m.groupsMu.Unlock()
	close(w.done)
	if _, ok := errors.AsType[damagedCopyError](w.err); ok {
		m.noteDamaged(key, incarnation, w.err)
	}
	return w.g, w.err
}

// groupStart is a start of a replica under way (Manager.startGroup).
type groupStart struct {
	done chan struct{}
	g    *replica.Group
	err  error
}

// startGroupNamed starts the replica of group name (startGroup: one at a
// time a group, many groups at once: a node opening thousands of new
// groups waits for their state files' syncs together, not one by one).
func (m *Manager) startGroupNamed(name string, key UnitKey, incarnation string, s topology.Segment, l *wal.Log) (*replica.Group, error) {
	host := m.cfg.Replicas
	id := s.ReplicaID(m.cfg.NodeID, m.cfg.Incarnation)
	if id == 0 {
		return nil, api.Errorf(api.CodeUnavailable, "node %s (incarnation %s) holds no replica of segment %d of %s", m.cfg.NodeID, m.cfg.Incarnation, key.Segment, key.Topic)
	}
	state := filepath.Join(l.Dir(), raftStateFile)
	if _, err := os.Stat(state); errors.Is(err, os.ErrNotExist) {
		if l.DurableOffset() != l.FirstOffset() {
			return nil, fmt.Errorf("the log of %s holds records but no raft state: it was not made as a replica", key)
		}
		voters := make([]uint64, len(s.Replicas))
		for i := range voters {
			voters[i] = uint64(i + 1)
		}
		if err := replica.Bootstrap(m.cfg.FS, state, voters); err != nil {
			return nil, err
		}
	}
	st, err := replica.OpenStorageIn(host.StateJournal(), l, m.cfg.FS, state)
	if err != nil {
		return nil, err
	}
	// The owner (the first replica) leads a new group first: its bucket
	// takes the lead; the others wait for it rather than campaign.
	g, err := host.Start(replica.Config{Group: name, ID: id, Peers: peersOf(s), Storage: st, FirstLeader: 1,
		OnCommitted: func(uint64) { m.store.Signal(key.Topic.String()) },
		OnFailed:    func(err error) { m.noteDamaged(key, incarnation, err) },
		OnSealed: func() {
			// Sealed while the topic is active here: by this node's own
			// layout change, or by a node that took this one for down and
			// moved the topic (checkMovedAway tells which).
			if t, ok := m.Active(key.Topic.String()); ok && t.incarnation == incarnation {
				m.checkMovedAway(t)
			}
		}})
	if err != nil {
		return nil, err
	}
	return g, nil
}

// stopGroups stops this node's replicas of the topic's units (the topic
// stops here, or is dropped); with seg >= 0, only that segment's.
func (m *Manager) stopGroups(name routing.TopicName, seg int64) {
	if m.cfg.Replicas == nil {
		return
	}
	for _, g := range m.cfg.Replicas.Groups(name.String() + "#") {
		if seg >= 0 {
			if key, _, err := parseGroupName(g.Name()); err != nil || int64(key.Segment) != seg {
				continue
			}
		}
		g.Stop()
	}
}

// stopAllGroups stops every replica of this node (it closes).
func (m *Manager) stopAllGroups() {
	if m.cfg.Replicas == nil {
		return
	}
	for _, g := range m.cfg.Replicas.Groups("") {
		g.Stop()
	}
}

// OpenReplica opens this node's replica of a group another node sent a
// message for (replica.HostConfig.OnUnknown), if the topic's record names
// this node, with its incarnation, as one of the segment's replicas; else
// nothing (the message stays dropped).
func (m *Manager) OpenReplica(group string, from replica.Peer) {
	key, incarnation, err := parseGroupName(group)
	if err != nil {
		m.log.Error("a raft message names a group that is no unit; dropped", "group", group, "from", from.String(), "err", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), remoteTimeout)
	defer cancel()
	rec, _, err := m.meta.Topic(ctx, key.Topic)
	if err != nil {
		if !errors.Is(err, meta.ErrNotFound) {
			m.log.Warn("reading a topic's record to open a replica failed", "group", group, "err", err)
		}
		return
	}
	s, ok := rec.Layout.Segment(key.Segment)
	if rec.Incarnation != incarnation || !ok || !replicated(s) || s.ReplicaID(m.cfg.NodeID, m.cfg.Incarnation) == 0 || key.Bucket >= s.Buckets {
		return
	}
	m.store.SetIncarnation(key.Topic, rec.Incarnation)
	if s.Owner != m.cfg.NodeID {
		if err := markHosted(m.store.NameDir(key.Topic)); err != nil {
			m.log.Error("marking a replica's topic directory failed", "group", group, "err", err)
			return
		}
	}
	l, err := m.store.Log(key, wal.Options{Durability: wal.DurabilityAlways, SegmentBytes: m.resolve(rec.Policies, nil).SegmentBytes})
	if err != nil {
		m.log.Error("opening a replica's log failed", "group", group, "err", err)
		return
	}
	if _, err := m.startGroup(key, incarnation, s, l); err != nil && !errors.As(err, new(damagedCopyError)) { // a damaged copy was said once
		m.log.Error("starting a replica failed", "group", group, "err", err)
	}
}

// replicaLog returns this node's log of unit key of a replicated segment
// s, with its replica running: readers of it see what is committed. For
// a sealed segment it waits until its group is sealed (taking the lead
// and sealing it when no replica did: its owner is gone), so that what
// it shows is the unit whole.
func (m *Manager) replicaLog(key UnitKey, incarnation string, s topology.Segment, opts wal.Options) (*wal.Log, error) {
	opts.Durability = wal.DurabilityAlways
	l, err := m.store.Log(key, opts)
	if err != nil {
		return nil, err
	}
	g, err := m.startGroup(key, incarnation, s, l)
	if err != nil {
		return nil, err
	}
	if s.State == topology.StateActive {
		return l, nil
	}
	self := s.ReplicaID(m.cfg.NodeID, m.cfg.Incarnation)
	deadline := time.Now().Add(replicaSealWait)
	for {
		if _, ok := g.Sealed(); ok {
			return l, nil
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nil, api.Errorf(api.CodeUnavailable, "segment %d of %s: its replicas have not agreed where it ends yet; retry", key.Segment, key.Topic)
		}
		// Seal from here when there is no leader, this one leads, the
		// leader's node is gone, or the leader has not sealed in half the
		// wait; else the live leader may seal first.
		if lead, _, _ := g.Status(); lead == 0 || lead == self || !m.peerLive(s, lead) || left < replicaSealWait/2 {
			if err := g.Lead(left); err == nil {
				select {
				case <-g.Seal().Done():
				case <-time.After(time.Until(deadline)):
				}
			}
			continue
		}
		time.Sleep(min(200*time.Millisecond, left))
	}
}

// peerLive says whether the node of replica id of s is live by the
// placement's view (Config.Evict: a node to move off is not).
func (m *Manager) peerLive(s topology.Segment, id uint64) bool {
	if id == 0 || int(id) > len(s.Replicas) {
		return false
	}
	node := s.Replicas[id-1].Node
	if node == m.cfg.NodeID || m.cfg.Evict == nil {
		return true
	}
	_, gone := m.cfg.Evict(node)
	return !gone
}

// readReplicas reads unit req of a replicated segment s another node owns
// from its replicas, the owner first: the first that answers (this node
// itself when it is one) serves it.
func (m *Manager) readReplicas(ctx context.Context, s topology.Segment, req UnitRead) (UnitData, error) {
	return m.readReplicasBut(ctx, s, req, "")
}

// readReplicasBut is readReplicas from every replica but the one on node
// skip.
func (m *Manager) readReplicasBut(ctx context.Context, s topology.Segment, req UnitRead, skip string) (UnitData, error) {
	var lastErr error = api.Errorf(api.CodeUnavailable, "segment %d of %s: no other replica to read", req.Segment, req.Topic)
	for _, r := range s.Replicas {
		if r.Node == skip {
			continue
		}
		var d UnitData
		var err error
		if r.Node == m.cfg.NodeID {
			if r.Incarnation != m.cfg.Incarnation {
				continue // this node's copy went with its old data directory
			}
			d, err = m.serveReplicaRead(req, s)
		} else {
			d, err = m.cfg.RemoteUnits.ReadUnit(ctx, r.Node, req)
		}
		if err == nil {
			return d, nil
		}
		lastErr = err
		if c := api.AsError(err).Code; c != api.CodeUnavailable && c != api.CodeTimeout {
			return d, err
		}
	}
	return UnitData{}, lastErr
}

// serveReplicaRead serves a read of this node's replica of a unit of s.
func (m *Manager) serveReplicaRead(req UnitRead, s topology.Segment) (UnitData, error) {
	key := UnitKey{Topic: req.Topic, Segment: req.Segment, Bucket: req.Bucket}
	m.store.SetIncarnation(req.Topic, req.Incarnation)
	if s.Owner != m.cfg.NodeID {
		if err := markHosted(m.store.NameDir(req.Topic)); err != nil {
			return UnitData{}, api.Errorf(api.CodeInternal, "%s: %v", key, err)
		}
	}
	l, err := m.replicaLog(key, req.Incarnation, s, m.cfg.Defaults.logOptions())
	if err != nil {
		return UnitData{}, err
	}
	d, err := m.readLocal(func() (*wal.Log, error) { return l, nil }, req)
	return d, m.damagedCopy(key, req.Incarnation, err)
}

// replicaCommitter proposes a bucket's batches to its group, which this
// node leads, and answers each once committed. Batches are proposed in
// order, only while this replica leads (a batch that comes while it does
// not waits, behind the others, until it takes the lead), and committed in
// order. At most replicaMaxProposals proposals are in flight: the batches
// that come meanwhile wait and go together as the next proposal (one raft
// entry), as a log's group commit gathers appends while it syncs, so that
// a raft round carries many small requests rather than one each.
type replicaCommitter struct {
	key   UnitKey
	g     *replica.Group
	fence func() error
	// onAck counts and signals what was acknowledged.
	onAck func([]appendReq)
	// onSealed is called when a proposal finds the group sealed: another
	// node may have moved the topic (checkMovedAway).
	onSealed func()

	mu        sync.Mutex
	waiting   [][]appendReq // batches not proposed yet, in order
	leading   bool          // a goroutine is taking the lead
	proposing int           // proposals in flight
	inflight  sync.WaitGroup
}

// replicaMaxProposals bounds a unit's proposals in flight, and
// replicaMaxEntryBytes the records' bytes one proposal gathers (a batch
// larger alone is proposed alone).
const (
	replicaMaxProposals  = 2
	replicaMaxEntryBytes = 1 << 20
)

// submit proposes reqs, after the batches waiting.
func (c *replicaCommitter) submit(reqs []appendReq) {
	if len(reqs) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.inflight.Add(1)
	c.waiting = append(c.waiting, reqs)
	c.proposeLocked()
}

// proposeLocked proposes the waiting batches if this replica leads, as
// few proposals as the bound on those in flight allows, or starts taking
// the lead.
func (c *replicaCommitter) proposeLocked() {
	if len(c.waiting) == 0 {
		return
	}
	if lead, _, _ := c.g.Status(); lead != c.g.ID() {
		if !c.leading {
			c.leading = true
			go func() {
				err := c.g.Lead(replicaLeadTimeout)
				c.mu.Lock()
				defer c.mu.Unlock()
				c.leading = false
				if err != nil {
					// No lead to take: what waits is answered, not written.
					for _, reqs := range c.waiting {
						c.answer(reqs, 0, api.Errorf(api.CodeUnavailable, "%s: no majority of its replicas answers: %v; resend", c.key, err))
					}
					c.waiting = nil
					return
				}
				c.proposeLocked()
			}()
		}
		return
	}
	for len(c.waiting) > 0 && c.proposing < replicaMaxProposals {
		var batches [][]appendReq
		var recs []wal.Record
		size := 0
		for len(c.waiting) > 0 {
			b := c.waiting[0]
			bytes := batchBytes(b)
			if len(batches) > 0 && size+bytes > replicaMaxEntryBytes {
				break
			}
			batches = append(batches, b)
			c.waiting = c.waiting[1:]
			for i := range b {
				recs = append(recs, b[i].records...)
			}
			size += bytes
		}
		c.proposing++
		go c.await(c.g.Propose(recs), batches)
	}
}

// batchBytes is about what a batch's records take in a raft entry.
func batchBytes(reqs []appendReq) int {
	n := 0
	for i := range reqs {
		for _, r := range reqs[i].records {
			n += len(r.Key) + len(r.Payload) + 16
			for _, h := range r.Headers {
				n += len(h.Key) + len(h.Value)
			}
		}
	}
	return n
}

// await answers the batches of a proposal once it is committed or lost,
// and proposes what waits.
func (c *replicaCommitter) await(p *replica.Proposal, batches [][]appendReq) {
	err := p.Wait()
	if err != nil && !errors.Is(err, replica.ErrSealed) && !errors.Is(err, replica.ErrStopped) {
		// Another replica leads now, or the entry lost to another
		// leader's: the producers resend (proposing it again here could put
		// it behind later batches of its keys), and this replica takes the
		// lead for the next ones.
		go func() { _ = c.g.Lead(replicaLeadTimeout) }()
	}
	if err == nil && c.fence != nil {
		err = c.fence()
	}
	var aerr error
	switch {
	case err == nil:
	case errors.Is(err, replica.ErrSealed):
		aerr = api.Errorf(api.CodeSegmentSealed, "%s is sealed; resend", c.key)
		if c.onSealed != nil {
			c.onSealed()
		}
	default:
		aerr = api.Errorf(api.CodeUnavailable, "%s: not committed on a majority of its replicas: %v; resend", c.key, err)
	}
	off := p.First
	for _, reqs := range batches {
		c.answer(reqs, off, aerr)
		for i := range reqs {
			off += uint64(len(reqs[i].records))
		}
	}
	c.mu.Lock()
	c.proposing--
	c.proposeLocked()
	c.mu.Unlock()
}

// answer settles a batch and marks it done.
func (c *replicaCommitter) answer(reqs []appendReq, first uint64, err error) {
	defer c.inflight.Done()
	off := first
	for i := range reqs {
		reqs[i].settle(unitRef{c.key.Segment, c.key.Bucket}, off, err)
		off += uint64(len(reqs[i].records))
	}
	if err == nil && c.onAck != nil {
		c.onAck(reqs)
	}
}

// drain waits for every batch in flight to be answered.
func (c *replicaCommitter) drain() { c.inflight.Wait() }

// seal seals the group (after drain): the unit's end, agreed by every
// replica.
func (c *replicaCommitter) seal() (uint64, error) {
	if err := c.g.Lead(replicaLeadTimeout); err != nil {
		return 0, err
	}
	if err := c.g.Seal().Wait(); err != nil {
		return 0, err
	}
	end, _ := c.g.Sealed()
	return end, nil
}

// checkMovedAway stops topic t if its record names another home: a node
// that took this one for down sealed its groups and moved the topic
// (SealSilentOwner) while it was alive (paused, or cut off from its
// peers but not from the store). Its producers were answered
// SEGMENT_SEALED and look the topic up again; the topic stopped here, its
// next request here reads the record. One check per topic at a time.
func (m *Manager) checkMovedAway(t *Topic) {
	if _, busy := m.ownerChecks.LoadOrStore(t.uri, true); busy {
		return
	}
	go func() {
		defer m.ownerChecks.Delete(t.uri)
		ctx, cancel := context.WithTimeout(context.Background(), remoteTimeout)
		defer cancel()
		rec, _, err := m.meta.Topic(ctx, t.name)
		if err != nil || rec.Incarnation != t.incarnation {
			return // deleted (its delete stops it), or not known now: the next seal asks again
		}
		if owner := LayoutOwner(rec.Layout); owner != "" && owner != m.cfg.NodeID {
			if m.stopTopic(t, 0, true) {
				m.log.Warn("topic moved away while active here (another node sealed its groups and took it): stopped here",
					"topic", t.uri, "home", owner, "epoch", rec.Layout.Epoch)
			}
		}
	}()
}

// namespacePolicies reads the policies of name's namespace (nil when they
// cannot be read: the broker's and the topic's then decide).
func (m *Manager) namespacePolicies(ctx context.Context, name routing.TopicName) *api.Policies {
	ns, err := m.namespace(ctx, name.NamespaceName())
	if err != nil {
		return nil
	}
	return ns.Policies
}

// placeReplicas names up to n replicas of segment seg of topic, owned by
// owner (Config.PlaceReplicas, keyed by topic and segment).
func (m *Manager) placeReplicas(topic string, seg topology.SegmentID, owner string, n int) []topology.Replica {
	return m.cfg.PlaceReplicas(topic+"#"+strconv.FormatUint(uint64(seg), 10), owner, n)
}
