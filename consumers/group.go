package consumers

import (
	"errors"
	"github.com/braidmq/braid/internal/labels"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/clock"
	"github.com/braidmq/braid/topology"
	"github.com/braidmq/braid/wal"
)

// groupConfig is what a group actor is spawned with.
type groupConfig struct {
	Subscription string
	Dir          string // the group's WAL directory; created by the first join
	Source       Source
	Logger       *slog.Logger
	Durability   wal.Durability
	// Logs opens the group's state log (nil: LocalLogs).
	Logs LogOpener
	// CompactAfter is the number of records past which the log is
	// rewritten as one snapshot.
	CompactAfter          int
	DefaultSessionTimeout time.Duration
	// OnStopped is called from the actor once it has stopped for good (not
	// on a restart), its log closed.
	OnStopped func(*actor.PID)
	// Reassigned, when not nil, counts the units that left their owner
	// (handed over, or released by a consumer that left or died).
	Reassigned *atomic.Uint64
	// Queue configures the groups of a QueueManager.
	Queue queueOptions
	// Notices are the manager's (notice.go); nil for none.
	Notices *noticeBoard
	// Clock is the manager's: every time the group reads and every timer
	// it arms come from it (nil: clock.Real).
	Clock clock.Clock
}

// incarnations numbers every start of every group actor of the process.
var incarnations atomic.Uint64

// unitState is the group's view of one readable unit.
type unitState struct {
	// acked is the durable ack cursor: the next offset not yet acknowledged.
	// delivered is the next offset to hand out.
	// Invariant: acked <= delivered.
	acked, delivered uint64
	// owner is the consumer that receives the unit's messages and may
	// acknowledge them; "" when nobody holds it. While owner differs from
	// the unit's target, the unit is being handed over: the owner may still
	// acknowledge, nobody receives anything, and the target takes it once
	// acked == delivered. The owner is recorded in the log (owners.go).
	owner string
	// restoredUntil is set when the owner was restored from the log after
	// a restart: it is the unit's next offset then, a bound of what the
	// owner may have been delivered before. The unit does not leave its
	// owner before acked reaches it, and while it is being handed over the
	// owner still receives the offsets below it (to acknowledge them
	// again). 0 otherwise.
	restoredUntil uint64
	// counts remembers earlier deliveries of the offsets past acked.
	counts deliveryCounts
	// lost are the runs of offsets past acked that delivery skipped, as
	// their records were lost to damage (lost.go), in offset order.
	lost []lostRun
}

// consumerState is one live consumer.
type consumerState struct {
	name     string
	timeout  time.Duration
	lastSeen time.Time
	// held lists every unit the consumer has owned, so that an ack of a
	// unit it never owned is told apart from a late one.
	held map[topology.Unit]bool
	// rr rotates the unit a fetch starts with, so that no unit starves.
	rr int
	// parked is the consumer's fetch waiting for data, if any. A consumer
	// with a parked fetch is alive whatever its lastSeen says.
	parked *parkedFetch
}

// parkedFetch is a fetch waiting for data until its Wait is over.
type parkedFetch struct {
	req   *Fetch
	until time.Time // when it is answered empty
}

// ackBatch is the group commit of acks: the cursors and drained segments
// waiting for the next flush, and the replies due once they are durable.
type ackBatch struct {
	cursors   map[topology.Unit]uint64
	drained   []topology.SegmentID
	replies   []func(error)
	scheduled bool // a flushNow is in the mailbox
}

func (b *ackBatch) empty() bool {
	return len(b.cursors) == 0 && len(b.drained) == 0 && len(b.replies) == 0
}

// group is the actor of one subscription. It is a thin shell: the ordering
// rule (topology), the assignment (Assign) and the record codec are pure;
// the group does the I/O around them. Everything below is touched only from
// the actor's goroutine.
type group struct {
	groupBase

	state subscriptionState
	batch ackBatch

	// layout is the last layout refresh saw; dirty says the readable units
	// or the assignment may have changed since.
	layout topology.Layout
	dirty  bool

	units   map[topology.Unit]*unitState // the readable units
	targets map[topology.Unit]string     // Assign's answer
	// awaiting holds, after a restart, the previous owners of units (as
	// the log names them) that have not joined again, with the end of
	// their grace: their session timeout from the group's start.
	awaiting map[string]time.Time
	// ownersChanged says an owner may differ from the log's: refresh
	// writes an owners record.
	ownersChanged bool
	// readWarned is when a failed read was last logged; readWarnSuppressed
	// counts those not logged since.
	readWarned         time.Time
	readWarnSuppressed int
	// restoredUntil holds, from the group's start until the unit is built,
	// the next offset of each unit the log names an owner of (see
	// unitState.restoredUntil).
	restoredUntil map[topology.Unit]uint64
}

// groupSupervision restarts a failed group every time. A group's start
// never fails (a log it cannot load puts it in broken mode instead) and the
// message that made it panic is answered and dropped, so restarts cannot
// loop; stopping instead, as protoactor's default strategy does after ten
// failures, would drop the requests queued in its mailbox unanswered.
var groupSupervision = actor.NewRestartingStrategy()

func newGroupProps(cfg groupConfig) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor {
		return &group{groupBase: newGroupBase(cfg, cfg.Logger.With("subscription", cfg.Subscription), "subscription")}
	}, actor.WithGuardian(groupSupervision), actor.WithDispatcher(groupLabels(cfg, "stream")))
}

// Receive implements actor.Actor.
func (g *group) Receive(ctx actor.Context) {
	switch ctx.Message().(type) {
	case *actor.Started:
		g.begin(ctx)
		g.load()
		return
	case *actor.Restarting:
		g.end(api.Errorf(api.CodeUnavailable, "subscription %q restarted", g.cfg.Subscription))
		return
	case *actor.Stopping:
		g.stop()
		return
	case *actor.Stopped:
		if g.cfg.OnStopped != nil {
			g.cfg.OnStopped(ctx.Self())
		}
		return
	}

	if g.preAccept(ctx.Message()) {
		return
	}
	if !g.accept(g, ctx.Message()) {
		return
	}
	switch m := ctx.Message().(type) {
	case *Join:
		g.onJoin(m)
	case *Fetch:
		g.onFetch(m)
	case *Ack:
		g.onAck(m)
	case *Leave:
		g.onLeave(m)
	case *GetStats:
		g.onStats(m)
	case *getInfo:
		g.onInfo(m)
	case *seekSub:
		g.onSeek(m)
	case flushNow:
		g.flush()
		g.serveParked()
	default:
		g.onWake(g, m)
	}
	g.current = nil
	g.armTimer(g.nextDeadline())
}

// load resets the state and rebuilds it from the log, if the subscription
// exists on disk. A failure leaves the group broken. It runs on the first
// start and after every restart: the state is always the log's, never what
// a failed predecessor had in memory.
func (g *group) load() {
	g.state = newSubscriptionState()
	g.batch = ackBatch{cursors: make(map[topology.Unit]uint64)}
	g.units = make(map[topology.Unit]*unitState)
	g.targets = make(map[topology.Unit]string)
	g.consumers = make(map[string]*consumerState)
	g.awaiting = make(map[string]time.Time)
	g.restoredUntil = make(map[topology.Unit]uint64)
	g.ownersChanged = false
	g.layout = topology.Layout{}
	g.dirty = true
	g.broken = nil

	if err := g.openLog(); err != nil {
		g.broken, g.brokenAt = err, g.clock.Now()
		g.logger.Error("consumer group cannot load its state", "dir", g.cfg.Dir, "err", err)
		return
	}
	if g.log == nil {
		return // created by the first join
	}
	g.restoreAwaited(g.clock.Now())
}

// openLog opens the log, replays it into g.state and compacts it when it
// has grown past CompactAfter records.
func (g *group) openLog() error {
	err := g.openStateLog(false, func(payload []byte) error {
		r, err := decodeRecord(payload)
		if err != nil {
			return err
		}
		return g.state.apply(r)
	})
	if err != nil || g.log == nil {
		return err
	}
	g.logger.Debug("consumer group replayed", "records", g.records,
		"cursors", len(g.state.Cursors), "drained", len(g.state.Drained))
	return g.maybeCompact()
}

// appendRecord writes r durably (per the configured durability).
func (g *group) appendRecord(r stateRecord) (uint64, error) {
	return g.appendCounted(encodeRecord(nil, r))
}

// maybeCompact rewrites the log as one snapshot once it holds more than
// CompactAfter records.
func (g *group) maybeCompact() error {
	return g.compactIfDue(g.state.Created, func() []byte { return encodeRecord(nil, g.state.snapshot()) })
}

// end releases what this incarnation holds, answering every request still
// waiting with err (or an empty reply for parked fetches). It serves both a
// restart and, after a final flush, a stop.
func (g *group) end(err error) {
	if g.done == nil {
		return // never started
	}
	replies := g.batch.replies
	g.batch = ackBatch{cursors: make(map[topology.Unit]uint64)}
	g.endIncarnation(g, err, replies, "closing consumer group log")
}

// stop flushes what is pending and ends the incarnation.
func (g *group) stop() {
	if g.broken == nil && g.log != nil && !g.batch.empty() {
		g.flushOrFail(false)
	}
	g.end(api.Errorf(api.CodeUnavailable, "subscription %q is stopping", g.cfg.Subscription))
}

// refuse answers any request message with err.
func (g *group) refuse(msg any, err error) {
	switch m := msg.(type) {
	case *Join:
		replyJoin(m, api.JoinReply{}, err)
	case *Fetch:
		replyFetch(m, nil, 0, err)
	case *Ack:
		replyErr(m.Reply, err)
	case *Leave:
		replyErr(m.Reply, err)
	case *GetStats:
		if m.Reply != nil {
			m.Reply(Stats{}, err)
		}
	default:
		refuseAdmin(msg, err)
	}
}

func replyJoin(m *Join, r api.JoinReply, err error) {
	if m.Reply != nil {
		m.Reply(r, err)
	}
}

func replyFetch(m *Fetch, msgs []api.Message, assigned int, err error) {
	if m.Reply != nil {
		m.Reply(msgs, assigned, err)
	}
}

func replyErr(reply func(error), err error) {
	if reply != nil {
		reply(err)
	}
}

func (g *group) onJoin(m *Join) {
	if !g.state.Created {
		if err := g.create(m.Start, m.ReadCompacted); err != nil {
			replyJoin(m, api.JoinReply{}, err)
			return
		}
	}
	if m.ReadCompacted != g.state.Start.compacted() {
		replyJoin(m, api.JoinReply{}, api.Errorf(api.CodeInvalidArgument,
			"subscription %q was created with read_compacted %v; join it with read_compacted %v (or use another subscription)",
			g.cfg.Subscription, g.state.Start.compacted(), g.state.Start.compacted()))
		return
	}
	now := g.clock.Now()
	c := g.consumers[m.Consumer]
	timeout := m.SessionTimeout
	if timeout <= 0 {
		timeout = g.cfg.DefaultSessionTimeout
	}
	if c == nil {
		c = &consumerState{name: m.Consumer, held: make(map[topology.Unit]bool)}
		g.consumers[m.Consumer] = c
		g.dirty = true
		g.logger.Info("consumer joined", "consumer", m.Consumer, "consumers", len(g.consumers))
		g.returned(c)
	}
	if c.timeout != timeout {
		c.timeout = timeout
		g.ownersChanged = true // an owner's timeout is recorded
	}
	c.lastSeen = now
	replyJoin(m, api.JoinReply{Subscription: g.cfg.Subscription, Consumer: m.Consumer, Consumers: len(g.consumers)}, nil)
}

// create writes the subscription's first record. Starting at latest records
// the next offset of every unit of every active segment as its cursor and
// every sealed segment as drained, so that only what is appended from now on
// is delivered.
func (g *group) create(start string, compacted bool) error {
	rec := stateRecord{Kind: kindCreated, Start: startEarliest}
	if compacted {
		rec.Start |= startCompacted
	}
	if start == api.StartLatest {
		rec.Start |= startLatest
		l := g.cfg.Source.Layout()
		for _, s := range l.Segments {
			if s.State != topology.StateActive {
				rec.Drained = append(rec.Drained, s.ID)
				continue
			}
			for b := range s.Buckets {
				_, next, err := g.cfg.Source.Bounds(s.ID, b)
				if err != nil {
					return api.Errorf(api.CodeUnavailable, "subscription %q: reading the end of segment %d bucket %d: %v", g.cfg.Subscription, s.ID, b, err)
				}
				rec.Cursors = append(rec.Cursors, unitCursor{Unit: topology.Unit{Segment: s.ID, Bucket: b}, Acked: next})
			}
		}
	}
	rec.normalize()
	if g.log == nil {
		if err := g.openStateLog(true, func([]byte) error { return errors.New("the log of a subscription being made holds records") }); err != nil {
			return api.Errorf(api.CodeUnavailable, "subscription %q: opening its log: %v", g.cfg.Subscription, err)
		}
	}
	if _, err := g.appendRecord(rec); err != nil {
		replyJoin(g.current.(*Join), api.JoinReply{}, api.Errorf(api.CodeInternal, "subscription %q: writing its creation: %v", g.cfg.Subscription, err))
		g.failLog(err)
	}
	if err := g.state.apply(rec); err != nil {
		return api.Errorf(api.CodeInternal, "subscription %q: %v", g.cfg.Subscription, err)
	}
	g.dirty = true
	g.logger.Info("subscription created", "start", rec.Start.String(), "read_compacted", rec.Start.compacted())
	return nil
}

func (g *group) onLeave(m *Leave) {
	if c := g.consumers[m.Consumer]; c != nil {
		g.removeConsumer(c, "left")
		g.serveParked()
	} else if g.awaited(m.Consumer) {
		g.releaseAwaited(m.Consumer, "left")
		g.serveParked()
	}
	replyErr(m.Reply, nil)
}

// nextDeadline is the earliest of the consumers' deadlines (sessions,
// parked fetches), the ends of the previous owners' graces and the log's
// maintenance.
func (g *group) nextDeadline() time.Time {
	return earlier(earlier(consumersDeadline(g.consumers), graceDeadline(g.awaiting)), g.logDeadline())
}

// onDeadline declares dead the previous owners whose grace ended and the
// consumers silent past their session timeout, then answers empty the
// parked fetches whose wait is over (after the units of the dead moved, so
// a fetch due at the same moment gets what they released).
func (g *group) onDeadline(now time.Time) {
	g.expireConsumers(now)
	g.releaseParkedOver(g, now)
	g.maintainLog(now)
}

// expireConsumers declares dead every consumer silent for longer than its
// session timeout, and every previous owner awaited since a restart for
// longer than its own.
func (g *group) expireConsumers(now time.Time) {
	released := g.expireAwaited(now)
	dead := deadConsumers(g.consumers, now)
	for _, c := range dead {
		g.removeConsumer(c, "session timed out")
	}
	if len(dead) > 0 || released {
		g.serveParked()
	}
}

// removeConsumer takes c out of the group: the acks it sent are made
// durable first, then each unit it held rewinds its delivery cursor to the
// ack cursor (what c did not acknowledge is delivered again) and goes to
// whoever Assign picks next.
func (g *group) removeConsumer(c *consumerState, why string) {
	if !g.batch.empty() {
		g.flushOrFail(true)
	}
	if c.parked != nil {
		g.releaseParked(c, nil, nil)
	}
	redelivered := uint64(0)
	for u, us := range g.units {
		if us.owner != c.name {
			continue
		}
		redelivered += us.delivered - us.acked
		us.counts.rewind(us.acked, us.delivered)
		us.delivered = us.acked
		g.setOwner(u, us, "")
		g.countReassigned()
	}
	delete(g.consumers, c.name)
	g.dirty = true
	g.logger.Info("consumer removed", "consumer", c.name, "reason", why,
		"redelivering", redelivered, "consumers", len(g.consumers))
}

func (g *group) countReassigned() {
	if g.cfg.Reassigned != nil {
		g.cfg.Reassigned.Add(1)
	}
}

// groupLabels is the dispatcher of a group's actor: its runs carry the
// pprof labels of its topic, subscription and kind.
func groupLabels(cfg groupConfig, kind string) actor.Dispatcher {
	topic := ""
	if cfg.Source != nil {
		topic = cfg.Source.Topic()
	}
	return labels.Dispatcher("braid_topic", topic, "braid_subscription", cfg.Subscription, "braid_group", kind)
}
