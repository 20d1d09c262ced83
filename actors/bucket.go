package actors

import (
	"log/slog"
	"strconv"
	"sync/atomic"

	"github.com/braidmq/braid/internal/labels"

	"github.com/braidmq/braid/logstore"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/topology"
	"github.com/braidmq/braid/wal"
	"github.com/prometheus/client_golang/prometheus"
)

// appendSink learns where the records of an append landed. produceCall is
// the one the produce path uses.
type appendSink interface {
	// landed reports that the records members (their indexes in the
	// sink's request) are at offsets first, first+1, ... of unit u, or
	// that they failed with err.
	landed(u unitRef, members []int, first uint64, err error)
	// splitInto says that one append was handed on as parts appends, each
	// of which will report landed once: a sealed bucket split it between
	// its successors. It is called before any part is sent.
	splitInto(parts int)
}

// appendReq asks a bucket to append records, in order. The bucket (or its
// committer) tells sink once the batch holding them is durable (per the
// durability mode) or refused. hashes holds the key hashes of the keyed
// records, for the load meter.
type appendReq struct {
	records []wal.Record
	hashes  []uint64
	sink    appendSink
	members []int
	// strict says the producer named the layout epoch it routed by
	// (Braid-Epoch) and re-routes by itself what a seal refuses: a sealed
	// bucket refuses it with SEGMENT_SEALED rather than hand it over.
	strict bool
	// forwarded says a sealed predecessor handed it over: a gated bucket
	// takes it at once, ahead of the appends it holds back.
	forwarded bool
	// laned says it came through the mailbox by bucketLane.send, which
	// counted it: the bucket tells the lane once it has disposed of it.
	laned bool
}

func (q *appendReq) settle(u unitRef, first uint64, err error) {
	q.sink.landed(u, q.members, first, err)
}

// sealReq seals a bucket at a layout epoch: what it accepted before is
// flushed, what comes after is held for the successors (or refused with
// SEGMENT_SEALED when strict). Unseal reverts a seal whose layout change
// failed to persist: the held appends are then appended here, in order.
// The bucket answers its sender (a future) with a sealResp.
type sealReq struct {
	epoch  uint64
	unseal bool
}

// sealResp answers a sealReq once the bucket has flushed: next is the
// bucket's next offset.
type sealResp struct{ next uint64 }

// handoverMsg tells a sealed bucket that the layout sealing it is
// published and that every append routed by an older layout has reached
// its mailbox (the controller published under Topic.routeMu): it hands
// what it held to the successors that own the keys in next, in order, then
// answers its sender (a future) with a handoverResp. Whatever reaches it
// afterwards is handed on at once. next is the published snapshot, which
// nobody changes: the message carries data, not a function.
type handoverMsg struct{ next *topicState }

// handoverResp answers a handoverMsg once what the bucket held is sent on.
type handoverResp struct{}

// abandonMsg tells a bucket whose segment another node owns that the node
// is gone: it answers what it sent there, and what comes, with err (see
// remoteWriter.abandon); with no err, that the segment did not move after
// all: it writes there again.
type abandonMsg struct{ err error }

// openMsg lets a gated bucket take the appends it held back: its
// segment's predecessors have handed over everything they held.
type openMsg struct{}

// bucketStarting, when set (by tests), is called as each bucket starts.
var bucketStarting atomic.Pointer[func(UnitKey)]

// flushMsg is the message a bucket sends itself to commit its queue.
type flushMsg struct{}

// crashMsg makes a bucket panic; tests use it to prove supervision restarts
// a bucket with nothing acknowledged lost.
type crashMsg struct{}

// bucketActor owns one bucket log.
//
// Its life within a layout change (controller.change): a bucket of a new
// segment starts gated and holds back direct appends until openMsg; a
// bucket of a retiring segment, once sealed, holds what reaches it until
// handoverMsg, then forwards it to the successors. The controller opens
// the successors only after every retiring bucket has forwarded, so a key's
// appends that reached the sealed segment late land in the successor ahead
// of the ones routed there directly: per-key order holds for producers
// that know nothing of layouts.
type bucketActor struct {
	key   UnitKey
	unit  unitRef
	topic *Topic
	store *logstore.Store
	opts  wal.Options
	log   *slog.Logger
	m     *metrics
	meter *bucketMeter

	// w is the log the bucket writes to (reopened after a failed write);
	// nil for a bucket of a segment another node owns, which writes
	// through rw to owner (hosted.go).
	w     *logstore.Writer
	owner string
	// late answers the appends left in the mailbox when the bucket stops
	// (lateAppends), for every incarnation of it.
	late *lateAppends
	rw   *remoteWriter
	// rc proposes the batches of a replicated unit to its raft group
	// (replicated.go); nil for a unit of one copy. replicas are its
	// segment's, as the layout that spawned it says.
	rc       *replicaCommitter
	replicas []topology.Replica
	// restarted is set on every incarnation after the first (a
	// supervisor restart).
	restarted bool
	// sealedAt is the layout epoch of the seal; 0 while accepting appends.
	sealedAt uint64
	// held are the appends that reached the bucket after its seal, in
	// arrival order, until the handover; handedOver is set by it.
	held       []appendReq
	handedOver bool
	// gated is set while the segment's predecessors may still hand over
	// appends; gatedQueue holds the direct appends meanwhile. gate, set
	// for a bucket a layout change created, outlives a restart: the
	// bucket starts gated while it holds true, and clears it at openMsg.
	gated      bool
	gatedQueue []appendReq
	gate       *atomic.Bool
	// lane is the bucket's bucketLane (nil in tests that make none); open
	// while the bucket is active, not gated and has a committer.
	lane *bucketLane
	// queue holds appends received since the last flush; flushQueued says a
	// flushMsg is in the mailbox behind them.
	queue       []appendReq
	flushQueued bool
	// batch is the reused slice the queue's records are gathered into.
	batch []wal.Record
	// commit acknowledges written batches once durable; nil unless the
	// durability is DurabilityAlways (the others acknowledge on write).
	commit *logstore.Committer[appendReq]
	// The topic's series of braid_messages_appended_total and
	// braid_bytes_appended_total, looked up at start (the committer
	// counts through them too).
	appendedMsgs, appendedBytes prometheus.Counter
	// The namespace's series of braid_namespace_messages_appended_total
	// and braid_namespace_bytes_appended_total, which outlive the topic's
	// passivation.
	nsMsgs, nsBytes prometheus.Counter
}

// newBucketProps makes the props of a bucket actor. A bucket restarted by
// its supervisor takes its seal from the topic (the current layout, or the
// layout change under way) and its gate from gate (nil: never gated), not
// from the memory it lost. The gate is set before the bucket is spawned,
// not read from the topic at its start: a new bucket's start may run after
// the change that spawned it has opened it, with appends routed to it
// directly already in its mailbox ahead of the ones handed over.
func newBucketProps(key UnitKey, topic *Topic, store *logstore.Store, opts wal.Options, log *slog.Logger, m *metrics, meter *bucketMeter,
	gate *atomic.Bool, lane *bucketLane, owner string, replicas []topology.Replica) *actor.Props {
	incarnations := 0
	late := &lateAppends{}
	return actor.PropsFromProducer(func() actor.Actor {
		incarnations++
		return &bucketActor{key: key, unit: unitRef{key.Segment, key.Bucket}, topic: topic, store: store, opts: opts, log: log, m: m,
			meter: meter, gate: gate, lane: lane, restarted: incarnations > 1, owner: owner, late: late, replicas: replicas}
	}, actor.WithMailbox(actor.Unbounded(late)), actor.WithDispatcher(labels.Dispatcher("braid_topic", key.Topic.String(), "braid_segment", strconv.FormatUint(uint64(key.Segment), 10),
		"braid_unit", key.String())))
}

func (b *bucketActor) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		b.late.started(ctx)
		if hook := bucketStarting.Load(); hook != nil {
			(*hook)(b.key)
		}
		if b.owner != "" {
			b.startRemote()
			return
		}
		// A first start takes the log as the store has it: a reader may
		// have opened it already (a read that activated the topic), and
		// closing it under that read would fail it. A restart, or a log
		// that failed, opens it again (repairing its tail).
		l, err := b.store.Log(b.key, b.opts)
		if err == nil && (b.restarted || l.Err() != nil) {
			l, err = b.store.Reopen(b.key, b.opts)
		}
		if err != nil {
			// Without its log the bucket cannot serve; the supervisor
			// restarts it and the open is tried again.
			panic(err)
		}
		b.w = b.store.NewWriter(b.key, l, b.opts, b.log)
		// The segment's replicas come with the bucket: a bucket a layout
		// change spawns starts before that layout is the topic's.
		if s := (topology.Segment{ID: b.key.Segment, State: topology.StateActive, Replicas: b.replicas}); replicated(s) && b.topic != nil {
			if err := b.startReplicated(s, l); err != nil {
				b.topic.mgr.homeCopyDamaged(b.topic, err)
				panic(err) // the supervisor restarts the bucket, which tries again
			}
		}
		topicName := topicLabels(b.key.Topic.String())
		b.appendedMsgs, b.appendedBytes = b.m.appendedMsgs.WithLabelValues(topicName...), b.m.appendedBytes.WithLabelValues(topicName...)
		ns := b.key.Topic.Tenant + "/" + b.key.Topic.Namespace
		b.nsMsgs, b.nsBytes = b.m.nsAppendedMsgs.WithLabelValues(ns), b.m.nsAppendedBytes.WithLabelValues(ns)
		if b.opts.Durability == wal.DurabilityAlways && b.rc == nil {
			topic := b.key.Topic.String()
			b.commit = logstore.NewCommitter(b.key, b.w, logstore.GroupOf[appendReq](b.store), b.log, func() { b.store.Signal(topic) },
				func(reqs []appendReq) { b.account(reqs) })
		}
		if b.topic != nil {
			b.sealedAt = b.topic.sealedAt(b.key.Segment)
		}
		if b.gate != nil {
			b.gated = b.gate.Load()
		}
		b.updateLane()
	case appendReq:
		b.receiveAppend(ctx, msg)
	case flushMsg:
		b.flushQueued = false
		b.flush()
	case sealReq:
		if !msg.unseal {
			// From here on appends come through the mailbox, to be held;
			// the drain covers those that took the lane before.
			b.lane.closeLane()
		}
		b.flush()
		b.drain()
		next := uint64(0)
		if b.w != nil {
			next = b.w.Current().NextOffset()
		}
		if b.rc != nil && !msg.unseal {
			// Every replica agrees where the sealed unit ends.
			end, err := b.rc.seal()
			if err != nil {
				b.log.Error("sealing a replicated unit's raft group failed; its replicas may end it later", "unit", b.key.String(), "err", err)
			} else {
				next = end
			}
		}
		if msg.unseal {
			b.sealedAt = 0
			held := b.held
			b.held = nil
			for _, q := range held {
				b.enqueue(ctx, q)
			}
		} else {
			b.sealedAt = msg.epoch
		}
		b.updateLane()
		ctx.Respond(sealResp{next: next})
	case handoverMsg:
		// What the predecessors handed over (held) goes before the direct
		// appends the gate still holds back.
		held, gated := b.held, b.gatedQueue
		b.held, b.gatedQueue = nil, nil
		b.handedOver = true
		b.forward(held, msg.next)
		b.forward(gated, msg.next)
		ctx.Respond(handoverResp{})
	case openMsg:
		if b.gate != nil {
			b.gate.Store(false)
		}
		if b.gated {
			b.gated = false
			gated := b.gatedQueue
			b.gatedQueue = nil
			switch {
			case b.sealedAt != 0 && b.handedOver:
				b.forward(gated, b.topic.state.Load())
			case b.sealedAt != 0:
				// Sealed before it opened: they follow what it holds.
				b.held = append(b.held, gated...)
			default:
				for _, q := range gated {
					b.enqueue(ctx, q)
				}
			}
		}
		b.updateLane()
	case abandonMsg:
		if b.rw != nil {
			b.rw.abandon(msg.err)
		}
	case drainReq:
		b.flush()
		b.drain()
		ctx.Respond(drainResp{})
	case crashMsg:
		panic("braid/actors: crash requested for " + b.key.String())
	case *actor.Restarting:
		b.lane.closeLane()
		b.failPending(api.Errorf(api.CodeUnavailable, "%s: bucket restarting; resend", b.key))
		b.stopCommitter()
	case *actor.Stopping:
		b.lane.closeLane()
		b.flush()
		b.failPending(api.Errorf(api.CodeUnavailable, "%s: bucket stopping; resend", b.key))
		b.stopCommitter()
	case *actor.Stopped:
		b.late.stopped.Store(true)
	}
}

// startRemote starts a bucket of a segment another node owns: it writes
// there (remoteWriter), through no lane.
func (b *bucketActor) startRemote() {
	topicName := topicLabels(b.key.Topic.String())
	b.appendedMsgs, b.appendedBytes = b.m.appendedMsgs.WithLabelValues(topicName...), b.m.appendedBytes.WithLabelValues(topicName...)
	ns := b.key.Topic.Tenant + "/" + b.key.Topic.Namespace
	b.nsMsgs, b.nsBytes = b.m.nsAppendedMsgs.WithLabelValues(ns), b.m.nsAppendedBytes.WithLabelValues(ns)
	b.rw = newRemoteWriter(b.key, b.owner, b.topic, b.store.AckFence(), func(reqs []appendReq) {
		b.count(reqs)
		b.store.Signal(b.key.Topic.String())
	})
	b.rw.lane = b.lane
	b.sealedAt = b.topic.sealedAt(b.key.Segment)
	if b.gate != nil {
		b.gated = b.gate.Load()
	}
	b.lane.closeLane()
}

// startReplicated makes the bucket of a replicated unit (its segment s
// names replicas) propose its batches to the unit's raft group, whose log
// l is; it takes the lead of the group (this node owns the segment).
func (b *bucketActor) startReplicated(s topology.Segment, l *wal.Log) error {
	m := b.topic.mgr
	g, err := m.startGroup(b.key, b.topic.incarnation, s, l)
	if err != nil {
		return err
	}
	b.rc = &replicaCommitter{key: b.key, g: g, fence: b.store.AckFence(), onAck: func(reqs []appendReq) {
		b.account(reqs)
		b.store.Signal(b.key.Topic.String())
	}, onSealed: func() { m.checkMovedAway(b.topic) }}
	// The lead comes to the owner in a few round trips; appends proposed
	// before then take it (replicaCommitter.submit).
	go func() { _ = g.Lead(replicaLeadTimeout) }()
	return nil
}

// updateLane opens the lane when the bucket takes appends as they come
// (active, not gated, with a committer), and closes it otherwise.
func (b *bucketActor) updateLane() {
	if b.sealedAt == 0 && !b.gated && b.commit != nil {
		b.lane.openLane(b.commit)
	} else {
		b.lane.closeLane()
	}
}

// receiveAppend takes, holds, forwards or refuses one append by the
// bucket's place in the layout change.
func (b *bucketActor) receiveAppend(ctx actor.Context, q appendReq) {
	if q.laned && (b.sealedAt != 0 || b.gated && !q.forwarded) {
		// Not for the committer now: the lane's count lets go of it here.
		q.laned = false
		b.lane.disposed(1, nil, nil)
	}
	switch {
	case b.sealedAt != 0 && q.strict && !q.forwarded:
		q.settle(b.unit, 0, api.SealedError(uint64(b.key.Segment), b.sealedAt))
	case b.sealedAt != 0 && b.handedOver:
		// Nothing routed by an older layout can still arrive (the
		// controller published under routeMu); hand it on anyway rather
		// than lose or refuse it, and say so.
		st := b.topic.state.Load()
		if st.table == nil || st.layout.Epoch < b.sealedAt {
			// A snapshot older than the seal would route it back here.
			b.log.Error("append reached a sealed bucket after its handover, with no newer layout to forward it by", "unit", b.key.String(), "records", len(q.records))
			q.settle(b.unit, 0, api.Errorf(api.CodeUnavailable, "%s is sealed and its layout is not published; resend", b.key))
			return
		}
		b.log.Warn("append reached a sealed bucket after its handover; forwarding it", "unit", b.key.String(), "records", len(q.records))
		b.forward([]appendReq{q}, st)
	case b.gated && !q.forwarded:
		// Before the held case: a bucket that starts late may find its
		// segment sealed already (by the next change) while its
		// predecessors still hand over; a direct append must not get
		// ahead of them in what it holds (see handoverMsg, openMsg).
		b.gatedQueue = append(b.gatedQueue, q)
	case b.sealedAt != 0:
		b.held = append(b.held, q)
	default:
		b.enqueue(ctx, q)
	}
}

// enqueue adds an append to the next batch.
func (b *bucketActor) enqueue(ctx actor.Context, q appendReq) {
	b.queue = append(b.queue, q)
	if b.commit != nil {
		// The committer gathers what arrives while it writes and syncs:
		// hand it over now rather than after a turn of the mailbox.
		b.flush()
		return
	}
	if !b.flushQueued {
		b.flushQueued = true
		ctx.Send(ctx.Self(), flushMsg{})
	}
}

// forward hands appends to the buckets that own their keys in st, in
// order: the records of one append that route to one unit go as one
// append, so each unit receives a key's records in the order they came.
func (b *bucketActor) forward(reqs []appendReq, st *topicState) {
	if len(reqs) == 0 {
		return
	}
	n := 0
	for i := range reqs {
		n += len(reqs[i].records)
		forwardAppend(b.topic, st, reqs[i])
	}
	b.m.handedOver.Add(float64(n))
}

// forwardAppend routes the records of q by st and sends them on, marked
// forwarded.
func forwardAppend(t *Topic, st *topicState, q appendReq) {
	if st == nil || st.deleted {
		q.settle(unitRef{}, 0, api.Errorf(api.CodeTopicDeleted, "topic %s was deleted", t.uri))
		return
	}
	type part struct {
		u       unitRef
		records []wal.Record
		hashes  []uint64
		members []int
	}
	var parts []*part
	find := func(u unitRef) *part {
		for _, p := range parts {
			if p.u == u {
				return p
			}
		}
		p := &part{u: u}
		parts = append(parts, p)
		return p
	}
	for i := range q.records {
		var p *part
		if key := q.records[i].Key; len(key) > 0 {
			seg, bucket, h := st.table.Route(key)
			p = find(unitRef{topology.SegmentID(seg), bucket})
			p.hashes = append(p.hashes, h)
		} else {
			seg, bucket := t.rr.Next(st.table)
			p = find(unitRef{topology.SegmentID(seg), bucket})
		}
		p.records = append(p.records, q.records[i])
		p.members = append(p.members, q.members[i])
	}
	q.sink.splitInto(len(parts))
	for _, p := range parts {
		fwd := appendReq{records: p.records, hashes: p.hashes, sink: q.sink, members: p.members, strict: q.strict, forwarded: true}
		pids := st.buckets[p.u.seg]
		if p.u.bucket >= len(pids) {
			fwd.settle(p.u, 0, api.Errorf(api.CodeInternal, "no actor for %d/%d", p.u.seg, p.u.bucket))
			continue
		}
		st.lane(p.u).send(t.mgr.system.Root, pids[p.u.bucket], fwd)
	}
}

// drain waits until every written batch is durable and acknowledged.
func (b *bucketActor) drain() {
	if b.rw != nil {
		b.rw.drain()
	}
	if b.rc != nil {
		b.rc.drain()
	}
	if b.commit != nil {
		b.commit.Drain()
	}
}

// stopCommitter acknowledges what is written, once durable, and stops the
// committer.
func (b *bucketActor) stopCommitter() {
	if b.commit != nil {
		b.commit.Close()
		b.commit = nil
	}
}

// flush hands the queue on as one batch: under DurabilityAlways to the
// committer, which writes and fsyncs it (with whatever else was submitted
// by then) and acknowledges it once durable; under the other modes it
// writes it and acknowledges it at once.
func (b *bucketActor) flush() {
	if len(b.queue) == 0 {
		return
	}
	queue := b.queue
	b.queue = nil
	if b.rw != nil {
		b.disposeLaned(queue)
		b.rw.submit(queue)
		return
	}
	if b.rc != nil {
		b.disposeLaned(queue)
		b.rc.submit(queue)
		return
	}
	if b.commit != nil {
		// The committer counts what it writes (account): appends that
		// took the lane never pass here.
		laned := 0
		for i := range queue {
			if queue[i].laned {
				laned++
				queue[i].laned = false
			}
		}
		if laned > 0 && b.lane != nil {
			b.lane.disposed(laned, b.commit, queue)
			return
		}
		b.commit.Submit(queue)
		return
	}
	// One request (the usual case) is written as it came; several are
	// gathered into the reused batch slice.
	recs := queue[0].records
	if len(queue) > 1 {
		b.batch = b.batch[:0]
		for _, q := range queue {
			b.batch = append(b.batch, q.records...)
		}
		recs = b.batch
	}
	var first uint64
	l, err := b.w.Writable()
	if err == nil {
		if first, err = l.Write(recs...); err != nil {
			err = b.w.Failed(l, err)
		}
	}
	clear(b.batch) // drop the references to the request buffers
	b.disposeLaned(queue)
	if err != nil {
		for i := range queue {
			queue[i].settle(b.unit, 0, err)
		}
		return
	}
	b.account(queue)
	logstore.Ack(b.key, queue, first, b.store.AckFence())
	b.store.Signal(b.key.Topic.String())
}

// failPending fails every append the bucket holds and has not written:
// its queue, what it held after a seal and what its gate held back.
// account counts appends written to the log: the topic's appended series
// and the bucket's load meter. It returns the records counted.
func (b *bucketActor) account(reqs []appendReq) int {
	n, payloadBytes := b.count(reqs)
	b.m.nodeBytes.Add(uint64(payloadBytes))
	return n
}

// count counts appended records in the topic's and namespace's series and
// the bucket's load meter (account, and a bucket whose segment another
// node owns: that node counts its own bytes).
func (b *bucketActor) count(reqs []appendReq) (n, payloadBytes int) {
	for i := range reqs {
		n += len(reqs[i].records)
		for j := range reqs[i].records {
			payloadBytes += len(reqs[i].records[j].Key) + len(reqs[i].records[j].Payload)
		}
	}
	b.appendedMsgs.Add(float64(n))
	b.appendedBytes.Add(float64(payloadBytes))
	b.nsMsgs.Add(float64(n))
	b.nsBytes.Add(float64(payloadBytes))
	if b.meter != nil {
		b.meter.appended(reqs, n, payloadBytes)
	}
	return n, payloadBytes
}

// disposeLaned tells the lane of the laned appends among reqs that the
// bucket has disposed of them.
func (b *bucketActor) disposeLaned(reqs []appendReq) {
	laned := 0
	for i := range reqs {
		if reqs[i].laned {
			laned++
			reqs[i].laned = false
		}
	}
	if laned > 0 && b.lane != nil {
		b.lane.disposed(laned, nil, nil)
	}
}

func (b *bucketActor) failPending(err error) {
	b.disposeLaned(b.queue)
	for _, list := range [][]appendReq{b.queue, b.held, b.gatedQueue} {
		for i := range list {
			list[i].settle(b.unit, 0, err)
		}
	}
	b.queue, b.held, b.gatedQueue = nil, nil, nil
}
