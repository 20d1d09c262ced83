package actors

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/braidmq/braid/logstore"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/meta"
	"github.com/braidmq/braid/routing"
	"github.com/braidmq/braid/topology"
	"github.com/braidmq/braid/wal"
)

// Segments placed on other nodes. A topic's controller lives on one node,
// its home: the owner of the active segment covering hash 0 (LayoutOwner).
// The home routes every append of the topic and runs every layout change,
// as on a single node; but a segment it creates may be placed on another
// node (Config.PlaceSegment: the high child of a split goes to the least
// loaded node), whose disk then holds the segment's bucket logs.
//
// The home still runs a bucket actor for each bucket of such a segment —
// it queues, seals, holds, hands over and opens exactly as a local one,
// so the ordering of a layout change is unchanged — but its writes go to
// the owner (remoteWriter): one UnitAppend at a time per bucket, the next
// batch gathering meanwhile, as a local bucket's group commit does. The
// owner writes it to its log and makes it durable per the topic's
// durability (ServeUnitAppend), then answers with its first offset, and
// the home acknowledges the producers. Reads of the segment go to the
// owner too (remote.go).
//
// The owner writes only while its own lease holds (Config.AckFence): once
// the cluster may think it gone, the home may relocate its segments (it
// does so when the owner's lease has lapsed, see checkOwners), and a late
// write must not land in a segment metadata has sealed.

// UnitAppend asks the owner of a segment to append records to one bucket.
type UnitAppend struct {
	Topic       routing.TopicName
	Incarnation string
	Segment     topology.SegmentID
	Bucket      int
	Records     []wal.Record
	Options     wal.Options
	// Deadline is when the home stops waiting for the answer; the owner
	// refuses the append after it (zero: no deadline).
	Deadline time.Time
}

// remoteAppendDeadline is how long the owner may take to start an append
// the home sent; the transport gives up on the answer a little later
// (RemoteUnits.AppendUnit), so an append the owner takes late is one the
// home has not yet answered.
const remoteAppendDeadline = 4 * time.Second

// remoteBatchBytes bounds the records one UnitAppend carries (at least one
// append all the same): one message stays well under the transport's limit.
const remoteBatchBytes = 1 << 20

// remoteWriter writes a bucket's batches to the node that owns its segment,
// one at a time. Its methods are safe for concurrent use.
type remoteWriter struct {
	key   UnitKey
	unit  unitRef
	owner string
	t     *Topic
	// fence is asked before acknowledging (the home's lease); onAck
	// counts what was acknowledged; lane (nil in tests) learns the
	// bucket's next offset.
	fence func() error
	onAck func([]appendReq)
	lane  *bucketLane

	mu       sync.Mutex
	cond     *sync.Cond
	queue    []appendReq
	inflight bool
	// sending is the batch in flight, seq counts the batches sent (an
	// answer to an older one than seq is for an abandoned batch), and
	// dead, once set, fails every append at once (abandon).
	sending []appendReq
	seq     uint64
	dead    error
}

func newRemoteWriter(key UnitKey, owner string, t *Topic, fence func() error, onAck func([]appendReq)) *remoteWriter {
	w := &remoteWriter{key: key, unit: unitRef{key.Segment, key.Bucket}, owner: owner, t: t, fence: fence, onAck: onAck}
	w.cond = sync.NewCond(&w.mu)
	return w
}

// submit queues appends; they are sent once the batch in flight is
// answered.
func (w *remoteWriter) submit(reqs []appendReq) {
	w.mu.Lock()
	if w.dead != nil {
		err := w.dead
		w.mu.Unlock()
		settleAll(w.unit, reqs, err)
		return
	}
	w.queue = append(w.queue, reqs...)
	if w.inflight {
		w.mu.Unlock()
		return
	}
	batch, seq := w.takeLocked()
	w.mu.Unlock()
	w.send(batch, seq)
}

// takeLocked takes the next batch off the queue (up to remoteBatchBytes)
// and marks it in flight.
func (w *remoteWriter) takeLocked() ([]appendReq, uint64) {
	n, size := 0, 0
	for n < len(w.queue) && (n == 0 || size < remoteBatchBytes) {
		for _, r := range w.queue[n].records {
			size += len(r.Key) + len(r.Payload) + 16
		}
		n++
	}
	batch := w.queue[:n:n]
	w.queue = w.queue[n:]
	w.inflight = true
	w.sending = batch
	w.seq++
	return batch, w.seq
}

func (w *remoteWriter) send(batch []appendReq, seq uint64) {
	var recs []wal.Record
	for i := range batch {
		recs = append(recs, batch[i].records...)
	}
	m := w.t.mgr
	m.cfg.RemoteUnits.AppendUnit(w.owner, UnitAppend{Topic: w.key.Topic, Incarnation: w.t.incarnation, Segment: w.key.Segment,
		Bucket: w.key.Bucket, Records: recs, Options: *w.t.opts.Load(), Deadline: time.Now().Add(remoteAppendDeadline)}, func(first uint64, err error) {
		w.mu.Lock()
		if w.seq != seq || w.dead != nil {
			w.mu.Unlock()
			return // abandoned: answered already
		}
		w.sending = nil
		w.mu.Unlock()
		if err != nil {
			m.m.remoteAppends.WithLabelValues("failed").Inc()
			settleAll(w.unit, batch, err)
		} else {
			m.m.remoteAppends.WithLabelValues("ok").Inc()
			if w.lane != nil {
				next := first + uint64(len(recs)) + 1
				for cur := w.lane.ackedNext.Load(); cur < next && !w.lane.ackedNext.CompareAndSwap(cur, next); cur = w.lane.ackedNext.Load() {
				}
			}
			logstore.Ack(w.key, batch, first, w.fence)
			w.onAck(batch)
		}
		w.mu.Lock()
		if len(w.queue) == 0 || w.dead != nil {
			w.inflight = false
			w.cond.Broadcast()
			w.mu.Unlock()
			return
		}
		next, nseq := w.takeLocked()
		w.mu.Unlock()
		w.send(next, nseq)
	})
}

// abandon answers, with err, the batch in flight and everything queued,
// and from then on every append at once: the owner is gone (its lease
// lapsed, so it writes nothing more), and the segment is being moved; its
// answers are not waited for. With a nil err it revives the writer (the
// move failed).
func (w *remoteWriter) abandon(err error) {
	w.mu.Lock()
	if err == nil || w.dead != nil {
		if err == nil {
			w.dead = nil // revived: the segment did not move
		}
		w.mu.Unlock()
		return
	}
	w.dead = err
	failed := append(w.sending, w.queue...)
	w.sending, w.queue, w.inflight = nil, nil, false
	w.cond.Broadcast()
	w.mu.Unlock()
	settleAll(w.unit, failed, err)
}

func settleAll(u unitRef, reqs []appendReq, err error) {
	for i := range reqs {
		reqs[i].settle(u, 0, err)
	}
}

// drain waits until every submitted append is answered.
func (w *remoteWriter) drain() {
	w.mu.Lock()
	for w.inflight || len(w.queue) > 0 {
		w.cond.Wait()
	}
	w.mu.Unlock()
}

// hostedUnit serializes the writes of one bucket log this node holds for
// another node's topic.
type hostedUnit struct {
	mu sync.Mutex
	w  *logstore.Writer
	// checked is when the topic's record last said this node owns the
	// segment, active.
	checked time.Time
	used    time.Time
}

// hostedCheckEvery is how often a hosted unit checks, against the topic's
// record, that its segment is still active and owned here.
const hostedCheckEvery = servedRecordTTL

// ServeUnitAppend appends records a topic's home sent for a bucket of a
// segment this node owns, makes them durable per the topic's durability,
// and returns the offset of the first. An append of no records is a hold
// (holdLogs): it creates the unit's log and returns its next offset. It
// refuses, writing nothing, while this node's lease does not hold, and
// when the topic's record says the segment is not active and owned here.
func (m *Manager) ServeUnitAppend(ctx context.Context, req UnitAppend) (uint64, error) {
	if f := m.cfg.AckFence; f != nil {
		if err := f(); err != nil {
			return 0, err
		}
	}
	if !req.Deadline.IsZero() && time.Now().After(req.Deadline) {
		// Delivered late (this node was stopped, say): its home has told
		// its producers it failed, and may have moved the segment since.
		m.m.lateAppends.Inc()
		return 0, api.Errorf(api.CodeUnavailable, "append to segment %d of %s arrived after its deadline; refused", req.Segment, req.Topic)
	}
	key := UnitKey{Topic: req.Topic, Segment: req.Segment, Bucket: req.Bucket}
	m.hostedMu.Lock()
	if m.hosted == nil {
		m.hosted = map[UnitKey]*hostedUnit{}
	}
	h := m.hosted[key]
	if h == nil {
		h = &hostedUnit{}
		m.hosted[key] = h
	}
	m.hostedMu.Unlock()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.used = time.Now()
	if time.Since(h.checked) > hostedCheckEvery {
		if err := m.checkHosted(ctx, req); err != nil {
			h.w = nil
			return 0, err
		}
		h.checked = time.Now()
	}
	if h.w == nil {
		if err := markHosted(m.store.NameDir(req.Topic)); err != nil {
			return 0, api.Errorf(api.CodeUnavailable, "%s: %v", key, err)
		}
		l, err := m.store.Log(key, req.Options)
		if err != nil {
			return 0, api.Errorf(api.CodeUnavailable, "%s: %v", key, err)
		}
		h.w = m.store.NewWriter(key, l, req.Options, m.log)
	}
	l, err := h.w.Writable()
	if err != nil {
		return 0, err
	}
	if len(req.Records) == 0 {
		// A hold (see holdLogs): the unit's log now exists here.
		return l.NextOffset(), nil
	}
	first, err := l.Write(req.Records...)
	if err == nil {
		_, err = l.Commit()
	}
	if err != nil {
		return 0, h.w.Failed(l, err)
	}
	if !req.Deadline.IsZero() && time.Now().After(req.Deadline) {
		// Written, but the home has given up on it: it stays (at least
		// once), unacknowledged.
		m.m.lateAppends.Inc()
	}
	n := 0
	for _, r := range req.Records {
		n += len(r.Key) + len(r.Payload)
	}
	m.m.nodeBytes.Add(uint64(n))
	return first, nil
}

// markHosted puts the hostedMarker in a topic's name directory.
func markHosted(dir string) error {
	path := filepath.Join(dir, hostedMarker)
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, nil, 0o644)
}

// checkHosted checks against the topic's record (read at most
// servedRecordTTL ago, again when it does not say so) that this node owns
// the segment of req, active.
func (m *Manager) checkHosted(ctx context.Context, req UnitAppend) error {
	mine := func(rec meta.TopicRecord, s topology.Segment, ok bool) bool {
		return rec.Incarnation == req.Incarnation && ok && s.State == topology.StateActive && s.Owner == m.cfg.NodeID
	}
	rec, s, ok, err := m.servedRecordOf(ctx, req.Topic, req.Segment, mine)
	switch {
	case err != nil:
		return err
	case rec.Incarnation != req.Incarnation:
		return api.Errorf(api.CodeTopicNotFound, "topic %s was deleted and made again", req.Topic)
	case !ok || s.State != topology.StateActive || s.Owner != m.cfg.NodeID:
		return api.Errorf(api.CodeSegmentSealed, "segment %d of %s is not active on node %s (layout epoch %d)", req.Segment, req.Topic, m.cfg.NodeID, rec.Layout.Epoch)
	case req.Bucket < 0 || req.Bucket >= s.Buckets:
		return api.Errorf(api.CodeInvalidArgument, "segment %d of %s has %d buckets, not %d", req.Segment, req.Topic, s.Buckets, req.Bucket)
	}
	m.store.SetIncarnation(req.Topic, rec.Incarnation)
	m.noteServed(req.Topic.String())
	return nil
}

// forgetHosted drops what this node knows of the units it holds for other
// nodes' topics: each is checked against its topic's record again at its
// next append (after this node's lease lapsed, its segments may have
// moved).
func (m *Manager) forgetHosted() {
	m.hostedMu.Lock()
	m.hosted = nil
	m.hostedMu.Unlock()
	m.servedMu.Lock()
	m.served = nil
	m.servedMu.Unlock()
}

// HostedSegments counts the segments of other nodes' topics this node
// wrote to within the last window.
func (m *Manager) HostedSegments(window time.Duration) int {
	type seg struct {
		topic routing.TopicName
		id    topology.SegmentID
	}
	seen := map[seg]bool{}
	m.hostedMu.Lock()
	for k, h := range m.hosted {
		if h.mu.TryLock() {
			if time.Since(h.used) < window {
				seen[seg{k.Topic, k.Segment}] = true
			}
			h.mu.Unlock()
		} else {
			seen[seg{k.Topic, k.Segment}] = true
		}
	}
	m.hostedMu.Unlock()
	return len(seen)
}

// sweepHosted forgets the hosted units unused for idle (their logs are
// closed with the served topics', see sweepServed).
func (m *Manager) sweepHosted(idle time.Duration) {
	m.hostedMu.Lock()
	defer m.hostedMu.Unlock()
	for k, h := range m.hosted {
		if h.mu.TryLock() {
			if time.Since(h.used) > idle {
				delete(m.hosted, k)
			}
			h.mu.Unlock()
		}
	}
}

// DropTopic removes this node's logs of a topic its home deleted: only
// once the topic's record is gone (a topic made again under the name since
// is another incarnation, whose logs are kept), and not while it is active
// here. With segments, it removes the logs of those segments only, once
// the record says they are deleted (retention).
func (m *Manager) DropTopic(ctx context.Context, name routing.TopicName, incarnation string, segments []topology.SegmentID) error {
	if _, ok := m.Active(name.String()); ok {
		return nil
	}
	rec, _, err := m.meta.Topic(ctx, name)
	switch {
	case err == nil && rec.Incarnation != incarnation:
		return nil // made again since: its logs are another topic's now
	case err == nil && len(segments) > 0:
		m.store.SetIncarnation(name, rec.Incarnation)
		return m.dropSegments(name, rec.Layout, segments)
	case err == nil:
		return api.Errorf(api.CodeLayoutRefused, "topic %s still exists", name)
	case !errors.Is(err, meta.ErrNotFound):
		return api.Errorf(api.CodeUnavailable, "topic %s: its record could not be read: %v", name, err)
	}
	m.hostedMu.Lock()
	for k := range m.hosted {
		if k.Topic == name {
			delete(m.hosted, k)
		}
	}
	m.hostedMu.Unlock()
	m.servedMu.Lock()
	delete(m.served, name.String())
	m.servedMu.Unlock()
	m.stopGroups(name, -1)
	if err := m.store.RemoveTopic(name); err != nil {
		return api.Errorf(api.CodeInternal, "remove logs of %s: %v", name, err)
	}
	m.log.Info("logs of a topic deleted on another node removed", "topic", name.String())
	return nil
}

// dropSegments removes the logs of the segments of topic name that l says
// are deleted.
func (m *Manager) dropSegments(name routing.TopicName, l topology.Layout, segments []topology.SegmentID) error {
	for _, id := range segments {
		if s, ok := l.Segment(id); !ok || s.State != topology.StateDeleted {
			return api.Errorf(api.CodeLayoutRefused, "segment %d of %s is not deleted", id, name)
		}
	}
	for _, id := range segments {
		m.hostedMu.Lock()
		for k := range m.hosted {
			if k.Topic == name && k.Segment == id {
				delete(m.hosted, k)
			}
		}
		m.hostedMu.Unlock()
		m.stopGroups(name, int64(id))
		if err := m.store.RemoveSegment(name, id); err != nil {
			return api.Errorf(api.CodeInternal, "remove logs of segment %d of %s: %v", id, name, err)
		}
	}
	m.log.Info("logs of segments retention deleted removed", "topic", name.String(), "segments", segments)
	return nil
}

// holdTimeout bounds a hold's wait for the owner's answer.
const holdTimeout = 2 * time.Second

// holdLogs makes sure the owners of those of segs (in layout l of topic
// name) placed on other nodes hold their logs, before the segments are
// sealed: an append of no records to bucket 0 of each, which creates the
// topic's directory and the unit's log there. A segment placed elsewhere
// is written there only when a record reaches it; one sealed before any
// did would otherwise have nothing on its owner's disk, which a read then
// takes for a lost data directory (ServeUnitRead), and a subscription
// could never pass it. Owners that are gone (Config.Evict) are passed by
// when skipGone. A hold that fails is logged and counted, and the change
// goes on: the owner not answering is what a relocation handles.
func (m *Manager) holdLogs(name routing.TopicName, incarnation string, opts wal.Options, l topology.Layout, segs []topology.SegmentID, skipGone bool) {
	if m.cfg.RemoteUnits == nil {
		return
	}
	type hold struct {
		seg   topology.SegmentID
		owner string
		done  chan error
	}
	var holds []hold
	for _, id := range segs {
		s, ok := l.Segment(id)
		if !ok || s.Owner == "" || s.Owner == m.cfg.NodeID || replicated(s) {
			continue // a replicated unit's log is made by its group, on every replica
		}
		if skipGone && m.cfg.Evict != nil {
			if _, gone := m.cfg.Evict(s.Owner); gone {
				continue
			}
		}
		h := hold{seg: id, owner: s.Owner, done: make(chan error, 1)}
		m.cfg.RemoteUnits.AppendUnit(s.Owner, UnitAppend{Topic: name, Incarnation: incarnation, Segment: id, Bucket: 0,
			Options: opts, Deadline: time.Now().Add(holdTimeout)}, func(_ uint64, err error) { h.done <- err })
		holds = append(holds, h)
	}
	timeout := time.NewTimer(holdTimeout + 500*time.Millisecond)
	defer timeout.Stop()
	for _, h := range holds {
		var err error
		select {
		case err = <-h.done:
		case <-timeout.C:
			err = errors.New("no answer in time")
		}
		if err != nil {
			m.m.remoteAppends.WithLabelValues("failed").Inc()
			m.log.Error("the owner of a segment being sealed could not be told to hold its logs: reads of it fail there unless records reached it",
				"topic", name.String(), "segment", h.seg, "owner", h.owner, "err", err)
			continue
		}
		m.m.remoteAppends.WithLabelValues("ok").Inc()
	}
}
