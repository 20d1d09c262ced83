package actors

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/braidmq/braid/compaction"
	"github.com/braidmq/braid/meta"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/routing"
	"github.com/braidmq/braid/scaling"
	"github.com/braidmq/braid/topology"
	"github.com/braidmq/braid/wal"
)

// topicState is an immutable snapshot of a topic, swapped as a whole by its
// controller on every layout change. Producers and readers load it without
// locks.
type topicState struct {
	layout topology.Layout
	table  *routing.Table
	// buckets holds the bucket PIDs of every active segment, lanes their
	// lanes (see bucketLane), index for index.
	buckets map[topology.SegmentID][]*actor.PID
	lanes   map[topology.SegmentID][]*bucketLane
	// created holds the creation epoch of every active segment.
	created map[topology.SegmentID]uint64
	// meters holds the load meter of every active segment.
	meters map[topology.SegmentID]*segmentMeter
	// epochTimes holds when each epoch of the layout was committed (unix
	// ms); see meta.TopicRecord.EpochTimes.
	epochTimes map[uint64]int64
	// changed is closed when this snapshot is replaced.
	changed chan struct{}
	deleted bool
	// passivated is set on the last snapshot of a topic being stopped
	// for idleness: look the topic up again (see activation.go).
	passivated bool
}

// Topic is the node-local handle of one topic. It implements the
// consumers.Source interface.
type Topic struct {
	name routing.TopicName
	uri  string
	mgr  *Manager
	pid  *actor.PID // controller
	// opts are the log options of the resolved policies; segments created
	// after a policy change get the new ones.
	opts  atomic.Pointer[wal.Options]
	rr    routing.RoundRobin
	state atomic.Pointer[topicState]
	// ready is closed when the controller published the first snapshot.
	ready     chan struct{}
	readyOnce sync.Once
	// maxPayload is the resolved max_payload_bytes policy.
	maxPayload atomic.Int64
	// underReplicated counts the topic's segments with fewer live copies
	// than its replication factor, at its home's last check
	// (countUnderReplicated).
	underReplicated atomic.Int64
	// policies is the topic's own policies (the topic record's), nsPolicies
	// its namespace's, policy the resolved scaling policy. The controller
	// and the policy endpoints store them; the scaler reads them.
	policies   atomic.Pointer[api.Policies]
	nsPolicies atomic.Pointer[api.Policies]
	policy     atomic.Pointer[scaling.Policy]
	// sealing is the layout change under way: the segments it sealed and
	// the epoch of its layout, from the seal until the layout is published
	// or the change rolled back. A restarted bucket reads it (sealedIn).
	sealing atomic.Pointer[sealingChange]
	// routeMu orders routing against layout changes: the produce path
	// holds it shared from loading the snapshot until its appends are in
	// the buckets' mailboxes; a layout change publishes its snapshot
	// holding it exclusively, so that afterwards no append routed by the
	// older snapshot is still on its way.
	routeMu sync.RWMutex
	// storage counts what the storage worker did to the topic's logs.
	storage StorageCounts
	// load is the active segments' load at the scaler's last evaluation.
	load atomic.Pointer[[]api.SegmentLoad]
	// compaction is the topic's compaction record as this node last read
	// or wrote it (nil: not read yet); compacted caches the readers of its
	// units' compacted logs.
	compaction  atomic.Pointer[meta.CompactionRecord]
	compactedMu sync.Mutex
	// partClients are the clients that addressed partitions (partitions.go).
	partClients partitionClients
	compacted   map[string]*compaction.LogReader
	// lastUse is when the topic was last used (unix ns; see touch).
	lastUse atomic.Int64
	// incarnation is the record's (see LogStore); remote caches the
	// bounds of sealed units read from other nodes (remote.go).
	incarnation string
	remote      remoteBounds
}

// publishQuiesced publishes st once no produce call is routing by the
// snapshot it replaces (see routeMu).
func (t *Topic) publishQuiesced(st *topicState) {
	t.routeMu.Lock()
	t.publish(st)
	t.routeMu.Unlock()
}

// sealingChange is a layout change between its seal and its publish.
type sealingChange struct {
	segments []topology.SegmentID
	epoch    uint64
}

// setSealing records the change under way (nil segments: none).
func (t *Topic) setSealing(segs []topology.SegmentID, epoch uint64) {
	if len(segs) == 0 {
		t.sealing.Store(nil)
		return
	}
	t.sealing.Store(&sealingChange{segments: slices.Clone(segs), epoch: epoch})
}

// sealedAt is the epoch at which seg is sealed: by the current layout, or
// by the layout change under way; 0 while it is active. The buckets of a
// topic's first segments start before the topic publishes its first state
// (which then has them active).
func (t *Topic) sealedAt(seg topology.SegmentID) uint64 {
	if st := t.state.Load(); st != nil {
		if s, ok := st.layout.Segment(seg); ok && s.State != topology.StateActive {
			return s.SealedEpoch
		}
	}
	return t.sealingEpoch(seg)
}

// sealingEpoch returns the epoch of the change under way if it seals seg,
// else 0.
func (t *Topic) sealingEpoch(seg topology.SegmentID) uint64 {
	if ch := t.sealing.Load(); ch != nil && slices.Contains(ch.segments, seg) {
		return ch.epoch
	}
	return 0
}

// Policy is the topic's resolved scaling policy.
func (t *Topic) Policy() scaling.Policy { return *t.policy.Load() }

// Name is the topic's parsed name.
func (t *Topic) Name() routing.TopicName { return t.name }

// Topic is the topic URI.
func (t *Topic) Topic() string { return t.uri }

// Layout is the current layout.
//
// A handle of a topic stopped since (passivated, released, moved: a
// consumer group keeps its handle) reads the topic as it is now, so that
// its holder sees the layout changes made after the stop.
func (t *Topic) Layout() topology.Layout { return t.current().state.Load().layout }

// current returns the live topic of t's name when t was stopped (looking
// it up, activating it), or t; t itself when the topic cannot be had here
// now (moved to another node, or the lookup failed).
func (t *Topic) current() *Topic {
	if st := t.state.Load(); st != nil && st.passivated {
		if nt, err := t.again(); err == nil {
			return nt
		}
	}
	return t
}

// Deleted reports whether the topic was deleted (its handle is then dead:
// a topic created again under the name is a new one).
func (t *Topic) Deleted() bool { return t.state.Load().deleted }

// Epoch is the current layout epoch.
func (t *Topic) Epoch() uint64 { return t.Layout().Epoch }

func (t *Topic) publish(st *topicState) {
	old := t.state.Swap(st)
	if old != nil {
		close(old.changed)
	}
	t.readyOnce.Do(func() { close(t.ready) })
}

func newState(l topology.Layout, buckets map[topology.SegmentID][]*actor.PID, lanes map[topology.SegmentID][]*bucketLane,
	meters map[topology.SegmentID]*segmentMeter,
	epochTimes map[uint64]int64) (*topicState, error) {
	active := l.Active()
	spans := make([]routing.Span, 0, len(active))
	created := make(map[topology.SegmentID]uint64, len(active))
	for _, s := range active {
		spans = append(spans, routing.Span{Lo: s.Range.Lo, Hi: s.Range.Hi, Segment: uint64(s.ID), Buckets: s.Buckets})
		created[s.ID] = s.CreatedEpoch
	}
	newTable := routing.NewTable
	if l.Fixed() {
		newTable = routing.NewFixedTable // spans in partition order (Active sorts them so)
	}
	table, err := newTable(spans)
	if err != nil {
		return nil, err
	}
	return &topicState{layout: l, table: table, buckets: buckets, lanes: lanes, created: created, meters: meters, epochTimes: epochTimes,
		changed: make(chan struct{})}, nil
}

// lane returns the lane of unit u in st (nil when it has none).
func (st *topicState) lane(u unitRef) *bucketLane {
	if l := st.lanes[u.seg]; u.bucket < len(l) {
		return l[u.bucket]
	}
	return nil
}

// Bounds returns the first retained and the next offset of a unit.
func (t *Topic) Bounds(seg topology.SegmentID, bucket int) (first, next uint64, err error) {
	s, err := t.unitSegment(seg, bucket)
	if err != nil {
		return 0, 0, err
	}
	if owner, remote := t.remoteOwner(s); remote {
		return t.remoteBoundsOf(owner, s, bucket)
	}
	l, err := t.unitLogFor(s, bucket)()
	if err != nil {
		return 0, 0, err
	}
	return t.mgr.store.FirstOffset(l), l.NextOffset(), nil
}

// Read reads records of a unit from an offset. What it returns from an
// active segment counts as that segment's out-load. A segment another
// node owns is read there.
func (t *Topic) Read(seg topology.SegmentID, bucket int, from uint64, max, maxBytes int) ([]wal.Record, error) {
	t.touch()
	s, err := t.unitSegment(seg, bucket)
	if err != nil {
		return nil, err
	}
	if owner, remote := t.remoteOwner(s); remote {
		d, err := t.readRemote(owner, s, bucket, from, max, maxBytes, false)
		return d.Records, err
	}
	d, err := t.mgr.readLocal(t.unitLogFor(s, bucket), UnitRead{From: from, Max: max, MaxBytes: maxBytes})
	if replicated(s) && errors.Is(err, wal.ErrHole) {
		_ = t.mgr.damagedCopy(UnitKey{Topic: t.name, Segment: seg, Bucket: bucket}, t.incarnation, err) // logged, counted, reported
		d, err = t.readPastDamage(s, bucket, from, max, maxBytes)
	}
	if m := t.state.Load().meters[seg]; m != nil && len(d.Records) > 0 {
		m.read(d.Records)
	}
	return d.Records, err
}

// Appended returns a channel closed at the next append to the topic.
func (t *Topic) Appended() <-chan struct{} { return t.mgr.store.Appended(t.uri) }

// Changed returns a channel closed at the next layout change.
func (t *Topic) Changed() <-chan struct{} {
	if st := t.state.Load(); st.passivated {
		if nt := t.current(); nt != t {
			return nt.Changed()
		}
		// Not to be had here now: wake the waiter, to look again.
		ch := make(chan struct{})
		close(ch)
		return ch
	}
	return t.state.Load().changed
}

// unitSegment returns the segment of a unit of the topic as it is now,
// or why it has none.
func (t *Topic) unitSegment(seg topology.SegmentID, bucket int) (topology.Segment, error) {
	st := t.state.Load()
	if st.passivated {
		// A handle from before the topic stopped for idleness: read
		// through the topic as it is now, not reopen its logs here.
		nt, err := t.again()
		if err != nil {
			return topology.Segment{}, err
		}
		st = nt.state.Load()
		t = nt
	}
	s, ok := st.layout.Segment(seg)
	if !ok || s.State == topology.StateDeleted {
		return s, api.Errorf(api.CodeSegmentNotFound, "%s has no segment %d", t.uri, seg)
	}
	if bucket < 0 || bucket >= s.Buckets {
		return s, api.Errorf(api.CodeInvalidArgument, "segment %d of %s has %d buckets, not %d", seg, t.uri, s.Buckets, bucket)
	}
	return s, nil
}

// unitLogFor returns how to open the log of a unit of segment s here.
func (t *Topic) unitLogFor(s topology.Segment, bucket int) func() (*wal.Log, error) {
	return func() (*wal.Log, error) {
		key := UnitKey{Topic: t.name, Segment: s.ID, Bucket: bucket}
		if replicated(s) && t.mgr.cfg.Replicas != nil {
			// Its replica runs, so that readers see what is committed.
			return t.mgr.replicaLog(key, t.incarnation, s, *t.opts.Load())
		}
		return t.mgr.store.Log(key, *t.opts.Load())
	}
}

// unitLog returns the log of a unit whose segment this node owns.
func (t *Topic) unitLog(seg topology.SegmentID, bucket int) (*wal.Log, error) {
	s, err := t.unitSegment(seg, bucket)
	if err != nil {
		return nil, err
	}
	if owner, remote := t.remoteOwner(s); remote {
		return nil, api.Errorf(api.CodeUnavailable, "segment %d of %s is on node %s", seg, t.uri, owner)
	}
	return t.unitLogFor(s, bucket)()
}

// Describe returns the topic's layout in wire form, with its own and its
// effective policies.
func (t *Topic) Describe() api.TopicDescription {
	d := Describe(t.uri, t.Layout())
	if p := t.policies.Load(); !p.Empty() {
		d.Policies = p
	}
	eff := t.effectivePolicies()
	d.EffectivePolicies = &eff
	return d
}

// Describe converts a layout to its wire form.
func Describe(uri string, l topology.Layout) api.TopicDescription {
	if l.Fixed() {
		uri = strings.Replace(uri, "topic://", "persistent://", 1) // a fixed topic's own name
	}
	d := api.TopicDescription{Topic: uri, Epoch: l.Epoch, NextID: uint64(l.NextID), Segments: make([]api.SegmentInfo, 0, len(l.Segments))}
	for _, s := range l.Segments {
		info := api.SegmentInfo{
			ID: uint64(s.ID), State: string(s.State),
			Range:   [2]string{topology.FormatHash(s.Range.Lo), topology.FormatHash(s.Range.Hi)},
			Parents: ids(s.Parents), Children: ids(s.Children), Buckets: s.Buckets,
			CreatedEpoch: s.CreatedEpoch, SealedEpoch: s.SealedEpoch, Owner: s.Owner,
		}
		if s.Partition >= 0 {
			p := s.Partition
			info.Partition = &p
		}
		for _, r := range s.Replicas {
			info.Replicas = append(info.Replicas, api.ReplicaInfo{Node: r.Node, Incarnation: r.Incarnation})
		}
		d.Segments = append(d.Segments, info)
	}
	return d
}

func ids(in []topology.SegmentID) []uint64 {
	out := make([]uint64, len(in))
	for i, id := range in {
		out[i] = uint64(id)
	}
	return out
}

// Stats reports the topic's buckets.
func (t *Topic) Stats() api.TopicStats {
	l := t.Layout()
	st := api.TopicStats{Topic: t.uri, Epoch: l.Epoch, Buckets: []api.BucketStats{}, Subscriptions: []api.SubscriptionStats{}, Storage: t.storage.Stats()}
	if load := t.load.Load(); load != nil {
		st.Load = *load
	}
	for _, s := range l.Segments {
		if s.State == topology.StateDeleted {
			continue
		}
		owner, remote := t.remoteOwner(s)
		for b := 0; b < s.Buckets; b++ {
			if remote {
				bs := api.BucketStats{Segment: uint64(s.ID), Bucket: b, State: string(s.State), Owner: owner}
				if d, err := t.readRemote(owner, s, b, 0, 0, 0, true); err == nil {
					bs.FirstOffset, bs.NextOffset, bs.Bytes = d.First, d.Next, d.Bytes
					st.Messages += d.Next - d.First
					st.Bytes += d.Bytes
				} else {
					bs.Unavailable = true
				}
				st.Buckets = append(st.Buckets, bs)
				continue
			}
			lg, err := t.unitLog(s.ID, b)
			if err != nil {
				continue
			}
			bs := api.BucketStats{Segment: uint64(s.ID), Bucket: b, State: string(s.State),
				FirstOffset: t.mgr.store.FirstOffset(lg), NextOffset: lg.NextOffset(), Bytes: lg.SizeBytes()}
			if tr := t.mgr.store.Tier(); tr != nil {
				if entries, err := tr.Entries(lg.Dir()); err == nil && len(entries) > 0 {
					bs.TierFiles = len(entries)
					bs.TierBytes = tr.Bytes(lg.Dir())
					bs.LocalFirstOffset = lg.FirstOffset()
					st.TierBytes += bs.TierBytes
				}
			}
			st.Buckets = append(st.Buckets, bs)
			st.Messages += bs.NextOffset - bs.FirstOffset
			st.Bytes += bs.Bytes
		}
	}
	return st
}
