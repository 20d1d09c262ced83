package consumers

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/braidmq/braid/topology"
)

// This file is unit ownership across restarts of the group: the owners
// recorded in the group's log, and the grace a previous owner gets to come
// back after a restart.
//
// Why: the durable ack cursor of a unit lags what its owner's application
// has acknowledged (acks are batched, and those in flight when the node
// stops are lost), and the delivery cursor is not durable at all. So after
// a restart nobody but the previous owner knows how far it got. Handing the
// unit to another consumer at once would deliver again messages the
// previous owner had already returned — a duplicate the handoff rule
// (DESIGN.md §1) forbids, since that owner neither acknowledged everything
// nor was declared dead. Instead the unit waits for its previous owner.

// unknownBound is restoredUntil while the unit's next offset could not be
// read: the restored owner keeps the unit until it can be.
const unknownBound = math.MaxUint64

// restoreAwaited starts the grace of every owner named in the log: it has
// its session timeout (the group's default if none was recorded) from now,
// the group's start, to join again before it is declared dead. Meanwhile
// its units wait for it. It also notes the next offset of each owned unit
// now: what the owner may have been delivered before the restart is below.
func (g *group) restoreAwaited(now time.Time) {
	g.targets = maps.Clone(g.state.Owners)
	for u, name := range g.state.Owners {
		g.restoredUntil[u] = unknownBound
		if _, next, err := g.cfg.Source.Bounds(u.Segment, u.Bucket); err == nil {
			g.restoredUntil[u] = next
		}
		if _, ok := g.awaiting[name]; ok {
			continue
		}
		g.awaiting[name] = graceEnd(now, g.state.Sessions[name], g.cfg.DefaultSessionTimeout)
	}
	if len(g.awaiting) > 0 {
		g.logger.Info("waiting for the previous owners of units to join again",
			"consumers", slices.Sorted(maps.Keys(g.awaiting)))
	}
}

// newUnitState builds the state of a unit that has just become readable, or
// that is read again after a restart. A unit the log gives to a consumer
// that is live or awaited goes back to it, with restoredUntil set: that
// consumer may have been delivered anything below the unit's next offset
// at the group's start.
func (g *group) newUnitState(u topology.Unit) *unitState {
	acked := g.state.Cursors[u]
	us := &unitState{acked: acked, delivered: acked}
	name := g.state.Owners[u]
	bound, restored := g.restoredUntil[u]
	delete(g.restoredUntil, u)
	if name == "" {
		return us
	}
	if _, awaited := g.awaiting[name]; !awaited && g.consumers[name] == nil {
		g.ownersChanged = true // the log names an owner that is gone
		return us
	}
	us.owner = name
	us.restoredUntil = unknownBound
	if restored {
		us.restoredUntil = bound
	}
	if c := g.consumers[name]; c != nil {
		c.held[u] = true
	}
	return us
}

// awaited reports whether name is a previous owner still in its grace.
func (g *group) awaited(name string) bool {
	_, ok := g.awaiting[name]
	return ok
}

// returned is called when consumer c joins: if it is an awaited previous
// owner, its units are its own again.
func (g *group) returned(c *consumerState) {
	if !g.awaited(c.name) {
		return
	}
	delete(g.awaiting, c.name)
	for u, us := range g.units {
		if us.owner == c.name {
			c.held[u] = true
		}
	}
	n := 0
	for _, name := range g.state.Owners {
		if name == c.name {
			n++
		}
	}
	g.logger.Info("previous owner joined again", "consumer", c.name, "units", n)
}

// expireAwaited declares dead the previous owners whose grace has passed
// and releases their units. It reports whether it released anyone.
func (g *group) expireAwaited(now time.Time) bool {
	expired := graceOver(g.awaiting, now)
	for _, name := range expired {
		g.releaseAwaited(name, "did not join again within its session timeout")
	}
	return len(expired) > 0
}

// releaseAwaited gives up waiting for a previous owner: its units go to
// whoever Assign picks, from their durable ack cursors. What it had been
// delivered before the restart and whose acks were not durable is then
// delivered again, to another consumer (at-least-once).
func (g *group) releaseAwaited(name, why string) {
	delete(g.awaiting, name)
	n := 0
	for u, us := range g.units {
		if us.owner == name {
			g.setOwner(u, us, "")
			n++
		}
	}
	g.dirty = true
	g.logger.Info("previous owner released", "consumer", name, "reason", why, "units", n)
}

// setOwner gives u to name ("" for nobody); the change is written by the
// next persistOwners, which comes before any delivery.
func (g *group) setOwner(u topology.Unit, us *unitState, name string) {
	if us.owner == name {
		return
	}
	us.owner = name
	us.restoredUntil = 0
	g.ownersChanged = true
	if c := g.consumers[name]; c != nil {
		c.held[u] = true
	}
}

// persistOwners writes, as one owners record, every unit whose owner
// differs from the log's and the session timeout of every live owner whose
// timeout the log does not have. refresh calls it after settling the units,
// so an owner is durable before it is delivered anything: after a crash
// the log names every consumer that may hold unacknowledged messages.
// A write failure panics, like a failed ack flush: the restart reopens the
// log and answers the request being handled with UNAVAILABLE.
func (g *group) persistOwners() {
	if !g.ownersChanged || !g.state.Created {
		return
	}
	g.ownersChanged = false
	rec := stateRecord{Kind: kindOwners}
	owning := make(map[string]bool)
	for u, us := range g.units {
		if us.owner != "" {
			owning[us.owner] = true
		}
		if us.owner != g.state.Owners[u] {
			rec.Owners = append(rec.Owners, unitOwner{Unit: u, Owner: us.owner})
		}
	}
	for name := range owning {
		if c := g.consumers[name]; c != nil && g.state.Sessions[name] != c.timeout {
			rec.Sessions = append(rec.Sessions, consumerSession{Consumer: name, Timeout: c.timeout})
		}
	}
	if len(rec.Owners) == 0 && len(rec.Sessions) == 0 {
		return
	}
	rec.normalize()
	if _, err := g.appendRecord(rec); err != nil {
		panic(fmt.Errorf("braid/consumers: subscription %q: writing unit owners: %w", g.cfg.Subscription, err))
	}
	if err := g.state.apply(rec); err != nil {
		g.logger.Error("applying a written record", "err", err) // cannot happen: created already
	}
	if err := g.maybeCompact(); err != nil {
		panic(fmt.Errorf("braid/consumers: subscription %q: compacting its log: %w", g.cfg.Subscription, err))
	}
}

// assignees returns the names Assign spreads the units over: the live
// consumers and the previous owners still awaited, so that the units of
// the latter stay where they are.
func (g *group) assignees() []string {
	names := make([]string, 0, len(g.consumers)+len(g.awaiting))
	for name := range g.consumers {
		names = append(names, name)
	}
	for name := range g.awaiting {
		if g.consumers[name] == nil {
			names = append(names, name)
		}
	}
	return names
}

// awaitedNames lists the awaited previous owners, sorted.
func (g *group) awaitedNames() []string {
	return slices.Sorted(maps.Keys(g.awaiting))
}
