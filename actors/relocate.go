package actors

import (
	"context"
	"errors"
	"maps"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/meta"
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
