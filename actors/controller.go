package actors

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"github.com/braidmq/braid/internal/labels"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/meta"
	"github.com/braidmq/braid/topology"
)

// changeReq asks a controller to change its layout by op, which is data:
// the controller plans it on its current layout (topology.PlanChange).
// op.Kind names the change and reason says why (manual, or a
// scaling.Reason), both for metrics. An op decided at a layout epoch
// (op.Epoch, automatic changes) is refused with topology.ErrStale once
// the layout has moved on.
type changeReq struct {
	op     topology.Op
	reason string
}

// changeResp answers a changeReq.
type changeResp struct {
	desc api.TopicDescription
	err  error
}

// policiesReq asks a controller to store new policies in the topic record
// (set and unset keys; nil set and unset only re-resolve) over the
// namespace policies ns, and apply them.
type policiesReq struct {
	set   *api.Policies
	unset []string
	ns    *api.Policies
}

// policiesResp answers a policiesReq.
type policiesResp struct{ err error }

// retireMsg stops the actors of a sealed segment once the grace period in
// which late appends still get SEGMENT_SEALED has passed.
type retireMsg struct{ seg topology.SegmentID }

// controllerCrash makes a controller panic, and so restart and read its
// record again (tests of its restart; a change whose outcome in the store
// is unknown).
type controllerCrash struct{ reason string }

// newControllerProps makes the props of a topic's controller: the first
// incarnation starts from rec at revision rev, every later one (a restart)
// reads the record from the store.
func newControllerProps(t *Topic, rec meta.TopicRecord, rev uint64) *actor.Props {
	starts := 0
	return actor.PropsFromProducer(func() actor.Actor {
		starts++
		if starts == 1 {
			return &controller{t: t, rec: rec, rev: rev}
		}
		return &controller{t: t, reload: true, restarts: starts - 1}
	}, actor.WithDispatcher(labels.Dispatcher("braid_topic", t.uri, "braid_actor", "controller")))
}

// reloadRecord reads the topic's record and revision from the store,
// trying again for up to reloadPatience while the store does not answer
// (a leader election): a restart that gave up at once would spend the
// supervisor's restarts in a moment, and a controller past them is gone.
func (c *controller) reloadRecord() error {
	ctx, cancel := context.WithTimeout(context.Background(), reloadPatience)
	defer cancel()
	var rec meta.TopicRecord
	var rev uint64
	var err error
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
		rec, rev, err = c.t.mgr.meta.Topic(rctx, c.t.name)
		rcancel()
		if err == nil || errors.Is(err, meta.ErrNotFound) || errors.Is(err, meta.ErrCorrupt) {
			break
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
	}
	if err != nil {
		return err
	}
	c.rec, c.rev = rec, rev
	c.t.mgr.log.Warn("topic controller restarted; record read again from the store", "topic", c.t.uri, "epoch", rec.Layout.Epoch)
	return nil
}

// reloadPatience bounds how long a restarted controller tries to read its
// record.
const reloadPatience = 30 * time.Second

// sealGrace is how long a sealed segment's actors keep answering
// SEGMENT_SEALED to appends routed by an older snapshot.
const sealGrace = 30 * time.Second

// sealTimeout bounds the wait for a bucket to flush and seal.
const sealTimeout = 10 * time.Second

// removeGrace is how long a deleted segment's logs stay on disk after the
// layout that deletes it is published, so that reads under way finish.
const removeGrace = 2 * time.Second

// liveSegment is a segment whose actors run: its PID and its buckets'.
type liveSegment struct {
	pid     *actor.PID
	buckets []*actor.PID
}

// controller owns the layout of one topic.
//
// Invariant: rec.Layout is what the KV store holds at revision rev, and the
// topic's published snapshot is built from it.
//
// Each incarnation is a new controller (newControllerProps): the first
// starts from the record the manager read or wrote, a restarted one reads
// the record again from the store, since whatever failed may have left its
// memory behind the store (a change that failed after its compare-and-swap,
// say).
type controller struct {
	t   *Topic
	rec meta.TopicRecord
	rev uint64
	// reload says the record must be read from the store at start.
	reload bool
	// restarts counts the incarnations before this one; the segment
	// actors of each are named apart (segmentName).
	restarts int
	// segments holds the segment actors alive: every active segment,
	// sealed ones during their grace period, and those a change under way
	// spawned.
	segments map[topology.SegmentID]liveSegment
	scaler   *scaler
	// checking says a checkOwnersMsg is scheduled (placement.go).
	checking bool
	// copying says a sealed segment's lost copy is being made again
	// (replicated.go).
	copying bool
}

func (c *controller) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		if c.reload {
			if err := c.reloadRecord(); err != nil {
				// Without its record the topic cannot be served; the
				// supervisor restarts the controller and it reads again.
				c.t.mgr.log.Error("a restarted topic controller cannot read its record", "topic", c.t.uri, "err", err)
				panic(err)
			}
		}
		c.segments = map[topology.SegmentID]liveSegment{}
		c.rec.EpochTimes = fillEpochTimes(c.rec.Layout, c.rec.EpochTimes, time.Now())
		buckets := map[topology.SegmentID][]*actor.PID{}
		lanes := map[topology.SegmentID][]*bucketLane{}
		meters := map[topology.SegmentID]*segmentMeter{}
		for _, s := range c.rec.Layout.Active() {
			buckets[s.ID], lanes[s.ID], meters[s.ID] = c.spawnSegment(ctx, s, false)
		}
		st, err := newState(c.rec.Layout, buckets, lanes, meters, c.rec.EpochTimes)
		if err != nil {
			panic(fmt.Sprintf("topic %s: stored layout does not route: %v", c.t.uri, err))
		}
		c.t.publish(st)
		c.t.mgr.m.activeSegs.WithLabelValues(topicLabels(c.t.uri)...).Set(float64(len(buckets)))
		c.scaler = startScaler(c.t)
		c.scheduleOwnerCheck(ctx)
	case checkOwnersMsg:
		c.checking = false
		c.checkOwners(ctx)
		c.scheduleOwnerCheck(ctx)
	case replicaCopiedMsg:
		c.replicaCopied(msg)
	case moveOffReq:
		ctx.Respond(&changeResp{err: c.relocateFrom(ctx, msg.node, false)})
	case controllerCrash:
		if msg.reason != "" {
			c.t.mgr.log.Warn("topic controller restarting", "topic", c.t.uri, "why", msg.reason)
		}
		panic("braid/actors: controller restart requested for " + c.t.uri)
	case *actor.Stopped:
		c.t.mgr.forgetStopped(c.t)
	case *actor.Restarting:
		// A restarted controller starts a new scaler in Started.
		if c.scaler != nil {
			c.scaler.stop()
			c.scaler = nil
		}
		c.fenceForRestart(ctx)
	case *actor.Stopping:
		if c.scaler != nil {
			c.scaler.stop()
			c.scaler = nil
		}
	case *changeReq:
		desc, err := c.change(ctx, msg)
		ctx.Respond(&changeResp{desc: desc, err: err})
	case *policiesReq:
		ctx.Respond(&policiesResp{err: c.setPolicies(msg)})
	case passivateReq:
		// No change runs meanwhile (this actor runs one message at a
		// time): publish the last snapshot, passivated, so that nothing
		// is routed to the buckets any more, and have them answer what
		// they hold.
		if c.scaler != nil {
			c.scaler.stop()
			c.scaler = nil
		}
		st := *c.t.state.Load()
		st.passivated = true
		st.changed = make(chan struct{})
		c.t.publishQuiesced(&st)
		ctx.Respond(&passivateResp{err: drainBuckets(ctx.ActorSystem().Root, &st)})
	case retireMsg:
		if seg, ok := c.segments[msg.seg]; ok {
			ctx.Stop(seg.pid)
			delete(c.segments, msg.seg)
		}
	}
}

// spawnSegment starts the actors of segment s (startSegment) and panics
// when they do not start: a controller that cannot serve its layout
// restarts.
func (c *controller) spawnSegment(ctx actor.Context, s topology.Segment, gated bool) ([]*actor.PID, []*bucketLane, *segmentMeter) {
	pids, lanes, meter, err := c.startSegment(ctx, s, gated)
	if err != nil {
		panic(fmt.Sprintf("topic %s: %v", c.t.uri, err))
	}
	return pids, lanes, meter
}

// fenceForRestart runs as the controller restarts, before its segments
// stop. A stopped actor drops what is left in its mailbox unanswered
// (protoactor), so that nothing may be left in a bucket's: it publishes,
// under routeMu, a snapshot that routes every append to an actor that does
// not exist (a dead letter, answered UNAVAILABLE by Manager.deadLetter;
// the producer resends, and the restarted controller's snapshot routes
// it), and then has every live bucket answer what it took (drain): the
// published snapshot's, and those of sealed segments in their grace,
// which hold what older snapshots routed to them. A sealed bucket that
// forwards an append later routes it by the fenced snapshot too.
func (c *controller) fenceForRestart(ctx actor.Context) {
	st := c.t.state.Load()
	if st == nil || st.passivated || st.deleted {
		return
	}
	fenced := *st
	fenced.changed = make(chan struct{})
	fenced.lanes = nil
	fenced.buckets = make(map[topology.SegmentID][]*actor.PID, len(st.buckets))
	nowhere := actor.NewPID(ctx.Self().Address, ctx.Self().Id+"/restarting")
	for id, pids := range st.buckets {
		fenced.buckets[id] = slices.Repeat([]*actor.PID{nowhere}, len(pids))
	}
	c.t.publishQuiesced(&fenced)
	var live []*actor.PID
	for _, seg := range c.segments {
		live = append(live, seg.buckets...)
	}
	if err := drain(ctx.ActorSystem().Root, live); err != nil {
		c.t.mgr.log.Warn("a restarting topic controller's buckets did not all answer what they took", "topic", c.t.uri, "err", err)
	}
}

// startSegment starts the actors of segment s and returns its buckets'
// PIDs, lanes and meter once they accept messages; gated, its buckets
// hold back direct appends until an openMsg (see change).
func (c *controller) startSegment(ctx actor.Context, s topology.Segment, gated bool) ([]*actor.PID, []*bucketLane, *segmentMeter, error) {
	ready := make(chan struct{})
	meter := newSegmentMeter(s, time.Now())
	lanes := make([]*bucketLane, s.Buckets)
	for i := range lanes {
		lanes[i] = &bucketLane{}
	}
	var gates []*atomic.Bool
	if gated {
		gates = make([]*atomic.Bool, s.Buckets)
		for i := range gates {
			gates[i] = new(atomic.Bool)
			gates[i].Store(true)
		}
	}
	props := newSegmentProps(segmentActor{topic: c.t.name, id: s.ID, buckets: s.Buckets,
		store: c.t.mgr.store, opts: *c.t.opts.Load(), log: c.t.mgr.log, m: c.t.mgr.m, t: c.t, gates: gates, lanes: lanes,
		meter: meter, ready: ready, owner: c.remoteOf(s), replicas: s.Replicas})
	pid, err := ctx.SpawnNamed(props, segmentName(s.ID, c.restarts))
	if err != nil {
		return nil, nil, nil, fmt.Errorf("spawn segment %d: %w", s.ID, err)
	}
	// Known from here, so that abandoning a change stops it.
	buckets := bucketPIDs(pid, s.Buckets)
	c.segments[s.ID] = liveSegment{pid: pid, buckets: buckets}
	// Publish no PID before it exists: a message to an unregistered PID is
	// a dead letter, and its produce would never be answered.
	select {
	case <-ready:
	case <-time.After(sealTimeout):
		return nil, nil, nil, fmt.Errorf("segment %d did not start its buckets", s.ID)
	}
	return buckets, lanes, meter, nil
}

// setPolicies stores and applies new topic policies.
func (c *controller) setPolicies(req *policiesReq) error {
	own, err := c.rec.Policies.Update(req.set, req.unset)
	if err != nil {
		return err
	}
	if own.Empty() {
		own = nil
	}
	if err := c.t.applyPolicies(own, req.ns); err != nil {
		return err
	}
	if req.set == nil && len(req.unset) == 0 {
		return nil // a namespace change: nothing to store here
	}
	rec := c.rec
	rec.Policies = own
	cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	rev, err := c.t.mgr.meta.UpdateTopic(cctx, c.t.name, rec, c.rev)
	cancel()
	if err != nil {
		_ = c.t.applyPolicies(c.rec.Policies, req.ns)
		if errors.Is(err, meta.ErrConflict) {
			return api.Errorf(api.CodeUnavailable, "%s changed elsewhere; retry: %v", c.t.uri, err)
		}
		return api.Errorf(api.CodeInternal, "persist policies of %s: %v", c.t.uri, err)
	}
	c.rec, c.rev = rec, rev
	c.t.mgr.log.Info("topic policies changed", "topic", c.t.uri, "policies", own)
	return nil
}

// fillEpochTimes returns times with now for every epoch that a segment of
// l was created or sealed in and that times lacks (records written before
// epoch times were kept): cooldowns and retention then run from this start.
func fillEpochTimes(l topology.Layout, times map[uint64]int64, now time.Time) map[uint64]int64 {
	out := maps.Clone(times)
	if out == nil {
		out = map[uint64]int64{}
	}
	for _, s := range l.Segments {
		for _, e := range []uint64{s.CreatedEpoch, s.SealedEpoch} {
			if _, ok := out[e]; !ok && e != 0 {
				out[e] = now.UnixMilli()
			}
		}
	}
	pruneEpochTimes(l, out)
	return out
}

// pruneEpochTimes drops the times of epochs no segment still needs: only
// epochs a segment that is not deleted was created or sealed in are kept.
func pruneEpochTimes(l topology.Layout, times map[uint64]int64) {
	needed := map[uint64]bool{}
	for _, s := range l.Segments {
		if s.State != topology.StateDeleted {
			needed[s.CreatedEpoch] = true
			needed[s.SealedEpoch] = true
		}
	}
	maps.DeleteFunc(times, func(e uint64, _ int64) bool { return !needed[e] })
}

// layoutError maps a topology refusal to its wire code.
func layoutError(err error) error {
	switch {
	case errors.Is(err, topology.ErrUnknownSegment):
		return api.Errorf(api.CodeSegmentNotFound, "%v", err)
	case errors.Is(err, topology.ErrSplitPoint), errors.Is(err, topology.ErrBuckets), errors.Is(err, topology.ErrBadHash),
		errors.Is(err, topology.ErrOp):
		return api.Errorf(api.CodeInvalidArgument, "%v", err)
	default:
		return api.Errorf(api.CodeLayoutRefused, "%v", err)
	}
}
