package actors

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/meta"
	"github.com/braidmq/braid/topology"
)

// changeReq asks a controller to change its layout. apply computes the next
// layout from the current one (pure topology); op names it for metrics.
type changeReq struct {
	op    string
	apply func(topology.Layout) (topology.Layout, error)
}

// changeResp answers a changeReq.
type changeResp struct {
	desc api.TopicDescription
	err  error
}

// retireMsg stops the actors of a sealed segment once the grace period in
// which late appends still get SEGMENT_SEALED has passed.
type retireMsg struct{ seg topology.SegmentID }

// sealGrace is how long a sealed segment's actors keep answering
// SEGMENT_SEALED to appends routed by an older snapshot.
const sealGrace = 30 * time.Second

// sealTimeout bounds the wait for a bucket to flush and seal.
const sealTimeout = 10 * time.Second

// controller owns the layout of one topic.
//
// Invariant: rec.Layout is what the KV store holds at revision rev, and the
// topic's published snapshot is built from it.
type controller struct {
	t   *Topic
	rec meta.TopicRecord
	rev uint64
	// segments holds the segment actors alive: every active segment, and
	// sealed ones during their grace period.
	segments map[topology.SegmentID]*actor.PID
}

func (c *controller) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		c.segments = map[topology.SegmentID]*actor.PID{}
		buckets := map[topology.SegmentID][]*actor.PID{}
		for _, s := range c.rec.Layout.Active() {
			buckets[s.ID] = c.spawnSegment(ctx, s)
		}
		st, err := newState(c.rec.Layout, buckets)
		if err != nil {
			panic(fmt.Sprintf("topic %s: stored layout does not route: %v", c.t.uri, err))
		}
		c.t.publish(st)
		c.t.mgr.m.activeSegs.WithLabelValues(c.t.uri).Set(float64(len(buckets)))
	case *changeReq:
		desc, err := c.change(ctx, msg)
		ctx.Respond(&changeResp{desc: desc, err: err})
	case retireMsg:
		if pid, ok := c.segments[msg.seg]; ok {
			ctx.Stop(pid)
			delete(c.segments, msg.seg)
		}
	}
}

func (c *controller) spawnSegment(ctx actor.Context, s topology.Segment) []*actor.PID {
	ready := make(chan struct{})
	props := newSegmentProps(segmentActor{topic: c.t.name, id: s.ID, buckets: s.Buckets,
		store: c.t.mgr.store, opts: c.t.opts, log: c.t.mgr.log, m: c.t.mgr.m, ready: ready,
		sealedIn: func() uint64 {
			if seg, ok := c.t.Layout().Segment(s.ID); ok && seg.State != topology.StateActive {
				return seg.SealedEpoch
			}
			return 0
		}})
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
	return bucketPIDs(pid, s.Buckets)
}

// change applies one layout change: seal what retires, compare-and-swap the
// layout, spawn what is new, publish.
func (c *controller) change(ctx actor.Context, req *changeReq) (api.TopicDescription, error) {
	cur := c.rec.Layout
	next, err := req.apply(cur)
	if err != nil {
		return api.TopicDescription{}, layoutError(err)
	}
	retiring, created := diffActive(cur, next)
	if err := c.seal(retiring, next.Epoch, false); err != nil {
		_ = c.seal(retiring, 0, true)
		return api.TopicDescription{}, api.Errorf(api.CodeInternal, "seal %s: %v", c.t.uri, err)
	}
	rec := c.rec
	rec.Layout = next
	cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	rev, err := c.t.mgr.meta.UpdateTopic(cctx, c.t.name, rec, c.rev)
	cancel()
	if err != nil {
		// Nothing changed: reopen what was sealed. A conflict means another
		// controller changed the topic; this one is stale and must reload.
		_ = c.seal(retiring, 0, true)
		if errors.Is(err, meta.ErrConflict) {
			return api.TopicDescription{}, api.Errorf(api.CodeUnavailable, "layout of %s changed elsewhere; retry: %v", c.t.uri, err)
		}
		return api.TopicDescription{}, api.Errorf(api.CodeInternal, "persist layout of %s: %v", c.t.uri, err)
	}
	c.rec, c.rev = rec, rev

	old := c.t.state.Load()
	buckets := make(map[topology.SegmentID][]*actor.PID, len(old.buckets))
	for id, pids := range old.buckets {
		buckets[id] = pids
	}
	self, root := ctx.Self(), ctx.ActorSystem().Root
	for _, id := range retiring {
		delete(buckets, id)
		seg := id
		time.AfterFunc(sealGrace, func() { root.Send(self, retireMsg{seg: seg}) })
	}
	for _, id := range created {
		s, _ := next.Segment(id)
		buckets[id] = c.spawnSegment(ctx, s)
	}
	st, err := newState(next, buckets)
	if err != nil {
		// Cannot happen for a layout that passed topology's checks; refuse
		// loudly rather than route wrongly.
		panic(fmt.Sprintf("topic %s: layout epoch %d does not route: %v", c.t.uri, next.Epoch, err))
	}
	c.t.publish(st)
	// Seal again now that the layout says so: a bucket restarted between
	// the first seal and the publish took its seal from the old layout.
	_ = c.sealPIDs(old, retiring, next.Epoch)
	c.t.mgr.m.layoutChanges.WithLabelValues(req.op).Inc()
	c.t.mgr.m.activeSegs.WithLabelValues(c.t.uri).Set(float64(len(buckets)))
	desc := Describe(c.t.uri, next)
	c.t.mgr.publishLayout(c.t, desc)
	c.t.mgr.log.Info("layout changed", "topic", c.t.uri, "op", req.op, "epoch", next.Epoch,
		"sealed", retiring, "created", created)
	return desc, nil
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

// layoutError maps a topology refusal to its wire code.
func layoutError(err error) error {
	switch {
	case errors.Is(err, topology.ErrUnknownSegment):
		return api.Errorf(api.CodeSegmentNotFound, "%v", err)
	case errors.Is(err, topology.ErrSplitPoint), errors.Is(err, topology.ErrBuckets), errors.Is(err, topology.ErrBadHash):
		return api.Errorf(api.CodeInvalidArgument, "%v", err)
	default:
		return api.Errorf(api.CodeLayoutRefused, "%v", err)
	}
}
