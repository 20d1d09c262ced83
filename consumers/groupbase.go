package consumers

import (
	"cmp"
	"errors"
	"log/slog"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/clock"
	"github.com/braidmq/braid/wal"
)

// groupBase is what both kinds of group actor keep about their own
// incarnation, their log and their live consumers, with the timer and
// watchers around them. Touched from the actor's goroutine only.
type groupBase struct {
	cfg    groupConfig
	clock  clock.Clock // cfg.Clock, or clock.Real
	logger *slog.Logger
	// kind names the group in a log write failure: "subscription" or
	// "queue subscription".
	kind string

	// current is the request being handled, answered with an error if its
	// handling panics (protoactor drops that message on restart).
	current any
	// broken is set when the log cannot be opened or replayed: every
	// request is refused rather than served from a state that is not the
	// durable one.
	broken   error
	brokenAt time.Time
	// retired is set once the subscription is deleted (subscriptions.go):
	// every request is refused with it until the group stops.
	retired *api.Error

	log StateLog
	// records counts the records in the log (since the last snapshot).
	records int

	system      *actor.ActorSystem
	self        *actor.PID
	incarnation uint64
	// done is closed when this incarnation ends; watcher goroutines exit.
	done chan struct{}

	consumers map[string]*consumerState
	watching  bool // a goroutine waits on Source.Appended
	// timer is the group's one timer (deadlines.go), armed for timerAt:
	// no deadline of the group comes before timerAt. nil when none is
	// armed, or when it fired and its deadlineCheck is not handled yet.
	timer   clock.Timer
	timerAt time.Time
}

func newGroupBase(cfg groupConfig, logger *slog.Logger, kind string) groupBase {
	return groupBase{cfg: cfg, clock: clock.Or(cfg.Clock), logger: logger, kind: kind}
}

// groupActor is what groupBase needs of the group actor that embeds it.
type groupActor interface {
	load()
	refuse(msg any, err error)
	releaseParked(c *consumerState, msgs []api.Message, err error)
	serveParked()
	// nextDeadline is the earliest of the group's deadlines (zero: none).
	nextDeadline() time.Time
	// onDeadline applies what is due at now.
	onDeadline(now time.Time)
}

// begin starts a new incarnation of the actor.
func (b *groupBase) begin(ctx actor.Context) {
	b.system, b.self = ctx.ActorSystem(), ctx.Self()
	b.incarnation = incarnations.Add(1)
	b.done = make(chan struct{})
}

// accept makes msg the request being handled, unless the group is broken
// and cannot load again: then it refuses msg and reports false.
func (b *groupBase) accept(g groupActor, msg any) bool {
	b.current = msg
	if b.broken != nil && !b.retryLoad(g.load) {
		g.refuse(msg, api.Errorf(api.CodeUnavailable, "subscription %q cannot be served: %v", b.cfg.Subscription, b.broken))
		b.current = nil
		return false
	}
	return true
}

// onWake handles the messages the group's own watcher and timer send:
// data appended, a deadline come. Those of an earlier incarnation are
// dropped.
func (b *groupBase) onWake(g groupActor, msg any) {
	switch m := msg.(type) {
	case appendedWake:
		if m.incarnation == b.incarnation {
			b.watching = false
			g.serveParked()
		}
	case deadlineCheck:
		if m.incarnation == b.incarnation {
			b.timer = nil
			g.onDeadline(b.clock.Now())
		}
	}
}

// endIncarnation releases what this incarnation holds: it answers the
// request being handled and the replies waiting for a flush with err,
// answers parked fetches empty, stops the timer and the watchers,
// and closes the log (warning with closeWarning if that fails). The caller
// has checked that the incarnation began and has emptied its batch, whose
// replies it passes.
func (b *groupBase) endIncarnation(g groupActor, err error, replies []func(error), closeWarning string) {
	if b.current != nil {
		g.refuse(b.current, err)
		b.current = nil
	}
	for _, reply := range replies {
		reply(err)
	}
	for _, c := range b.consumers {
		if c.parked != nil {
			g.releaseParked(c, nil, nil)
		}
	}
	if b.timer != nil {
		b.timer.Stop()
		b.timer = nil
	}
	close(b.done)
	b.done = nil
	if b.log != nil {
		if err := b.log.Close(); err != nil && !errors.Is(err, wal.ErrClosed) {
			b.logger.Warn(closeWarning, "err", err)
		}
		b.log = nil
	}
}

// send delivers an internal message to this actor from another goroutine.
func (b *groupBase) send(msg any) { b.system.Root.Send(b.self, msg) }

// park holds c's fetch m until data arrives (the caller watches) or its
// Wait is over (the group's timer).
func (b *groupBase) park(c *consumerState, m *Fetch) {
	c.parked = &parkedFetch{req: m, until: b.clock.Now().Add(m.Wait)}
}

// releaseParkedOver answers empty the parked fetches whose wait is over at
// now.
func (b *groupBase) releaseParkedOver(g groupActor, now time.Time) {
	for _, c := range parkedOver(b.consumers, now) {
		g.releaseParked(c, nil, nil)
	}
}

// watch wakes the actor when appended is closed. One watcher at a time is
// enough: a channel returned later closes no earlier than one returned
// before, and the wake re-arms with a fresh channel.
func (b *groupBase) watch(appended <-chan struct{}) {
	if b.watching {
		return
	}
	b.watching = true
	done, wake := b.done, appendedWake{incarnation: b.incarnation}
	go func() {
		select {
		case <-appended:
			b.send(wake)
		case <-done:
		}
	}()
}

// parkedConsumers returns the consumers with a parked fetch, by name.
func (b *groupBase) parkedConsumers() []*consumerState {
	var parked []*consumerState
	for _, c := range b.consumers {
		if c.parked != nil {
			parked = append(parked, c)
		}
	}
	slices.SortFunc(parked, func(a, b *consumerState) int { return cmp.Compare(a.name, b.name) })
	return parked
}

// armTimer makes sure the group's timer fires by at (zero: nothing to
// wait for), as the actor's last step after every message. A timer armed
// for later is moved to at; one armed for at or earlier is kept: the
// deadlines it was armed for may have moved later since (a consumer was
// heard from, a parked fetch answered), so it may fire before anything is
// due, and then onDeadline finds nothing and it is armed again.
// logDeadline is when the group's log wants maintenance (zero: never).
func (b *groupBase) logDeadline() time.Time {
	if m, ok := b.log.(Maintained); ok {
		return m.MaintainAt()
	}
	return time.Time{}
}

// maintainLog gives the group's log its maintenance when it is due.
func (b *groupBase) maintainLog(now time.Time) {
	m, ok := b.log.(Maintained)
	if !ok {
		return
	}
	if at := m.MaintainAt(); at.IsZero() || now.Before(at) {
		return
	}
	if err := m.Maintain(now); err != nil {
		b.logger.Warn("the "+b.kind+"'s state log could not be maintained; tried again later", "err", err)
	}
}

func (b *groupBase) armTimer(at time.Time) {
	if b.done == nil || at.IsZero() || (b.timer != nil && !b.timerAt.After(at)) {
		return
	}
	if b.timer != nil {
		b.timer.Stop()
	}
	b.timerAt = at
	msg := deadlineCheck{incarnation: b.incarnation}
	b.timer = b.clock.AfterFunc(at.Sub(b.clock.Now()), func() { b.send(msg) })
}

// FairShares hands out up to maxMsgs messages over units, round by round:
// each round offers every unit that may still have more an equal share of
// what is left, in the order given, until full says the reply is complete
// or no unit has more. taken is how many were handed out so far; take reads
// up to n messages of one unit and reports whether it may have more. A unit
// whose take fails is left out for the rest of the call; the first error is
// returned.
func FairShares[U any](units []U, maxMsgs int, taken func() int, full func() bool, take func(u U, n int) (bool, error)) error {
	var firstErr error
	active := units
	for len(active) > 0 && !full() {
		share := (maxMsgs - taken() + len(active) - 1) / len(active)
		var more []U
		for _, u := range active {
			if full() {
				break
			}
			left, err := take(u, min(share, maxMsgs-taken()))
			if err != nil {
				if firstErr == nil {
					firstErr = err
				}
				continue
			}
			if left {
				more = append(more, u)
			}
		}
		active = more
	}
	return firstErr
}
