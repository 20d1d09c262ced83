package actors

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/meta"
	"github.com/braidmq/braid/topology"
)

// A layout change, carried out. topology.PlanChange says what to do and in
// what order (see topology/plan.go for the order and why); the controller
// does each step with one method below, in the plan's order, and when a
// step fails, does what the plan's Rollback says. Nothing here decides the
// order: a step only does its I/O.
//
// Placement is not a step: before the first one, the controller gives the
// created segments their owners (placeCreated: the home keeps the segment
// covering hash 0, Config.PlaceSegment names the node of the others). It
// only reads the cluster's placement, changes nothing outside the
// controller, and so has nothing to undo; the steps then spawn, persist and
// publish the placed layout.

// changeRun is one layout change under way: its plan, and what its steps
// have made so far, which the later steps and the rollback use.
type changeRun struct {
	req  *changeReq
	plan topology.Plan
	// old is the snapshot published before the change: it holds the
	// PIDs of the retiring segments' buckets, which seal, reseal and
	// handover address.
	old *topicState
	// buckets, lanes and meters become the next snapshot's: the old
	// snapshot's, plus what spawn started, less the retiring segments
	// (publish).
	buckets map[topology.SegmentID][]*actor.PID
	lanes   map[topology.SegmentID][]*bucketLane
	meters  map[topology.SegmentID]*segmentMeter
	// rec is the record persist wrote; st the snapshot publish published;
	// desc the description announce pushed, the change's answer.
	rec  meta.TopicRecord
	st   *topicState
	desc api.TopicDescription
	// took holds each step's kind and duration, for the log.
	took []any
}

// change carries out req: it plans the change on the current layout, then
// runs the plan's steps in order, and undoes the change as the plan says
// when one fails. Why the order keeps every key's appends in order, and
// refuses none of a plain producer's: topology/plan.go.
func (c *controller) change(ctx actor.Context, req *changeReq) (api.TopicDescription, error) {
	plan, err := topology.PlanChange(c.rec.Layout, req.op)
	if errors.Is(err, topology.ErrStale) {
		return api.TopicDescription{}, err // the scaler's own; it decides again
	}
	if err != nil {
		return api.TopicDescription{}, layoutError(err)
	}
	// In a layout written before nodes had ids, this node owns what it
	// serves; a relocation's successors are placed anew.
	plan.Next = c.placeCreated(plan.Next, plan.Created, req.op.Kind == topology.OpRelocate)
	old := c.t.state.Load()
	run := &changeRun{req: req, plan: plan, old: old,
		buckets: maps.Clone(old.buckets), lanes: maps.Clone(old.lanes), meters: maps.Clone(old.meters)}
	// The seal step records the change under way for buckets that
	// restart (Topic.setSealing); it ends with the change, also when the
	// controller crashes in it (deferred calls run as it panics).
	defer c.t.setSealing(nil, 0)
	for k, step := range plan.Steps {
		began := time.Now()
		if err := c.runStep(ctx, run, step); err != nil {
			c.rollback(ctx, plan.Rollback(k), step)
			return api.TopicDescription{}, err
		}
		run.took = append(run.took, string(step.Kind), time.Since(began))
		if hook := c.t.mgr.afterStep; hook != nil {
			hook(c.t.uri, k, step)
		}
	}
	return run.desc, nil
}

// runStep does one step of run's plan.
func (c *controller) runStep(ctx actor.Context, run *changeRun, s topology.Step) error {
	switch s.Kind {
	case topology.StepSpawn:
		return c.spawnStep(ctx, run, s)
	case topology.StepSeal:
		return c.sealStep(run, s)
	case topology.StepPersist:
		return c.persistStep(run)
	case topology.StepPublish:
		c.publishStep(run)
	case topology.StepRetire:
		c.retireStep(ctx, s)
	case topology.StepRemove:
		c.removeDeleted(s.Segments)
	case topology.StepReseal:
		// Belt and braces: a bucket that restarted (and read its seal)
		// before the seal step recorded the change reads it now from the
		// published layout; sealing it again is harmless.
		_ = c.sealIn(run.old, s.Segments, s.Epoch, false)
	case topology.StepHandOver:
		c.handOver(run.old, s.Segments, run.st)
	case topology.StepOpen:
		c.open(run.st, s.Segments)
	case topology.StepAnnounce:
		c.announce(ctx, run)
	default:
		return api.Errorf(api.CodeInternal, "layout change of %s: no step %q", c.t.uri, s.Kind)
	}
	return nil
}

// rollback undoes a change whose step failed, by the plan's undo steps.
func (c *controller) rollback(ctx actor.Context, undo []topology.Step, failed topology.Step) {
	for _, s := range undo {
		switch s.Kind {
		case topology.StepUnseal:
			// Restarted buckets must read them active again before the
			// unseal appends what the buckets held.
			c.t.setSealing(nil, 0)
			_ = c.seal(s.Segments, 0, true)
		case topology.StepAbandon:
			c.abandon(s.Segments)
		case topology.StepReload:
			// The record moved on (a conflict), the store did not say
			// whether it took the change (a timeout: it may have), or the
			// store holds a layout this controller did not finish
			// serving: it restarts, and reads the record again.
			ctx.Send(ctx.Self(), controllerCrash{reason: fmt.Sprintf("its layout change failed at %s and its record may differ from the store's", failed.Kind)})
		}
	}
}

// spawnStep starts the created segments, gated: they take no direct
// append until the open step.
func (c *controller) spawnStep(ctx actor.Context, run *changeRun, s topology.Step) error {
	for _, id := range s.Segments {
		seg, _ := run.plan.Next.Segment(id)
		pids, lanes, meter, err := c.startSegment(ctx, seg, true)
		if err != nil {
			return api.Errorf(api.CodeInternal, "layout change of %s: %v", c.t.uri, err)
		}
		run.buckets[id], run.lanes[id], run.meters[id] = pids, lanes, meter
	}
	return nil
}

// sealStep seals the retiring segments' buckets at the next epoch: each
// flushes what it accepted and holds what comes after (or refuses it, for
// producers that route by epoch).
func (c *controller) sealStep(run *changeRun, s topology.Step) error {
	// A bucket restarted from here until the publish takes its seal from
	// this record (the layout it reads still says active).
	c.t.setSealing(s.Segments, s.Epoch)
	if err := c.seal(s.Segments, s.Epoch, false); err != nil {
		return api.Errorf(api.CodeInternal, "seal %s: %v", c.t.uri, err)
	}
	// A relocation seals the segments of an owner that is gone, or
	// draining (then it still holds them).
	t := c.t
	t.mgr.holdLogs(t.name, t.incarnation, *t.opts.Load(), t.state.Load().layout, s.Segments, run.req.op.Kind == topology.OpRelocate)
	return nil
}

// persistStep writes the next layout by compare-and-swap on the record's
// revision: the change's commit. A stale controller fails here.
func (c *controller) persistStep(run *changeRun) error {
	next, cur := run.plan.Next, c.rec.Layout
	rec := c.rec
	rec.Layout = next
	rec.EpochTimes = maps.Clone(c.rec.EpochTimes)
	now := time.Now().UnixMilli()
	for e := cur.Epoch + 1; e <= next.Epoch; e++ {
		rec.EpochTimes[e] = now
	}
	pruneEpochTimes(next, rec.EpochTimes)
	cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	rev, err := c.t.mgr.meta.UpdateTopic(cctx, c.t.name, rec, c.rev)
	cancel()
	if errors.Is(err, meta.ErrConflict) {
		return api.Errorf(api.CodeUnavailable, "layout of %s changed elsewhere; retry: %v", c.t.uri, err)
	}
	if err != nil {
		return api.Errorf(api.CodeUnavailable, "persist layout of %s: %v; retry", c.t.uri, err)
	}
	c.rec, c.rev = rec, rev
	run.rec = rec
	return nil
}

// publishStep publishes the next layout's snapshot under routeMu: from
// then on no append is routed by the old one, and every append routed by
// it is in a mailbox.
func (c *controller) publishStep(run *changeRun) {
	for _, id := range run.plan.Sealed {
		delete(run.buckets, id)
		delete(run.lanes, id)
		delete(run.meters, id)
	}
	st, err := newState(run.plan.Next, run.buckets, run.lanes, run.meters, run.rec.EpochTimes)
	if err != nil {
		// Cannot happen for a layout that passed topology's checks; refuse
		// loudly rather than route wrongly.
		panic(fmt.Sprintf("topic %s: layout epoch %d does not route: %v", c.t.uri, run.plan.Next.Epoch, err))
	}
	c.t.publishQuiesced(st)
	run.st = st
}

// retireStep stops the sealed segments' actors once the grace period in
// which appends routed by an older snapshot get SEGMENT_SEALED is over.
func (c *controller) retireStep(ctx actor.Context, s topology.Step) {
	self, root := ctx.Self(), ctx.ActorSystem().Root
	for _, id := range s.Segments {
		seg := id
		time.AfterFunc(sealGrace, func() { root.Send(self, retireMsg{seg: seg}) })
	}
}

// announce pushes the new layout and counts the change.
func (c *controller) announce(ctx actor.Context, run *changeRun) {
	op := string(run.req.op.Kind)
	c.t.mgr.m.layoutChanges.WithLabelValues(op).Inc()
	c.t.mgr.m.scalingOps.WithLabelValues(topicLabels(c.t.uri, op, run.req.reason)...).Inc()
	c.t.mgr.m.activeSegs.WithLabelValues(topicLabels(c.t.uri)...).Set(float64(len(run.buckets)))
	run.desc = Describe(c.t.uri, run.plan.Next)
	c.t.mgr.publishLayout(c.t.name, run.desc)
	c.scheduleOwnerCheck(ctx)
	p := run.plan
	attrs := []any{"topic", c.t.uri, "op", run.req.op.String(), "reason", run.req.reason, "epoch", p.Next.Epoch,
		"sealed", p.Sealed, "created", p.Created, "deleted", p.Deleted}
	c.t.mgr.log.Info("layout changed", append(attrs, run.took...)...)
}

// handOver has every bucket of the sealed segments segs (their PIDs in
// st) forward what it held to its successors in next, and waits for their
// answers within sealTimeout. A bucket that is gone (a dead letter) held
// nothing any more: its stop answered what it held. One that does not
// answer in time is logged and counted; the change goes on (its held
// appends are answered by its supervisor's restart, or forwarded when it
// gets to them).
func (c *controller) handOver(st *topicState, segs []topology.SegmentID, next *topicState) {
	root := c.t.mgr.system.Root
	var futures []*actor.Future
	for _, id := range segs {
		for _, pid := range st.buckets[id] {
			futures = append(futures, root.RequestFuture(pid, handoverMsg{next: next}, sealTimeout))
		}
	}
	for _, f := range futures {
		if _, err := f.Result(); errors.Is(err, actor.ErrTimeout) {
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
		if seg, ok := c.segments[id]; ok {
			_ = c.t.mgr.system.Root.StopFuture(seg.pid).Wait()
			delete(c.segments, id)
		}
		c.t.mgr.stopGroups(c.t.name, int64(id))
		if err := c.t.mgr.store.RemoveSegment(c.t.name, id); err != nil {
			c.t.mgr.log.Warn("removing the logs of an abandoned segment", "topic", c.t.uri, "segment", id, "err", err)
		}
	}
}

// removeDeleted stops the actors of segments retention deleted and removes
// their logs once reads under way are done.
func (c *controller) removeDeleted(ids []topology.SegmentID) {
	for _, id := range ids {
		if seg, ok := c.segments[id]; ok {
			c.t.mgr.system.Root.Stop(seg.pid)
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
			c.t.mgr.stopGroups(name, int64(id))
			if err := store.RemoveSegment(name, id); err != nil {
				log.Warn("removing a deleted segment's logs", "topic", name.String(), "segment", id, "err", err)
			}
		}
		c.t.mgr.dropSegmentsElsewhere(c.t, elsewhere)
	})
}

// seal seals (or unseals) every bucket of the given segments and waits.
func (c *controller) seal(segs []topology.SegmentID, epoch uint64, unseal bool) error {
	return c.sealIn(c.t.state.Load(), segs, epoch, unseal)
}

// sealIn seals (or unseals) the buckets of segs as listed in snapshot st,
// and waits for their answers within sealTimeout; a bucket that is gone
// (a dead letter) or does not answer in time fails the seal.
func (c *controller) sealIn(st *topicState, segs []topology.SegmentID, epoch uint64, unseal bool) error {
	root := c.t.mgr.system.Root
	var futures []*actor.Future
	for _, id := range segs {
		for _, pid := range st.buckets[id] {
			futures = append(futures, root.RequestFuture(pid, sealReq{epoch: epoch, unseal: unseal}, sealTimeout))
		}
	}
	for _, f := range futures {
		switch _, err := f.Result(); {
		case errors.Is(err, actor.ErrTimeout):
			return errors.New("a bucket did not seal in time")
		case err != nil:
			return fmt.Errorf("a bucket did not seal: %w", err)
		}
	}
	return nil
}
