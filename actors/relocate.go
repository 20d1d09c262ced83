package actors

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/meta"
	"github.com/braidmq/braid/replica"
	"github.com/braidmq/braid/routing"
	"github.com/braidmq/braid/topology"
)

// Relocation: a node that is gone (its lease lapsed) cannot seal its own
// segments, so another node does it in metadata. Relocate seals, in one
// compare-and-swap of the topic's record, every active segment the lost
// node owns and gives each a successor with its range on node to (see
// topology.Layout.Relocate). No node serves the topic meanwhile: its
// owner is gone, and the others do not activate a topic they do not own.
// The new owner activates it from the new record; the sealed segments
// stay on the lost node's disk and are read there when it comes back.
//
// The caller must know that from takes no more appends: its lease, less
// the margin it fences itself by, has run out.

// Relocate moves the active segments of topic name that node from owns to
// node to. It returns the new layout's epoch and the successors made, or
// none when from owns no active segment of the topic any more (another
// node relocated them first, or from never did).
func (m *Manager) Relocate(ctx context.Context, name routing.TopicName, from, to string) (uint64, []topology.SegmentID, error) {
	if _, active := m.Active(name.String()); active && from == m.cfg.NodeID {
		return 0, nil, api.Errorf(api.CodeLayoutRefused, "topic %s is active on this node: MoveOut moves its segments", name)
	}
	return m.relocate(ctx, name, from, to)
}

// relocate is Relocate on a topic known not to be active on from.
func (m *Manager) relocate(ctx context.Context, name routing.TopicName, from, to string) (uint64, []topology.SegmentID, error) {
	for attempt := 0; ; attempt++ {
		rec, rev, err := m.meta.Topic(ctx, name)
		if errors.Is(err, meta.ErrNotFound) {
			return 0, nil, api.Errorf(api.CodeTopicNotFound, "topic %s does not exist", name)
		}
		if err != nil {
			return 0, nil, api.Errorf(api.CodeUnavailable, "topic %s: its record could not be read: %v", name, err)
		}
		ids := rec.Layout.OwnedActive(from)
		if len(ids) == 0 {
			return rec.Layout.Epoch, nil, nil
		}
		// A node drained holds the sealed segments on: it must hold
		// their logs (holdLogs), also of those nothing reached yet.
		m.holdLogs(name, rec.Incarnation, m.cfg.Defaults.logOptions(), rec.Layout, ids, true)
		first := rec.Layout.NextID
		next, err := rec.Layout.Relocate(ids, to)
		if err != nil {
			return 0, nil, layoutError(err)
		}
		successors := make([]topology.SegmentID, len(ids))
		for i := range successors {
			successors[i] = first + topology.SegmentID(i)
		}
		next = m.withReplicas(name.String(), next, successors, to, m.resolve(rec.Policies, m.namespacePolicies(ctx, name)).ReplicationFactor)
		rec.Layout = next
		rec.EpochTimes = maps.Clone(rec.EpochTimes)
		if rec.EpochTimes == nil {
			rec.EpochTimes = map[uint64]int64{}
		}
		rec.EpochTimes[next.Epoch] = time.Now().UnixMilli()
		pruneEpochTimes(next, rec.EpochTimes)
		_, err = m.meta.UpdateTopic(ctx, name, rec, rev)
		switch {
		case err == nil:
			created := make([]topology.SegmentID, len(ids))
			for i := range created {
				created[i] = first + topology.SegmentID(i)
			}
			m.m.relocated.Add(float64(len(ids)))
			m.sealAfterRelocation(name, rec.Incarnation, next, ids)
			m.log.Warn("segments sealed in metadata; successors placed on another node",
				"topic", name.String(), "from", from, "to", to, "epoch", next.Epoch, "sealed", ids, "successors", created)
			return next.Epoch, created, nil
		case errors.Is(err, meta.ErrConflict) && attempt < 3:
			continue // changed meanwhile (relocated by another node?): look again
		default:
			return 0, nil, api.Errorf(api.CodeUnavailable, "relocating %s: %v", name, err)
		}
	}
}

// MoveOut moves the active segments this node owns of topic name to node
// to (a drain): while it does, the topic is not activated here and its
// appends are refused with SEGMENT_SEALED naming the epoch the move
// commits (producers refresh the layout and resend: nothing refused is
// stored); the topic is stopped, which answers every append it took;
// then its record is relocated. The new owner activates it on its next
// request.
func (m *Manager) MoveOut(ctx context.Context, name routing.TopicName, to string) (uint64, []topology.SegmentID, error) {
	uri := name.String()
	rec, _, err := m.meta.Topic(ctx, name)
	if errors.Is(err, meta.ErrNotFound) {
		return 0, nil, api.Errorf(api.CodeTopicNotFound, "topic %s does not exist", name)
	}
	if err != nil {
		return 0, nil, api.Errorf(api.CodeUnavailable, "topic %s: its record could not be read: %v", name, err)
	}
	if len(rec.Layout.OwnedActive(m.cfg.NodeID)) == 0 {
		return rec.Layout.Epoch, nil, nil
	}
	m.mu.Lock()
	if m.moving == nil {
		m.moving = map[string]uint64{}
	}
	m.moving[uri] = rec.Layout.Epoch + 1
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.moving, uri)
		m.mu.Unlock()
	}()
	// Stop it, after any activation or passivation under way: none
	// starts again while it is marked moving.
	for {
		m.mu.RLock()
		t, closed := m.topics[uri], m.closed
		wait := m.activating[uri]
		if wait == nil {
			wait = m.passivating[uri]
		}
		m.mu.RUnlock()
		switch {
		case closed:
			return 0, nil, api.Errorf(api.CodeUnavailable, "the server is shutting down")
		case wait != nil:
			<-wait
		case t != nil:
			m.stopTopic(t, 0, true)
		default:
			return m.relocate(ctx, name, m.cfg.NodeID, to)
		}
	}
}

// movingError is the refusal of a topic being moved away, or nil.
func (m *Manager) movingError(uri string) error {
	if epoch, ok := m.moving[uri]; ok {
		return api.SealedError(0, epoch)
	}
	return nil
}

// ReleaseAll stops every active topic, whatever it is doing, so that the
// next request reads its record again: a node whose lease ran out does
// this before it takes appends again, since another node may have moved
// any of its topics meanwhile (and the store may not answer to say which).
// It returns the topics stopped.
func (m *Manager) ReleaseAll() []string {
	m.forgetHosted()
	var stopped []string
	for _, t := range m.All() {
		if m.stopTopic(t, 0, true) {
			stopped = append(stopped, t.uri)
		}
	}
	return stopped
}

// ErrNotReplicatedHere: a segment SealSilentOwner was to seal has no
// replica on this node (or is not replicated at all).
var ErrNotReplicatedHere = errors.New("not replicated on this node: it moves when its owner's lease lapses")

// SealSilentOwner seals, from this node's replicas, the raft groups of
// every active segment of topic name that node lost owns: the fence that
// lets another node relocate them before lost's lease lapses, once its
// raft peers take it for down. Once a seal is committed on a majority,
// lost can acknowledge nothing more in that unit, even if it is alive
// and cut off; what it committed before is the unit's end, which every
// replica agrees on. Every such segment must be replicated with a copy
// on this node (under its incarnation), and a majority of each unit's
// replicas must answer; else nothing is relocated early (the lease
// decides). It returns once every unit is sealed, or fails.
func (m *Manager) SealSilentOwner(ctx context.Context, name routing.TopicName, lost string) error {
	rec, _, err := m.meta.Topic(ctx, name)
	if err != nil {
		return api.Errorf(api.CodeUnavailable, "topic %s: its record could not be read: %v", name, err)
	}
	var segs []topology.Segment
	for _, id := range rec.Layout.OwnedActive(lost) {
		s, _ := rec.Layout.Segment(id)
		if !replicated(s) || s.ReplicaID(m.cfg.NodeID, m.cfg.Incarnation) == 0 {
			return fmt.Errorf("segment %d of %s: %w", id, name, ErrNotReplicatedHere)
		}
		segs = append(segs, s)
	}
	errs := make(chan error)
	units := 0
	for _, s := range segs {
		for b := range s.Buckets {
			units++
			go func() {
				key := UnitKey{Topic: name, Segment: s.ID, Bucket: b}
				errs <- m.sealUnit(ctx, key, rec.Incarnation, s, lost)
			}()
		}
	}
	var first error
	for range units {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// sealUnit takes the lead of unit key's group on this node's replica
// instead of node lost's, and seals it. The lead is never handed over by
// lost's replica: if it leads the group as this replica knows it, lost
// spoke since this node took it for down, and nothing is sealed (a node
// whose raft messages were late here, or did not come for a while across
// a partition that healed, is not robbed of its topic: with its peers
// that hear it, raft keeps it leading).
func (m *Manager) sealUnit(ctx context.Context, key UnitKey, incarnation string, s topology.Segment, lost string) error {
	m.store.SetIncarnation(key.Topic, incarnation)
	if s.Owner != m.cfg.NodeID {
		if err := markHosted(m.store.NameDir(key.Topic)); err != nil {
			return api.Errorf(api.CodeInternal, "%s: %v", key, err)
		}
	}
	l, err := m.replicaLog(key, incarnation, s, m.cfg.Defaults.logOptions())
	if err != nil {
		return err
	}
	g, err := m.startGroup(key, incarnation, s, l)
	if err != nil {
		return err
	}
	if _, ok := g.Sealed(); ok {
		return nil
	}
	wait := replicaLeadTimeout
	if dl, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(dl))
	}
	var lostID uint64
	for i, r := range s.Replicas {
		if r.Node == lost {
			lostID = uint64(i + 1)
		}
	}
	if err := g.LeadInstead(wait, lostID); errors.Is(err, replica.ErrLeaderAlive) {
		return api.Errorf(api.CodeUnavailable, "%s: node %s leads its group again: not lost", key, lost)
	} else if err != nil {
		return api.Errorf(api.CodeUnavailable, "%s: no majority of its replicas answers: %v", key, err)
	}
	select {
	case <-g.Seal().Done():
	case <-ctx.Done():
		return api.Errorf(api.CodeUnavailable, "%s: its seal was not committed in time", key)
	}
	if _, ok := g.Sealed(); !ok {
		return api.Errorf(api.CodeUnavailable, "%s: its seal was not committed (another replica took the lead?)", key)
	}
	return nil
}

// SilentHomeTopics lists the replicated topics this node should move off
// node, which its raft peers take for down (silent: it says so for any
// node): topics with a replica here that share a group with node, whose
// record names node their home, and whose home segment's first replica
// after node that is not silent is this node's (one node moves each
// topic; the others wait for it, or for a request).
func (m *Manager) SilentHomeTopics(ctx context.Context, node string, silent func(string) bool) []routing.TopicName {
	if m.cfg.Replicas == nil {
		return nil
	}
	seen := map[string]bool{}
	var out []routing.TopicName
	for _, g := range m.cfg.Replicas.Groups("") {
		if !g.HasPeerOn(node) {
			continue
		}
		key, _, err := parseGroupName(g.Name())
		if err != nil || seen[key.Topic.String()] {
			continue
		}
		seen[key.Topic.String()] = true
		rec, _, err := m.meta.Topic(ctx, key.Topic)
		if err != nil || LayoutOwner(rec.Layout) != node {
			continue
		}
		for _, s := range rec.Layout.Segments {
			if s.State != topology.StateActive || s.Range.Lo != 0 {
				continue
			}
			for _, r := range s.Replicas {
				if r.Node == node || silent(r.Node) {
					continue
				}
				if r.Node == m.cfg.NodeID && r.Incarnation == m.cfg.Incarnation {
					out = append(out, key.Topic)
				}
				break
			}
		}
	}
	return out
}
