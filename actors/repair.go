package actors

import (
	"context"
	"errors"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/meta"
	"github.com/braidmq/braid/routing"
	"github.com/braidmq/braid/topology"
	"github.com/braidmq/braid/wal"
)

// Damaged copies made again from their peers. A node that finds its copy
// of a replicated unit damaged (a hole read in it, refused at its start
// for entries it lost, or its replica failed: raft stopped on an entry
// its log could not give, or its log or state could not be written)
// reports it to the topic's home, again every damageReportEvery until the
// copy is made again or no longer this node's (Config.ReportDamaged). The
// home takes a reported copy for lost: an active segment is relocated (its
// groups sealed by the healthy majority, successors with a full set of
// copies), a sealed one is copied from a healthy replica to a node that
// holds no healthy copy — the damaged node itself when no other is free,
// whose damaged directory the copy replaces (repairSealed). The damaged
// copy serves nothing meanwhile (its reads go to the other replicas). A
// damaged copy of the home's own is relocated by the home as a follower's
// is, while its replica still leads (damage found by a read of an older
// file); one that cannot lead (found at its start, or its replica failed)
// has the topic moved to another node (homeCopyDamaged), whose relocation
// seals the unit.

// DamageReport says that node (under its incarnation) holds a damaged
// copy of a unit of a topic's segment.
type DamageReport struct {
	Topic           routing.TopicName
	Incarnation     string // the topic's
	Segment         topology.SegmentID
	Bucket          int
	Node            string
	NodeIncarnation string
	Err             string
}

// damageReportEvery is how often a damaged copy is reported again, and
// damageReportTTL how long the home keeps a report not renewed.
const (
	damageReportEvery = 3 * time.Second
	damageReportTTL   = 30 * time.Second
)

// damageMark is a damaged copy of a unit on this node, being reported.
type damageMark struct {
	incarnation string
	err         string
}

// damageReport is a damaged copy the home was told of.
type damageReport struct {
	replica topology.Replica
	at      time.Time
}

// noteDamaged records that this node's copy of unit key (of the topic's
// incarnation) is damaged, and starts reporting it to the topic's home.
// A log closed under its group is no damage.
func (m *Manager) noteDamaged(key UnitKey, incarnation string, err error) {
	if errors.Is(err, wal.ErrClosed) || m.cfg.ReportDamaged == nil {
		return
	}
	m.groupsMu.Lock()
	if m.damagedUnits == nil {
		m.damagedUnits = map[UnitKey]damageMark{}
	}
	_, known := m.damagedUnits[key]
	m.damagedUnits[key] = damageMark{incarnation: incarnation, err: err.Error()}
	m.groupsMu.Unlock()
	if known {
		return
	}
	m.m.damagedCopies.Inc()
	m.log.Error("this node's copy of a replicated unit is damaged: reported to the topic's home, which has it made again from the other replicas",
		"unit", key.String(), "err", err)
	go m.reportDamage(key, incarnation)
}

// damageMarked says whether unit key's copy here is still marked damaged
// under incarnation.
func (m *Manager) damageMarked(key UnitKey, incarnation string) (damageMark, bool) {
	m.groupsMu.Lock()
	defer m.groupsMu.Unlock()
	d, ok := m.damagedUnits[key]
	return d, ok && d.incarnation == incarnation
}

// forgetDamage drops the damage marks of unit key's copy here (made again,
// or no longer this node's): its group may start again over its files.
func (m *Manager) forgetDamage(key UnitKey, incarnation string) {
	m.groupsMu.Lock()
	defer m.groupsMu.Unlock()
	if d, ok := m.damagedUnits[key]; ok && d.incarnation == incarnation {
		delete(m.damagedUnits, key)
	}
	delete(m.damagedGroups, groupName(key, incarnation))
}

// reportDamage reports unit key's damaged copy to its topic's home until
// it is made again (its mark dropped) or the layout no longer names this
// node among the segment's replicas.
func (m *Manager) reportDamage(key UnitKey, incarnation string) {
	for {
		mark, ok := m.damageMarked(key, incarnation)
		m.mu.RLock()
		closed := m.closed
		m.mu.RUnlock()
		if !ok || closed {
			return
		}
		if !m.reportDamageOnce(key, incarnation, mark) {
			m.forgetDamage(key, incarnation)
			return
		}
		time.Sleep(damageReportEvery)
	}
}

// reportDamageOnce reports unit key's damaged copy to the topic's home
// once; false when there is nothing to report any more (the topic or its
// segment gone, or this node no longer holds one of its copies).
func (m *Manager) reportDamageOnce(key UnitKey, incarnation string, mark damageMark) bool {
	ctx, cancel := context.WithTimeout(context.Background(), remoteTimeout)
	defer cancel()
	rec, _, err := m.meta.Topic(ctx, key.Topic)
	if errors.Is(err, meta.ErrNotFound) {
		return false
	}
	if err != nil {
		return true // the store does not answer now: later
	}
	s, ok := rec.Layout.Segment(key.Segment)
	if rec.Incarnation != incarnation || !ok || s.State == topology.StateDeleted || s.ReplicaID(m.cfg.NodeID, m.cfg.Incarnation) == 0 {
		return false
	}
	home := LayoutOwner(rec.Layout)
	if home == "" {
		return true
	}
	r := DamageReport{Topic: key.Topic, Incarnation: incarnation, Segment: key.Segment, Bucket: key.Bucket,
		Node: m.cfg.NodeID, NodeIncarnation: m.cfg.Incarnation, Err: mark.err}
	if err := m.cfg.ReportDamaged(home, r); err != nil {
		m.log.Warn("reporting a damaged copy to the topic's home failed; trying again", "unit", key.String(), "home", home, "err", err)
	}
	return true
}

// ReplicaDamaged takes a report of a damaged copy of a unit of a topic
// this node is the home of: the copy counts as lost until it is made
// again (checkReplicas, repairSealed).
func (m *Manager) ReplicaDamaged(r DamageReport) error {
	if r.Node == "" || r.Bucket < 0 || r.Bucket >= topology.MaxBuckets {
		return api.Errorf(api.CodeInvalidArgument, "a damage report of %s segment %d bucket %d from %q: bad report", r.Topic, r.Segment, r.Bucket, r.Node)
	}
	uri := r.Topic.String()
	rep := topology.Replica{Node: r.Node, Incarnation: r.NodeIncarnation}
	m.groupsMu.Lock()
	if m.damageReports == nil {
		m.damageReports = map[string]map[topology.SegmentID]damageReport{}
	}
	segs := m.damageReports[uri]
	if segs == nil {
		segs = map[topology.SegmentID]damageReport{}
		m.damageReports[uri] = segs
	}
	old, known := segs[r.Segment]
	segs[r.Segment] = damageReport{replica: rep, at: time.Now()}
	m.groupsMu.Unlock()
	if !known || old.replica != rep {
		m.log.Error("a replica reported its copy of a unit damaged: the copy is made again from the others",
			"topic", uri, "segment", r.Segment, "bucket", r.Bucket, "node", r.Node, "err", r.Err)
	}
	return nil
}

// replicaDamaged says whether replica r of segment seg of topic uri was
// reported damaged lately.
func (m *Manager) replicaDamaged(uri string, seg topology.SegmentID, r topology.Replica) bool {
	m.groupsMu.Lock()
	defer m.groupsMu.Unlock()
	d, ok := m.damageReports[uri][seg]
	return ok && d.replica == r && time.Since(d.at) < damageReportTTL
}

// damageRepaired drops the report of replica r of segment seg of topic
// uri: its copy was made again.
func (m *Manager) damageRepaired(uri string, seg topology.SegmentID, r topology.Replica) {
	m.groupsMu.Lock()
	defer m.groupsMu.Unlock()
	if d, ok := m.damageReports[uri][seg]; ok && d.replica == r {
		delete(m.damageReports[uri], seg)
	}
}

// canLead says whether this node's replicas of segment s of topic t can
// lead their groups: none refused for damage at its start, none failed.
func (m *Manager) canLead(t *Topic, s topology.Segment) bool {
	host := m.cfg.Replicas
	if host == nil {
		return false
	}
	for b := range s.Buckets {
		name := groupName(UnitKey{Topic: t.name, Segment: s.ID, Bucket: b}, t.incarnation)
		m.groupsMu.Lock()
		_, refused := m.damagedGroups[name]
		m.groupsMu.Unlock()
		if refused {
			return false
		}
		if g := host.Group(name); g != nil && g.Err() != nil {
			return false
		}
	}
	return true
}

// copyLost says whether replica r of segment s of the topic counts as
// lost: its node's incarnation is gone, or its copy was reported damaged.
func (c *controller) copyLost(s topology.Segment, r topology.Replica) bool {
	m := c.t.mgr
	return m.cfg.ReplicaLost(r.Node, r.Incarnation) || m.replicaDamaged(c.t.uri, s.ID, r)
}
