package actors

import (
	"context"
	"errors"
	"os"
	"sync"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/meta"
	"github.com/braidmq/braid/routing"
	"github.com/braidmq/braid/topology"
	"github.com/braidmq/braid/wal"
)

// Segments owned by other nodes. A topic's layout may name several owners:
// a segment sealed on a node that was lost (or drained) stays on that
// node's disk, its successor lives here. The active topic reads such a
// segment's bucket logs from their owner (Config.RemoteUnits), and every
// node serves reads of the segments it owns, whether or not it has the
// topic active (ServeUnitRead).

// UnitRead asks for records of one bucket log (or, BoundsOnly, its bounds).
type UnitRead struct {
	Topic       routing.TopicName
	Incarnation string
	Segment     topology.SegmentID
	Bucket      int
	From        uint64
	Max         int
	MaxBytes    int
	BoundsOnly  bool
	// ChecksumTo > 0 asks for a checksum of the records [From,
	// ChecksumTo) instead of the records (VerifyReplicas).
	ChecksumTo uint64
	// Sealed says the asker's layout has the segment sealed: a replica
	// that takes it for active (its layout is stale) refuses the read
	// UNAVAILABLE rather than answer a committed prefix that the asker
	// would take for the sealed unit's end.
	Sealed bool
}

// UnitData answers a UnitRead.
type UnitData struct {
	First, Next uint64
	Bytes       int64 // the log's size on disk
	Records     []wal.Record
	// Checksum answers a ChecksumTo.
	Checksum []byte
}

// RemoteUnits reads and writes bucket logs on the node that owns their
// segment.
type RemoteUnits interface {
	ReadUnit(ctx context.Context, owner string, req UnitRead) (UnitData, error)
	// AppendUnit sends an append to owner and calls done with the offset
	// of its first record, or why it failed, within remoteTimeout.
	// Appends sent to one owner arrive in the order they were sent.
	AppendUnit(owner string, req UnitAppend, done func(first uint64, err error))
	// DropTopic tells owner that the topic was deleted, or with segments
	// that retention deleted those: it removes its logs of them.
	DropTopic(ctx context.Context, owner string, topic routing.TopicName, incarnation string, segments []topology.SegmentID) error
}

// remoteTimeout bounds one read from another node.
const remoteTimeout = 5 * time.Second

// remoteMaxBytes bounds the payload one read from another node returns
// (at least one record all the same).
const remoteMaxBytes = 1 << 20

// remoteBoundsTTL is how long the bounds of a sealed segment's bucket on
// another node are reused: they change only when retention trims it.
const remoteBoundsTTL = 2 * time.Second

// remoteBounds caches the bounds of sealed units read from other nodes.
type remoteBounds struct {
	mu sync.Mutex
	m  map[unitRef]remoteBound
}

type remoteBound struct {
	first, next uint64
	at          time.Time
	// sealed says the segment was sealed when these were read: only such
	// bounds stand for a sealed segment's (an active one's next moves on).
	sealed bool
}

// remoteOwner returns the node that owns segment s when it is another
// one and this node reads it from there.
func (t *Topic) remoteOwner(s topology.Segment) (string, bool) {
	m := t.mgr
	if m.cfg.RemoteUnits == nil || s.Owner == "" || s.Owner == m.cfg.NodeID {
		return "", false
	}
	return s.Owner, true
}

// readRemote reads a unit of segment s from its owner.
func (t *Topic) readRemote(owner string, s topology.Segment, bucket int, from uint64, max, maxBytes int, boundsOnly bool) (UnitData, error) {
	m := t.mgr
	ctx, cancel := context.WithTimeout(context.Background(), remoteTimeout)
	defer cancel()
	if maxBytes <= 0 || maxBytes > remoteMaxBytes {
		maxBytes = remoteMaxBytes // one reply stays well under the transport's message limit
	}
	req := UnitRead{Topic: t.name, Incarnation: t.incarnation, Segment: s.ID, Bucket: bucket,
		From: from, Max: max, MaxBytes: maxBytes, BoundsOnly: boundsOnly, Sealed: s.State != topology.StateActive}
	var d UnitData
	var err error
	if replicated(s) {
		// Any replica serves its committed prefix: the owner first.
		d, err = m.readReplicas(ctx, s, req)
	} else {
		d, err = m.cfg.RemoteUnits.ReadUnit(ctx, owner, req)
	}
	switch {
	case err == nil:
		m.m.remoteReads.WithLabelValues("ok").Inc()
		if boundsOnly || s.State != topology.StateActive {
			t.remote.mu.Lock()
			if t.remote.m == nil {
				t.remote.m = map[unitRef]remoteBound{}
			}
			t.remote.m[unitRef{seg: s.ID, bucket: bucket}] = remoteBound{first: d.First, next: d.Next, at: time.Now(), sealed: s.State != topology.StateActive}
			t.remote.mu.Unlock()
		}
	case api.AsError(err).Code == api.CodeUnavailable:
		m.m.remoteReads.WithLabelValues("unavailable").Inc()
	default:
		m.m.remoteReads.WithLabelValues("error").Inc()
	}
	return d, err
}

// remoteBoundsOf returns the bounds of a sealed unit on another node,
// from the cache when they are fresh.
//
// An active one this node writes to knows its next offset from the
// acknowledgements it got (bucketLane.ackedNext), and its first from the
// cache: its bounds are read there only when the cache is stale.
func (t *Topic) remoteBoundsOf(owner string, s topology.Segment, bucket int) (first, next uint64, err error) {
	u := unitRef{seg: s.ID, bucket: bucket}
	acked := uint64(0)
	if s.State == topology.StateActive {
		if l := t.state.Load().lane(u); l != nil {
			acked = l.ackedNext.Load()
		}
	}
	if s.State != topology.StateActive || acked > 0 {
		t.remote.mu.Lock()
		b, ok := t.remote.m[u]
		t.remote.mu.Unlock()
		switch {
		case !ok || time.Since(b.at) >= remoteBoundsTTL:
		case acked > 0:
			return b.first, max(b.next, acked-1), nil
		case b.sealed:
			return b.first, b.next, nil
		}
	}
	d, err := t.readRemote(owner, s, bucket, 0, 0, 0, true)
	if err == nil && acked > 0 {
		d.Next = max(d.Next, acked-1)
	}
	return d.First, d.Next, err
}

// ServeUnitRead serves another node's read of a bucket log of a segment
// this node owns: through the topic when it is active here, else from the
// log on disk (opened for the read; the sweeper closes it again).
func (m *Manager) ServeUnitRead(ctx context.Context, req UnitRead) (UnitData, error) {
	uri := req.Topic.String()
	if t, ok := m.Active(uri); ok {
		s, err := t.unitSegment(req.Segment, req.Bucket)
		if err != nil {
			return UnitData{}, err
		}
		if req.Sealed && s.State == topology.StateActive && replicated(s) {
			// The asker knows the segment sealed and this node does not:
			// its layout is stale (an old home not yet told its topic
			// moved), and what its copy has committed may end before the
			// seal. Another replica answers.
			return UnitData{}, api.Errorf(api.CodeUnavailable, "segment %d of %s is sealed, but active in node %s's layout of the topic (not up to date); read another replica", req.Segment, uri, m.cfg.NodeID)
		}
		if _, remote := t.remoteOwner(s); remote {
			if replicated(s) && s.ReplicaID(m.cfg.NodeID, m.cfg.Incarnation) > 0 {
				return m.serveReplicaRead(req, s)
			}
			return UnitData{}, api.Errorf(api.CodeUnavailable, "segment %d of %s is owned by node %s, not %s; retry", req.Segment, uri, s.Owner, m.cfg.NodeID)
		}
		d, err := m.readLocal(t.unitLogFor(s, req.Bucket), req)
		if replicated(s) {
			err = m.damagedCopy(UnitKey{Topic: req.Topic, Segment: req.Segment, Bucket: req.Bucket}, t.incarnation, err)
		}
		return d, err
	}
	rec, s, err := m.servedSegment(ctx, req)
	if err != nil {
		return UnitData{}, err
	}
	switch {
	case s.State == topology.StateActive && LayoutOwner(rec.Layout) == m.cfg.NodeID && replicated(s) && s.ReplicaID(m.cfg.NodeID, m.cfg.Incarnation) > 0:
		// This node is the home of a replicated topic not active here
		// (nothing asked for it since it moved here, or it stopped): its
		// copy serves what its group committed, as any other copy does.
		return m.serveReplicaRead(req, s)
	case s.State == topology.StateActive && LayoutOwner(rec.Layout) == m.cfg.NodeID:
		// This node is the topic's home, but the topic is not active
		// here: it is about to be (or the asker's layout is stale).
		return UnitData{}, api.Errorf(api.CodeUnavailable, "segment %d of %s is not being served here yet; retry", req.Segment, uri)
	case req.Bucket < 0 || req.Bucket >= s.Buckets:
		return UnitData{}, api.Errorf(api.CodeInvalidArgument, "segment %d of %s has %d buckets, not %d", req.Segment, uri, s.Buckets, req.Bucket)
	}
	if replicated(s) {
		return m.serveReplicaRead(req, s)
	}
	m.store.SetIncarnation(req.Topic, rec.Incarnation)
	if _, err := os.Stat(m.store.TopicDir(req.Topic)); err != nil && (s.State == topology.StateActive || m.neverHere(rec)) {
		// An active segment placed here that its home wrote nothing to
		// yet; or a sealed one of a topic made after this data directory,
		// which it never got a byte of (moved off at its first append,
		// this node down then).
		return UnitData{}, nil
	} else if err != nil {
		m.log.Error("a segment this node owns has no data here (was the data directory replaced?)", "topic", uri, "segment", req.Segment,
			"dir", m.store.TopicDir(req.Topic), "err", err)
		return UnitData{}, api.Errorf(api.CodeUnavailable, "node %s has no data of %s", m.cfg.NodeID, uri)
	}
	m.noteServed(uri)
	return m.readLocal(func() (*wal.Log, error) {
		return m.store.Log(UnitKey{Topic: req.Topic, Segment: req.Segment, Bucket: req.Bucket}, m.cfg.Defaults.logOptions())
	}, req)
}

// clockSkew bounds how far the clocks of two nodes may differ (the
// leases assume less than a sixth of a lease, 0.67 s by default).
const clockSkew = 2 * time.Second

// neverHere says whether topic rec was made after this node's data
// directory (by more than the nodes' clocks may differ): its absence from
// the directory then means nothing of it was written here, not a lost
// disk.
func (m *Manager) neverHere(rec meta.TopicRecord) bool {
	return !m.cfg.DataSince.IsZero() && !rec.Created.IsZero() && rec.Created.After(m.cfg.DataSince.Add(clockSkew))
}

// servedSegment returns the record of a topic not active here and its
// segment that req reads, which this node must own.
func (m *Manager) servedSegment(ctx context.Context, req UnitRead) (meta.TopicRecord, topology.Segment, error) {
	uri := req.Topic.String()
	mine := func(s topology.Segment) bool {
		if replicated(s) {
			return s.ReplicaID(m.cfg.NodeID, m.cfg.Incarnation) > 0
		}
		return s.Owner == m.cfg.NodeID
	}
	owned := func(rec meta.TopicRecord, s topology.Segment, ok bool) bool {
		return rec.Incarnation == req.Incarnation && ok && s.State != topology.StateDeleted && mine(s)
	}
	rec, s, ok, err := m.servedRecordOf(ctx, req.Topic, req.Segment, owned)
	switch {
	case err != nil:
		return rec, s, err
	case rec.Incarnation != req.Incarnation:
		return rec, s, api.Errorf(api.CodeTopicNotFound, "topic %s was deleted and made again; read its layout again", uri)
	case !ok || s.State == topology.StateDeleted:
		return rec, s, api.Errorf(api.CodeSegmentNotFound, "%s has no segment %d", uri, req.Segment)
	case !mine(s):
		return rec, s, api.Errorf(api.CodeUnavailable, "segment %d of %s is owned by node %q, not %s; retry", req.Segment, uri, s.Owner, m.cfg.NodeID)
	}
	return rec, s, nil
}

// servedRecordOf returns the record of a topic not active here (read at
// most servedRecordTTL ago) and its segment seg, read again once from the
// store when want says the cached one will not do (the segment may be
// newer than the cache).
func (m *Manager) servedRecordOf(ctx context.Context, name routing.TopicName, seg topology.SegmentID,
	want func(rec meta.TopicRecord, s topology.Segment, ok bool) bool) (meta.TopicRecord, topology.Segment, bool, error) {
	rec, err := m.servedRecord(ctx, name)
	if err != nil {
		return rec, topology.Segment{}, false, err
	}
	s, ok := rec.Layout.Segment(seg)
	if want(rec, s, ok) {
		return rec, s, ok, nil
	}
	m.servedMu.Lock()
	delete(m.served, name.String())
	m.servedMu.Unlock()
	if rec, err = m.servedRecord(ctx, name); err != nil {
		return rec, topology.Segment{}, false, err
	}
	s, ok = rec.Layout.Segment(seg)
	return rec, s, ok, nil
}

// servedRecordTTL is how long a topic record read to serve another node's
// reads is reused: the segments it serves are sealed and stay so.
const servedRecordTTL = 5 * time.Second

type servedTopic struct {
	rec     meta.TopicRecord
	read    time.Time
	lastUse time.Time
}

// servedRecord returns the record of a topic not active here, read at
// most servedRecordTTL ago.
func (m *Manager) servedRecord(ctx context.Context, name routing.TopicName) (meta.TopicRecord, error) {
	uri := name.String()
	m.servedMu.Lock()
	st, ok := m.served[uri]
	m.servedMu.Unlock()
	if ok && time.Since(st.read) < servedRecordTTL {
		return st.rec, nil
	}
	rec, _, err := m.meta.Topic(ctx, name)
	switch {
	case errors.Is(err, meta.ErrNotFound):
		return rec, api.Errorf(api.CodeTopicNotFound, "topic %s does not exist", name)
	case err != nil:
		return rec, api.Errorf(api.CodeUnavailable, "topic %s: its record could not be read: %v", name, err)
	}
	m.servedMu.Lock()
	if m.served == nil {
		m.served = map[string]*servedTopic{}
	}
	m.served[uri] = &servedTopic{rec: rec, read: time.Now(), lastUse: time.Now()}
	m.servedMu.Unlock()
	return rec, nil
}

func (m *Manager) noteServed(uri string) {
	m.servedMu.Lock()
	if st := m.served[uri]; st != nil {
		st.lastUse = time.Now()
	}
	m.servedMu.Unlock()
}

// sweepServed closes the logs of topics not active here that served no
// read for idle.
func (m *Manager) sweepServed(idle time.Duration) {
	m.servedMu.Lock()
	var stale []string
	for uri, st := range m.served {
		if time.Since(st.lastUse) > idle {
			stale = append(stale, uri)
			delete(m.served, uri)
		}
	}
	m.servedMu.Unlock()
	for _, uri := range stale {
		name, err := routing.ParseTopic(uri)
		if err != nil {
			continue
		}
		m.mu.RLock()
		busy := m.topics[uri] != nil || m.activating[uri] != nil || m.passivating[uri] != nil
		m.mu.RUnlock()
		if !busy {
			m.stopGroups(name, -1)
			if err := m.store.CloseTopic(name); err != nil {
				m.log.Warn("closing the logs of segments read by other nodes", "topic", uri, "err", err)
			}
		}
	}
}
