package actors

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/meta"
	"github.com/braidmq/braid/routing"
	"github.com/braidmq/braid/topology"
)

// Re-replication: the home of a topic gives its replicated segments their
// copies back (docs/replication.md). Active segments that lost a copy, or
// have fewer than the replication factor, are relocated for a full set;
// sealed ones are copied to another node. A takeover seals the groups of
// the segments it sealed in metadata at once.

// hasReplicated says whether the topic has replicated segments (active
// or sealed), whose copies the home watches.
func (c *controller) hasReplicated() bool {
	for _, s := range c.rec.Layout.Segments {
		if replicated(s) && s.State != topology.StateDeleted {
			return true
		}
	}
	return false
}

// checkReplicas gives the active replicated segments of the topic that
// lost a copy, or that have fewer copies than the replication factor
// while more nodes live, a full set again: they are relocated here (sealed
// in metadata, their groups sealed, successors with their ranges and a new
// set of replicas). Copies of sealed segments are not made again yet.
func (c *controller) checkReplicas(ctx actor.Context) {
	m := c.t.mgr
	if m.cfg.ReplicaLost == nil || m.cfg.Replicas == nil {
		return
	}
	live := 0
	if m.cfg.LiveNodes != nil {
		live = m.cfg.LiveNodes()
	}
	var degraded []topology.SegmentID
	why := ""
	homeDamaged := false
	factor := c.t.replicationFactor()
	for _, s := range c.rec.Layout.Active() {
		if s.Owner != m.cfg.NodeID {
			continue
		}
		// Fewer copies than the factor (placed when too few nodes were
		// live, or before the factor was raised): more once placement
		// would give more, so that a relocation never makes a successor
		// no better than the segment it seals.
		more := func() bool {
			if factor <= max(len(s.Replicas), 1) || live <= max(len(s.Replicas), 1) {
				return false
			}
			return len(m.placeReplicas(c.t.uri, s.ID, m.cfg.NodeID, factor)) > max(len(s.Replicas), 1)
		}
		if !replicated(s) {
			if more() {
				degraded = append(degraded, s.ID)
				why = "under-replicated"
			}
			continue
		}
		for i, r := range s.Replicas {
			if i > 0 && m.cfg.ReplicaLost(r.Node, r.Incarnation) {
				degraded = append(degraded, s.ID)
				why = "replica-lost"
				break
			}
			if m.replicaDamaged(c.t.uri, s.ID, r) {
				if i == 0 && !m.canLead(c.t, s) {
					// Its copy here cannot seal the unit: another home
					// seals it, with the healthy copies.
					m.homeCopyDamaged(c.t, damagedCopyError{fmt.Errorf("segment %d: this node's copy is damaged and its replica failed", s.ID)})
					return
				}
				degraded = append(degraded, s.ID)
				why = "replica-damaged"
				homeDamaged = homeDamaged || i == 0
				break
			}
		}
		if !slices.Contains(degraded, s.ID) && more() {
			degraded = append(degraded, s.ID)
			why = "under-replicated"
		}
	}
	if len(degraded) == 0 {
		return
	}
	m.log.Warn("active segments lost a copy or have fewer than the replication factor: relocating them for a full set of replicas",
		"topic", c.t.uri, "segments", degraded, "why", why)
	if _, err := c.change(ctx, &changeReq{op: topology.Relocate(degraded, m.cfg.NodeID), reason: why}); err != nil {
		m.m.relocateFailures.Inc()
		m.log.Error("relocating segments for a full set of replicas failed; trying again", "topic", c.t.uri, "segments", degraded, "err", err)
		if homeDamaged {
			// This node's damaged copy cannot seal its unit (its replica
			// failed): another home seals it, with the healthy copies.
			m.homeCopyDamaged(c.t, damagedCopyError{err})
		}
	}
}

// countUnderReplicated counts the topic's segments (active and sealed)
// with fewer copies on live nodes, under their current incarnations, than
// its replication factor: while a node is down, after a loss until the
// copies are made again, and while fewer nodes live than the factor.
func (c *controller) countUnderReplicated() {
	m := c.t.mgr
	factor := c.t.replicationFactor()
	if factor <= 1 || m.cfg.ReplicaLost == nil {
		c.t.underReplicated.Store(0)
		return
	}
	under := 0
	for _, s := range c.rec.Layout.Segments {
		if s.State == topology.StateDeleted {
			continue
		}
		copies := 0
		for i, r := range s.Replicas {
			if !c.copyLost(s, r) && m.peerLive(s, uint64(i+1)) {
				copies++
			}
		}
		if !replicated(s) {
			copies = 1 // placed when too few nodes were live
		}
		if copies < factor {
			under++
		}
	}
	c.t.underReplicated.Store(int64(under))
}

// UnderReplicated counts the segments of the topics active here, as their
// home, with fewer live copies than their replication factor.
func (m *Manager) UnderReplicated() int {
	n := int64(0)
	for _, t := range m.activeTopics() {
		n += t.underReplicated.Load()
	}
	return int(n)
}

// sealAfterRelocation seals the raft groups of the replicated segments a
// relocation sealed in metadata (their owner is gone) that this node holds
// a copy of, at once: while a majority of each group lives, rather than at
// the first read, which might find fewer.
func (m *Manager) sealAfterRelocation(name routing.TopicName, incarnation string, l topology.Layout, ids []topology.SegmentID) {
	for _, id := range ids {
		s, ok := l.Segment(id)
		if !ok || !replicated(s) || s.ReplicaID(m.cfg.NodeID, m.cfg.Incarnation) == 0 {
			continue
		}
		for b := range s.Buckets {
			go func() {
				key := UnitKey{Topic: name, Segment: id, Bucket: b}
				m.store.SetIncarnation(name, incarnation)
				if s.Owner != m.cfg.NodeID {
					_ = markHosted(m.store.NameDir(name))
				}
				if _, err := m.replicaLog(key, incarnation, s, m.cfg.Defaults.logOptions()); err != nil {
					m.log.Warn("sealing the group of a relocated segment: not yet (a read seals it later)", "unit", key.String(), "err", err)
				}
			}()
		}
	}
}

// Copies of sealed units made again. A sealed replicated segment whose
// copy was lost with a node (ReplicaLost) is copied whole, file by file,
// from a live replica to a live node that holds none (Config.CopyReplica),
// which then takes the lost one's place (and raft id) in the layout: the
// replication factor comes back without an operator. One copy at a time
// per topic.

// replicaCopiedMsg tells the controller that node holds a copy of every
// bucket of segment seg now, to replace its replica index.
type replicaCopiedMsg struct {
	seg   topology.SegmentID
	index int
	lost  topology.Replica
	now   topology.Replica
	err   error
}

// repairSealed starts the copy of the first sealed replicated segment
// that lost a copy, if none is under way.
func (c *controller) repairSealed(ctx actor.Context) {
	m := c.t.mgr
	if m.cfg.CopyReplica == nil || m.cfg.ReplicaLost == nil || m.cfg.PlaceReplicas == nil || c.copying {
		return
	}
	live := 0
	if m.cfg.LiveNodes != nil {
		live = m.cfg.LiveNodes()
	}
	for _, s := range c.rec.Layout.Segments {
		if s.State != topology.StateSealed || !replicated(s) {
			continue
		}
		lost := -1
		var sources []string
		for i, r := range s.Replicas {
			if c.copyLost(s, r) {
				if lost < 0 {
					lost = i
				}
			} else {
				sources = append(sources, r.Node)
			}
		}
		if lost < 0 && len(s.Replicas) < c.t.replicationFactor() && live > len(s.Replicas) {
			lost = len(s.Replicas) // fewer copies than the factor: one more
		}
		if lost < 0 || len(sources) == 0 {
			continue
		}
		var target topology.Replica
		for _, r := range m.placeReplicas(c.t.uri, s.ID, m.cfg.NodeID, len(s.Replicas)+1) {
			if !slices.Contains(sources, r.Node) {
				target = r
				break
			}
		}
		if target.Node == "" {
			continue // no live node without a copy
		}
		c.copying = true
		self, root := ctx.Self(), ctx.ActorSystem().Root
		seg, index := s.ID, lost
		var lostRep topology.Replica
		if lost < len(s.Replicas) {
			lostRep = s.Replicas[lost]
		}
		name, incarnation, buckets := c.t.name, c.t.incarnation, s.Buckets
		m.log.Warn("a sealed segment lost a copy (its node gone, or the copy damaged): copying it from the others", "topic", c.t.uri, "segment", seg,
			"lost", lostRep.Node+"/"+lostRep.Incarnation, "to", target.Node, "from", sources)
		go func() {
			err := m.cfg.CopyReplica(target.Node, name, incarnation, seg, buckets, sources)
			root.Send(self, replicaCopiedMsg{seg: seg, index: index, lost: lostRep, now: target, err: err})
		}()
		return
	}
}

// replicaCopied names the new copy of a sealed segment in the layout (one
// compare-and-swap of the record), in place of the lost one.
func (c *controller) replicaCopied(msg replicaCopiedMsg) {
	c.copying = false
	m := c.t.mgr
	if msg.err != nil {
		m.m.relocateFailures.Inc()
		m.log.Error("copying a sealed segment to another node failed; trying again", "topic", c.t.uri, "segment", msg.seg, "to", msg.now.Node, "err", msg.err)
		return
	}
	m.damageRepaired(c.t.uri, msg.seg, msg.lost)
	if msg.now == msg.lost {
		// A damaged copy made again in place: the layout names it already.
		m.m.replicaCopies.Inc()
		m.log.Warn("a sealed segment's damaged copy made again from the other replicas", "topic", c.t.uri, "segment", msg.seg, "node", msg.now.Node)
		return
	}
	rec := c.rec
	rec.Layout.Segments = slices.Clone(rec.Layout.Segments)
	i := slices.IndexFunc(rec.Layout.Segments, func(s topology.Segment) bool { return s.ID == msg.seg })
	if i < 0 {
		return
	}
	reps := slices.Clone(rec.Layout.Segments[i].Replicas)
	switch {
	case msg.index == len(reps) && msg.lost == (topology.Replica{}):
		reps = append(reps, msg.now) // a copy more
	case msg.index < len(reps) && reps[msg.index] == msg.lost:
		reps[msg.index] = msg.now
	default:
		return // the layout moved on meanwhile
	}
	rec.Layout.Segments[i].Replicas = reps
	if err := rec.Layout.Validate(); err != nil {
		m.log.Error("a sealed segment's new copy does not make a valid layout; not named", "topic", c.t.uri, "segment", msg.seg, "err", err)
		return
	}
	cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	rev, err := m.meta.UpdateTopic(cctx, c.t.name, rec, c.rev)
	cancel()
	if err != nil {
		m.log.Error("naming a sealed segment's new copy in the layout failed; trying again", "topic", c.t.uri, "segment", msg.seg, "err", err)
		return
	}
	c.rec, c.rev = rec, rev
	if st := c.t.state.Load(); st != nil {
		if next, err := newState(rec.Layout, st.buckets, st.lanes, st.meters, rec.EpochTimes); err == nil {
			c.t.publish(next)
		}
	}
	m.publishLayout(c.t.name, Describe(c.t.uri, rec.Layout))
	m.m.replicaCopies.Inc()
	m.log.Warn("a sealed segment's copy made again on another node", "topic", c.t.uri, "segment", msg.seg, "node", msg.now.Node)
}

// SealedReplicaDir returns the directory of this node's copy of a unit of
// a sealed replicated segment, once its group here is sealed (another
// node copies it from there).
func (m *Manager) SealedReplicaDir(ctx context.Context, key UnitKey, incarnation string) (string, error) {
	// The record as served to other nodes (cached a moment: a copy asks
	// for every chunk).
	sealedCopy := func(rec meta.TopicRecord, s topology.Segment, ok bool) bool {
		return rec.Incarnation == incarnation && ok && s.State == topology.StateSealed && s.ReplicaID(m.cfg.NodeID, m.cfg.Incarnation) > 0
	}
	rec, s, ok, err := m.servedRecordOf(ctx, key.Topic, key.Segment, sealedCopy)
	if err != nil {
		return "", api.Errorf(api.CodeUnavailable, "%s: its record could not be read: %v", key, err)
	}
	if rec.Incarnation != incarnation || !ok || s.State != topology.StateSealed || !replicated(s) || s.ReplicaID(m.cfg.NodeID, m.cfg.Incarnation) == 0 {
		return "", api.Errorf(api.CodeUnavailable, "%s: this node holds no sealed copy of it", key)
	}
	m.store.SetIncarnation(key.Topic, incarnation)
	l, err := m.replicaLog(key, incarnation, s, m.cfg.Defaults.logOptions())
	if err != nil {
		return "", err
	}
	// Its files are read as they are on disk: what the log holds in memory
	// of its tail (its last appends, committed through the node's journal)
	// is written and synced first (nothing to do the next time).
	if err := l.Sync(); err != nil {
		return "", api.Errorf(api.CodeUnavailable, "%s: writing its copy's tail to its file: %v", key, err)
	}
	// And its raft state (its marks: the seal among them) reaches its
	// state file from the node's state journal.
	if g := m.cfg.Replicas.Group(groupName(key, incarnation)); g != nil {
		if err := g.Storage().SaveState(); err != nil {
			return "", api.Errorf(api.CodeUnavailable, "%s: writing its raft state to its file: %v", key, err)
		}
	}
	return l.Dir(), nil
}

// ReplicaCopyDir makes ready the directory a copy of a unit of a sealed
// replicated segment goes to on this node (it holds none: its log and
// group there are closed) and returns it.
func (m *Manager) ReplicaCopyDir(key UnitKey, incarnation string) (string, error) {
	m.stopGroups(key.Topic, int64(key.Segment))
	m.store.CloseSegment(key.Topic, key.Segment)
	m.store.SetIncarnation(key.Topic, incarnation)
	if err := markHosted(m.store.NameDir(key.Topic)); err != nil {
		return "", err
	}
	return m.store.UnitDir(key), nil
}

// ReplicaCopied says that the copy of unit key is in its directory now
// (ReplicaCopyDir's): a damaged copy it replaced is forgotten, and its
// group starts over the copy at its next use.
func (m *Manager) ReplicaCopied(key UnitKey, incarnation string) {
	m.stopGroups(key.Topic, int64(key.Segment))
	m.store.CloseSegment(key.Topic, key.Segment)
	m.forgetDamage(key, incarnation)
}
