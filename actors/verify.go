package actors

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"hash"
	"slices"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/meta"
	"github.com/braidmq/braid/routing"
	"github.com/braidmq/braid/topology"
	"github.com/braidmq/braid/wal"
)

// Replicas compared (topic.verify). For each bucket log of each
// replicated segment, every replica the layout names is asked for the
// bounds of its committed records, then for a checksum of the records all
// of them hold committed, which each computes on its own node: no record
// crosses the network.

// VerifyReplicas compares the replicas of every bucket log of topic
// name's replicated segments.
func (m *Manager) VerifyReplicas(ctx context.Context, name routing.TopicName) (api.TopicVerification, error) {
	name.Scheme = routing.SchemeScalable
	rec, _, err := m.meta.Topic(ctx, name)
	if errors.Is(err, meta.ErrNotFound) {
		return api.TopicVerification{}, api.Errorf(api.CodeTopicNotFound, "topic %s does not exist", name)
	}
	if err != nil {
		return api.TopicVerification{}, api.Errorf(api.CodeUnavailable, "reading the record of %s: %v", name, err)
	}
	v := api.TopicVerification{Topic: name.String(), Epoch: rec.Layout.Epoch, Checks: []api.UnitCheck{}}
	for _, s := range rec.Layout.Segments {
		if !replicated(s) || s.State == topology.StateDeleted {
			continue
		}
		for b := range s.Buckets {
			if err := ctx.Err(); err != nil {
				return v, api.Errorf(api.CodeTimeout, "verifying %s: %v", name, err)
			}
			c := m.verifyUnit(ctx, name, rec, s, b)
			v.Units++
			switch {
			case !c.Agree:
				v.Disagree++
			case slices.ContainsFunc(c.Replicas, func(r api.ReplicaCheck) bool { return r.Error != "" }):
				v.Unanswered++
			}
			v.Checks = append(v.Checks, c)
		}
	}
	v.Agree = v.Disagree == 0 && v.Unanswered == 0
	return v, nil
}

// verifyUnit compares the replicas of bucket b of segment s. Agree is
// false when two replicas that answered differ, or hold no committed
// record in common while one holds any.
func (m *Manager) verifyUnit(ctx context.Context, name routing.TopicName, rec meta.TopicRecord, s topology.Segment, b int) api.UnitCheck {
	c := api.UnitCheck{Segment: uint64(s.ID), Bucket: b, State: string(s.State), Agree: true}
	req := UnitRead{Topic: name, Incarnation: rec.Incarnation, Segment: s.ID, Bucket: b, BoundsOnly: true, Sealed: s.State != topology.StateActive}
	answered := 0
	for _, r := range s.Replicas {
		rc := api.ReplicaCheck{Node: r.Node, Incarnation: r.Incarnation}
		d, err := m.readReplica(ctx, r, req)
		if err != nil {
			rc.Error = err.Error()
		} else {
			rc.First, rc.Next = d.First, d.Next
			if answered == 0 || d.First > c.From {
				c.From = d.First
			}
			if answered == 0 || d.Next < c.To {
				c.To = d.Next
			}
			answered++
		}
		c.Replicas = append(c.Replicas, rc)
	}
	if answered == 0 {
		return c
	}
	if c.To < c.From {
		// Their committed records do not overlap (one's head was
		// trimmed past another's end): nothing to compare, which is a
		// disagreement.
		c.Agree = false
		c.To = c.From
		return c
	}
	empty := hex.EncodeToString(sha256.New().Sum(nil))
	sum := ""
	for i, r := range s.Replicas {
		rc := &c.Replicas[i]
		if rc.Error != "" {
			continue
		}
		if c.From == c.To {
			rc.Checksum = empty
		} else {
			q := req
			q.BoundsOnly, q.From, q.ChecksumTo = false, c.From, c.To
			d, err := m.readReplica(ctx, r, q)
			if err != nil {
				rc.Error = err.Error()
				continue
			}
			rc.Checksum = hex.EncodeToString(d.Checksum)
		}
		if sum == "" {
			sum = rc.Checksum
		} else if rc.Checksum != sum {
			c.Agree = false
		}
	}
	return c
}

// readReplica reads unit req on replica r: this node's own copy, or
// another node's.
func (m *Manager) readReplica(ctx context.Context, r topology.Replica, req UnitRead) (UnitData, error) {
	if r.Node == m.cfg.NodeID {
		if r.Incarnation != m.cfg.Incarnation {
			return UnitData{}, api.Errorf(api.CodeUnavailable, "this node's copy went with its data directory of incarnation %s", r.Incarnation)
		}
		return m.ServeUnitRead(ctx, req)
	}
	if m.cfg.RemoteUnits == nil {
		return UnitData{}, api.Errorf(api.CodeUnavailable, "node %s: no cluster", r.Node)
	}
	return m.cfg.RemoteUnits.ReadUnit(ctx, r.Node, req)
}

// checksumRecords is the SHA-256 of the records [from, to) of l: each
// record's offset, timestamp, key, headers and payload, lengths first.
// Every record of the range must be readable (committed, on disk).
func checksumRecords(l *wal.Log, from, to uint64) ([]byte, error) {
	if to < from {
		return nil, api.Errorf(api.CodeInvalidArgument, "checksum of [%d, %d): an empty range", from, to)
	}
	h := sha256.New()
	for off := from; off < to; {
		recs, err := l.ReadRange(off, int(min(to-off, 1024)), 4<<20)
		if err != nil {
			return nil, api.Errorf(api.CodeUnavailable, "reading %s at %d for a checksum: %v", l.Dir(), off, err)
		}
		if len(recs) == 0 {
			return nil, api.Errorf(api.CodeUnavailable, "%s holds no committed record at %d (asked for a checksum up to %d)", l.Dir(), off, to)
		}
		for _, r := range recs {
			hashRecord(h, off, r)
			off++
		}
	}
	return h.Sum(nil), nil
}

func hashRecord(h hash.Hash, off uint64, r wal.Record) {
	var b [8]byte
	field := func(p []byte) {
		binary.BigEndian.PutUint64(b[:], uint64(len(p)))
		h.Write(b[:])
		h.Write(p)
	}
	binary.BigEndian.PutUint64(b[:], off)
	h.Write(b[:])
	binary.BigEndian.PutUint64(b[:], uint64(r.Timestamp))
	h.Write(b[:])
	field(r.Key)
	binary.BigEndian.PutUint64(b[:], uint64(len(r.Headers)))
	h.Write(b[:])
	for _, hd := range r.Headers {
		field([]byte(hd.Key))
		field(hd.Value)
	}
	field(r.Payload)
}
