package actors

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync/atomic"
	"time"

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

// changeStage, when set (by tests), is called at each named stage of a
// layout change; a panic there crashes the controller mid-change.
var changeStage atomic.Pointer[func(stage string)]

func stage(name string) {
	if f := changeStage.Load(); f != nil {
		(*f)(name)
	}
}

// newControllerProps makes the props of a topic's controller: the first
// incarnation starts from rec at revision rev, every later one (a restart)
// reads the record from the store.
func newControllerProps(t *Topic, rec meta.TopicRecord, rev uint64) *actor.Props {
	first := true
	return actor.PropsFromProducer(func() actor.Actor {
		if first {
			first = false
			return &controller{t: t, rec: rec, rev: rev}
		}
		return &controller{t: t, reload: true}
	})
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
	// segments holds the segment actors alive: every active segment, and
	// sealed ones during their grace period.
	segments map[topology.SegmentID]*actor.PID
	scaler   *scaler
	// checking says a checkOwnersMsg is scheduled (placement.go).
	checking bool
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
		c.segments = map[topology.SegmentID]*actor.PID{}
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
	case moveOffReq:
		ctx.Respond(&changeResp{err: c.relocateFrom(ctx, msg.node, false)})
	case controllerCrash:
		if msg.reason != "" {
			c.t.mgr.log.Warn("topic controller restarting", "topic", c.t.uri, "why", msg.reason)
		}
		panic("braid/actors: controller restart requested for " + c.t.uri)
	case *actor.Stopped:
		c.t.mgr.forgetStopped(c.t)
	case *actor.Restarting, *actor.Stopping:
		// A restarted controller starts a new scaler in Started.
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
		if pid, ok := c.segments[msg.seg]; ok {
			ctx.Stop(pid)
			delete(c.segments, msg.seg)
		}
	}
}

// spawnSegment starts the actors of segment s; gated, its buckets hold
// back direct appends until an openMsg (see change).
func (c *controller) spawnSegment(ctx actor.Context, s topology.Segment, gated bool) ([]*actor.PID, []*bucketLane, *segmentMeter) {
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
		meter: meter, ready: ready, owner: c.remoteOf(s)})
	pid, err := ctx.SpawnNamed(props, segmentName(s.ID))
	if err != nil {
		panic(fmt.Sprintf("topic %s: spawn segment %d: %v", c.t.uri, s.ID, err))
	}
	// Publish no PID before it exists: a message to an unregistered PID is
	// a dead letter, and its produce would never be answered.
	select {
	case <-ready:
	case <-time.After(sealTimeout):
		panic(fmt.Sprintf("topic %s: segment %d did not start its buckets", c.t.uri, s.ID))
	}
	c.segments[s.ID] = pid
	return bucketPIDs(pid, s.Buckets), lanes, meter
}

// change applies one layout change, in this order:
//
//  1. spawn the new segments, gated (not yet routable; they will hold back
//     direct appends until step 6);
//  2. seal the retiring segments: each flushes what it accepted and holds
//     what comes after (or refuses it, for producers that route by epoch);
//  3. compare-and-swap the layout in the KV store (a stale controller fails
//     here; then everything is undone: unseal, which appends what was held,
//     and abandon the new segments);
//  4. publish the new snapshot under routeMu: from then on no append is
//     routed by the old one, and every append routed by it is in a mailbox;
//  5. hand over: each sealed bucket forwards what it held, in order, to the
//     successors owning the keys, and answers;
//  6. open the new segments: they take what they held back, behind what
//     was forwarded to them.
//
// So a key's appends that met the seal land in its successor before any
// routed there directly, whoever sent them: the server absorbs the change.
// Spawning first keeps the window in which appends wait down to the seal
// and the compare-and-swap.
func (c *controller) change(ctx actor.Context, req *changeReq) (api.TopicDescription, error) {
	began := time.Now()
	cur := c.rec.Layout
	next, err := cur.Apply(req.op)
	if errors.Is(err, topology.ErrStale) {
		return api.TopicDescription{}, err // the scaler's own; it decides again
	}
	if err != nil {
		return api.TopicDescription{}, layoutError(err)
	}
	// What the change creates is placed (placement.go); in a layout
	// written before nodes had ids, this node owns what it serves.
	retiring, created := diffActive(cur, next)
	next = c.placeCreated(next, created, req.op.Kind == topology.OpRelocate)
	old := c.t.state.Load()
	buckets := maps.Clone(old.buckets)
	lanes := maps.Clone(old.lanes)
	meters := maps.Clone(old.meters)
	// Buckets of the new segments start gated, restarted ones too, until
	// the change opens them (step 6).
	for _, id := range created {
		s, _ := next.Segment(id)
		buckets[id], lanes[id], meters[id] = c.spawnSegment(ctx, s, true)
	}
	spawned := time.Now()
	// A bucket restarted from here until the publish takes its seal from
	// this record (the layout it reads still says active).
	c.t.setSealing(retiring, next.Epoch)
	defer c.t.setSealing(nil, 0)
	if err := c.seal(retiring, next.Epoch, false); err != nil {
		c.t.setSealing(nil, 0)
		_ = c.seal(retiring, 0, true)
		c.abandon(created)
		return api.TopicDescription{}, api.Errorf(api.CodeInternal, "seal %s: %v", c.t.uri, err)
	}
	sealed := time.Now()
	rec := c.rec
	rec.Layout = next
	rec.EpochTimes = maps.Clone(c.rec.EpochTimes)
	for e := cur.Epoch + 1; e <= next.Epoch; e++ {
		rec.EpochTimes[e] = sealed.UnixMilli()
	}
	pruneEpochTimes(next, rec.EpochTimes)
	cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	rev, err := c.t.mgr.meta.UpdateTopic(cctx, c.t.name, rec, c.rev)
	cancel()
	if err != nil {
		// Nothing changed: reopen what was sealed. A conflict means another
		// controller changed the topic; this one is stale and must reload.
		c.t.setSealing(nil, 0)
		_ = c.seal(retiring, 0, true)
		c.abandon(created)
		// The record moved on (a conflict), or the store did not say
		// whether it took the change (a timeout: it may have): this
		// controller's record may be behind the store's. It restarts,
		// and reads it again.
		ctx.Send(ctx.Self(), controllerCrash{reason: "its layout change failed and its record may be behind the store's"})
		if errors.Is(err, meta.ErrConflict) {
			return api.TopicDescription{}, api.Errorf(api.CodeUnavailable, "layout of %s changed elsewhere; retry: %v", c.t.uri, err)
		}
		return api.TopicDescription{}, api.Errorf(api.CodeUnavailable, "persist layout of %s: %v; retry", c.t.uri, err)
	}
	stage("persisted")
	c.rec, c.rev = rec, rev

	self, root := ctx.Self(), ctx.ActorSystem().Root
	for _, id := range retiring {
		delete(buckets, id)
		delete(lanes, id)
		delete(meters, id)
		seg := id
		time.AfterFunc(sealGrace, func() { root.Send(self, retireMsg{seg: seg}) })
	}
	st, err := newState(next, buckets, lanes, meters, rec.EpochTimes)
	if err != nil {
		// Cannot happen for a layout that passed topology's checks; refuse
		// loudly rather than route wrongly.
		panic(fmt.Sprintf("topic %s: layout epoch %d does not route: %v", c.t.uri, next.Epoch, err))
	}
	c.t.publishQuiesced(st)
	published := time.Now()
	deleted := newlyDeleted(cur, next)
	c.removeDeleted(deleted)
	// Seal again now that the layout says so, in case a bucket restarted
	// (and read its seal) before setSealing: belt and braces.
	_ = c.sealPIDs(old, retiring, next.Epoch)
	c.handOver(old, retiring, st)
	c.open(st, created)
	handedOver := time.Now()
	op := string(req.op.Kind)
	c.t.mgr.m.layoutChanges.WithLabelValues(op).Inc()
	c.t.mgr.m.scalingOps.WithLabelValues(topicLabels(c.t.uri, op, req.reason)...).Inc()
	c.t.mgr.m.activeSegs.WithLabelValues(topicLabels(c.t.uri)...).Set(float64(len(buckets)))
	desc := Describe(c.t.uri, next)
	c.t.mgr.publishLayout(c.t.name, desc)
	c.scheduleOwnerCheck(ctx)
	c.t.mgr.log.Info("layout changed", "topic", c.t.uri, "op", req.op.String(), "reason", req.reason, "epoch", next.Epoch,
		"sealed", retiring, "created", created, "deleted", deleted, "spawn", spawned.Sub(began),
		"seal", sealed.Sub(spawned), "persist_and_publish", published.Sub(sealed), "handover", handedOver.Sub(published))
	return desc, nil
}

// handOver has every bucket of the sealed segments segs (their PIDs in
// st) forward what it held to its successors in next, and waits for them.
// A bucket that does not answer in time is logged and counted; the change
// goes on (its held appends are answered by its supervisor's restart, or
// forwarded when it gets to them).
func (c *controller) handOver(st *topicState, segs []topology.SegmentID, next *topicState) {
	var waits []chan struct{}
	for _, id := range segs {
		for _, pid := range st.buckets[id] {
			ch := make(chan struct{})
			waits = append(waits, ch)
			c.t.mgr.system.Root.Send(pid, handoverMsg{next: next, done: func() { close(ch) }})
		}
	}
	deadline := time.After(sealTimeout)
	for _, ch := range waits {
		select {
		case <-ch:
		case <-deadline:
			c.t.mgr.m.handoffFailures.Inc()
			c.t.mgr.log.Error("a sealed bucket did not hand over in time; opening its successors anyway",
				"topic", c.t.uri, "sealed", segs, "epoch", next.layout.Epoch)
			return
		}
	}
}

// open lets the buckets of the new segments segs take the appends they
// held back.
func (c *controller) open(st *topicState, segs []topology.SegmentID) {
	for _, id := range segs {
		for _, pid := range st.buckets[id] {
			c.t.mgr.system.Root.Send(pid, openMsg{})
		}
	}
}

// abandon stops the segments a failed change spawned and removes their
// logs: their ids will be allocated again.
func (c *controller) abandon(created []topology.SegmentID) {
	for _, id := range created {
		if pid, ok := c.segments[id]; ok {
			_ = c.t.mgr.system.Root.StopFuture(pid).Wait()
			delete(c.segments, id)
		}
		if err := c.t.mgr.store.RemoveSegment(c.t.name, id); err != nil {
			c.t.mgr.log.Warn("removing the logs of an abandoned segment", "topic", c.t.uri, "segment", id, "err", err)
		}
	}
}

// removeDeleted stops the actors of segments retention deleted and removes
// their logs once reads under way are done.
func (c *controller) removeDeleted(ids []topology.SegmentID) {
	for _, id := range ids {
		if pid, ok := c.segments[id]; ok {
			c.t.mgr.system.Root.Stop(pid)
			delete(c.segments, id)
		}
	}
	if len(ids) == 0 {
		return
	}
	store, name, log := c.t.mgr.store, c.t.name, c.t.mgr.log
	elsewhere := c.elsewhere(ids)
	time.AfterFunc(removeGrace, func() {
		for _, id := range ids {
			if err := store.RemoveSegment(name, id); err != nil {
				log.Warn("removing a deleted segment's logs", "topic", name.String(), "segment", id, "err", err)
			}
		}
		c.t.mgr.dropSegmentsElsewhere(c.t, elsewhere)
	})
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

// seal seals (or unseals) every bucket of the given segments and waits.
func (c *controller) seal(segs []topology.SegmentID, epoch uint64, unseal bool) error {
	return c.sealIn(c.t.state.Load(), segs, epoch, unseal)
}

// sealPIDs seals the buckets of segs as listed in snapshot st.
func (c *controller) sealPIDs(st *topicState, segs []topology.SegmentID, epoch uint64) error {
	return c.sealIn(st, segs, epoch, false)
}

func (c *controller) sealIn(st *topicState, segs []topology.SegmentID, epoch uint64, unseal bool) error {
	var waits []chan error
	for _, id := range segs {
		for _, pid := range st.buckets[id] {
			ch := make(chan error, 1)
			waits = append(waits, ch)
			c.t.mgr.system.Root.Send(pid, sealReq{epoch: epoch, unseal: unseal, done: func(_ uint64, err error) { ch <- err }})
		}
	}
	deadline := time.After(sealTimeout)
	for _, ch := range waits {
		select {
		case err := <-ch:
			if err != nil {
				return err
			}
		case <-deadline:
			return errors.New("a bucket did not seal in time")
		}
	}
	return nil
}

// diffActive returns the segments active in cur but not in next, and the
// reverse.
func diffActive(cur, next topology.Layout) (retiring, created []topology.SegmentID) {
	was := map[topology.SegmentID]bool{}
	for _, s := range cur.Active() {
		was[s.ID] = true
	}
	is := map[topology.SegmentID]bool{}
	for _, s := range next.Active() {
		is[s.ID] = true
		if !was[s.ID] {
			created = append(created, s.ID)
		}
	}
	for _, s := range cur.Active() {
		if !is[s.ID] {
			retiring = append(retiring, s.ID)
		}
	}
	return retiring, created
}

// newlyDeleted returns the segments deleted in next but not in cur.
func newlyDeleted(cur, next topology.Layout) []topology.SegmentID {
	var out []topology.SegmentID
	for _, s := range next.Segments {
		if s.State != topology.StateDeleted {
			continue
		}
		if was, ok := cur.Segment(s.ID); !ok || was.State != topology.StateDeleted {
			out = append(out, s.ID)
		}
	}
	return out
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
