package actors

import (
	"context"
	"errors"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/topology"
	"github.com/braidmq/braid/wal"
)

// Damage in a copy of a replicated unit. A log reads damaged bytes (a
// flipped bit, a bad sector, a file someone wrote to) as a hole: the
// records in it are lost to that copy. A unit with one copy can only say
// so (OFFSETS_LOST). A replicated unit's records are on its other
// replicas too, so a copy with a hole does not answer for it: the read
// is refused UNAVAILABLE, which sends the reader to another replica, and
// logged at error level and counted (braid_replica_damaged_reads_total).

// damagedCopy turns a hole met reading this node's copy of replicated
// unit key into that refusal; any other error, or none, is returned as
// it is.
func (m *Manager) damagedCopy(key UnitKey, incarnation string, err error) error {
	var hole *wal.HoleError
	if !errors.As(err, &hole) {
		return err
	}
	m.noteDamaged(key, incarnation, err)
	m.m.damagedReads.Inc()
	m.log.Error("a read met damaged records in this node's copy of a replicated unit: refused, another replica answers",
		"unit", key.String(), "lost_from", hole.From, "lost_to", hole.To, "err", err)
	return api.Errorf(api.CodeUnavailable, "%s: node %s's copy is damaged at offsets [%d, %d); read another replica", key, m.cfg.NodeID, hole.From, hole.To)
}

// readPastDamage reads, from the other replicas, what this node's copy
// of replicated segment s could not give for a hole (Topic.Read, at the
// topic's home).
func (t *Topic) readPastDamage(s topology.Segment, bucket int, from uint64, max, maxBytes int) (UnitData, error) {
	ctx, cancel := context.WithTimeout(context.Background(), remoteTimeout)
	defer cancel()
	if maxBytes <= 0 || maxBytes > remoteMaxBytes {
		maxBytes = remoteMaxBytes
	}
	req := UnitRead{Topic: t.name, Incarnation: t.incarnation, Segment: s.ID, Bucket: bucket,
		From: from, Max: max, MaxBytes: maxBytes, Sealed: s.State != topology.StateActive}
	return t.mgr.readReplicasBut(ctx, s, req, t.mgr.cfg.NodeID)
}

// damagedCopyError is the refusal of a replica whose copy lost entries it
// had stored (replica.ErrDamaged): UNAVAILABLE, so that its readers go to
// another replica.
type damagedCopyError struct{ err error }

func (e damagedCopyError) Error() string { return e.err.Error() }
func (e damagedCopyError) Unwrap() error { return e.err }

// homeCopyDamaged has the topic t, homed here, moved to another node
// (Config.MoveOffDamaged) when err says this node's copy of one of its
// units is damaged: its bucket cannot lead the unit's group. At most once
// a minute a topic.
func (m *Manager) homeCopyDamaged(t *Topic, err error) {
	var d damagedCopyError
	if !errors.As(err, &d) || m.cfg.MoveOffDamaged == nil || t == nil {
		return
	}
	m.groupsMu.Lock()
	last, seen := m.damagedHomes[t.uri]
	if seen && time.Since(last) < time.Minute {
		m.groupsMu.Unlock()
		return
	}
	if m.damagedHomes == nil {
		m.damagedHomes = map[string]time.Time{}
	}
	m.damagedHomes[t.uri] = time.Now()
	m.groupsMu.Unlock()
	m.log.Error("this node's copy of a unit of a topic it is the home of is damaged: the topic moves to another node", "topic", t.uri, "err", err)
	go m.cfg.MoveOffDamaged(t.uri)
}
