package actors

import (
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/braidmq/braid/internal/labels"

	"github.com/braidmq/braid/logstore"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/braidmq/braid/routing"
	"github.com/braidmq/braid/topology"
	"github.com/braidmq/braid/wal"
)

// segmentActor supervises the bucket actors of one active segment. A bucket
// that panics is restarted (it reopens and repairs its log); more than
// maxRestarts within restartWindow stops it.
type segmentActor struct {
	topic   routing.TopicName
	id      topology.SegmentID
	buckets int
	store   *logstore.Store
	opts    wal.Options
	log     *slog.Logger
	m       *metrics
	// t is the topic: restarted buckets read their seal there.
	t *Topic
	// gates holds one gate per bucket for a segment a layout change
	// creates (set: hold back direct appends until openMsg); nil otherwise.
	gates []*atomic.Bool
	// lanes holds each bucket's lane (bucketLane).
	lanes []*bucketLane
	meter *segmentMeter
	// owner is the node that owns the segment when it is another one
	// (its buckets write there), else "".
	owner string
	// replicas are the segment's replicas when it is replicated (its
	// buckets propose to their raft groups: replicated.go).
	replicas []topology.Replica
	// ready is closed once the bucket actors are spawned (their PIDs then
	// accept messages, which queue behind their Started).
	ready chan struct{}
}

const (
	maxRestarts   = 10
	restartWindow = 10 * time.Second
)

func bucketName(b int) string { return fmt.Sprintf("b-%d", b) }

// segmentName names the actor of segment id spawned by a controller
// restarted restarts times: "seg-<id>", then "seg-<id>~<restarts>". A
// restarted controller names its segments apart from the ones it had, so
// that whatever still addresses a bucket of before the restart (a PID in
// an older snapshot) reaches no actor, a dead letter answered UNAVAILABLE,
// and never the bucket that took its place: through the old snapshot's
// lane, not that bucket's, an append could be overtaken there by one of
// its key routed by the new snapshot (which a crash test saw before the
// restart fenced routing; fenceForRestart now leaves nothing routed to
// the old buckets, and this keeps a miss there from reordering keys).
func segmentName(id topology.SegmentID, restarts int) string {
	if restarts == 0 {
		return fmt.Sprintf("seg-%d", id)
	}
	return fmt.Sprintf("seg-%d~%d", id, restarts)
}

func newSegmentProps(s segmentActor) *actor.Props {
	decider := func(reason any) actor.Directive {
		s.log.Error("bucket actor failed; restarting it", "topic", s.topic.String(), "segment", s.id, "reason", reason)
		s.m.restarts.Inc()
		return actor.RestartDirective
	}
	return actor.PropsFromProducer(func() actor.Actor { c := s; return &c },
		actor.WithSupervisor(actor.NewOneForOneStrategy(maxRestarts, restartWindow, decider)),
		actor.WithDispatcher(labels.Dispatcher("braid_topic", s.topic.String(), "braid_segment", strconv.FormatUint(uint64(s.id), 10))))
}

func (s *segmentActor) Receive(ctx actor.Context) {
	if _, ok := ctx.Message().(*actor.Started); ok {
		for b := 0; b < s.buckets; b++ {
			key := UnitKey{Topic: s.topic, Segment: s.id, Bucket: b}
			if _, err := ctx.SpawnNamed(newBucketProps(key, s.t, s.store, s.opts, s.log, s.m, s.meter.buckets[b], s.gate(b), s.lane(b), s.owner, s.replicas), bucketName(b)); err != nil {
				panic(fmt.Sprintf("spawn bucket %s: %v", key, err))
			}
		}
		select {
		case <-s.ready: // a restart: already announced
		default:
			close(s.ready)
		}
	}
}

func (s *segmentActor) gate(b int) *atomic.Bool {
	if s.gates == nil {
		return nil
	}
	return s.gates[b]
}

func (s *segmentActor) lane(b int) *bucketLane {
	if b < len(s.lanes) {
		return s.lanes[b]
	}
	return nil
}

// bucketPIDs are the PIDs of a segment's buckets, derived from the segment's
// PID (children are named b-<n>).
func bucketPIDs(seg *actor.PID, buckets int) []*actor.PID {
	out := make([]*actor.PID, buckets)
	for b := range out {
		out[b] = actor.NewPID(seg.Address, seg.Id+"/"+bucketName(b))
	}
	return out
}
