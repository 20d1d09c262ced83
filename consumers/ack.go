package consumers

import (
	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/topology"
)

// This file is the acknowledgement side of the group: validating acks and
// committing them in batches.

func (g *group) onAck(m *Ack) {
	c := g.consumers[m.Consumer]
	if c == nil {
		replyErr(m.Reply, api.Errorf(api.CodeConsumerUnknown, "consumer %q is not in subscription %q (expired or never joined); join again", m.Consumer, g.cfg.Subscription))
		return
	}
	c.lastSeen = g.clock.Now()
	g.refresh()

	// Validate every position before taking any: a bad one rejects the
	// request as a whole.
	advance := make(map[topology.Unit]uint64, len(m.Acks))
	for _, p := range m.Acks {
		u := topology.Unit{Segment: topology.SegmentID(p.Segment), Bucket: p.Bucket}
		if g.state.Drained[u.Segment] {
			continue // a late ack of a drained segment: nothing left to do
		}
		us := g.units[u]
		switch {
		case us != nil && us.owner == c.name:
			if p.Offset >= us.delivered {
				replyErr(m.Reply, api.Errorf(api.CodeInvalidArgument,
					"ack of segment %d bucket %d offset %d is beyond what consumer %q was delivered (next offset to deliver is %d)",
					p.Segment, p.Bucket, p.Offset, c.name, us.delivered))
				return
			}
		case c.held[u] && us != nil && p.Offset < us.acked:
			continue // a late ack from a previous owner: already done
		default:
			replyErr(m.Reply, api.Errorf(api.CodeNotOwner,
				"consumer %q does not own segment %d bucket %d of subscription %q", c.name, p.Segment, p.Bucket, g.cfg.Subscription))
			return
		}
		advance[u] = max(advance[u], p.Offset+1)
	}

	for u, cursor := range advance {
		cursor = g.units[u].pastLost(cursor)
		if cursor > max(g.units[u].acked, g.batch.cursors[u]) {
			g.batch.cursors[u] = cursor
		}
	}
	if m.Reply != nil {
		g.batch.replies = append(g.batch.replies, m.Reply)
	}
	g.scheduleFlush()
}

// scheduleFlush makes sure a flushNow is in the mailbox. The mailbox is
// FIFO, so every ack already queued is handled before it and joins the
// batch: one write commits them all.
func (g *group) scheduleFlush() {
	if g.batch.scheduled {
		return
	}
	g.batch.scheduled = true
	g.system.Root.Send(g.self, flushNow{})
}

// flush commits the pending batch and answers the acks in it; on a write
// failure it answers them with the error and restarts the actor.
func (g *group) flush() { g.flushOrFail(true) }

// flushOrFail writes the batch as one record, then applies it and answers
// its acks. With restart false a write failure is only logged (the actor is
// stopping anyway; the acks are answered with the error).
func (g *group) flushOrFail(restart bool) {
	g.batch.scheduled = false
	if g.batch.empty() {
		return
	}
	batch := g.batch
	g.batch = ackBatch{cursors: make(map[topology.Unit]uint64)}

	rec := stateRecord{Kind: kindUpdate, Drained: batch.drained}
	for u, cursor := range batch.cursors {
		rec.Cursors = append(rec.Cursors, unitCursor{Unit: u, Acked: cursor})
	}
	rec.normalize()
	if len(rec.Cursors) > 0 || len(rec.Drained) > 0 {
		if _, err := g.appendRecord(rec); err != nil {
			failure := api.Errorf(api.CodeInternal, "subscription %q: writing acks: %v", g.cfg.Subscription, err)
			for _, reply := range batch.replies {
				reply(failure)
			}
			if !restart {
				g.logger.Error("consumer group log write failed while stopping", "err", err)
				return
			}
			g.failLog(err)
		}
		if err := g.state.apply(rec); err != nil {
			g.logger.Error("applying a written record", "err", err) // cannot happen: created already
		}
		for _, c := range rec.Cursors {
			if us := g.units[c.Unit]; us != nil && c.Acked > us.acked {
				us.acked = c.Acked
				us.delivered = max(us.delivered, us.acked)
				us.counts.trim(us.acked)
				us.trimLost()
			}
		}
		g.dirty = true
	}
	for _, reply := range batch.replies {
		reply(nil)
	}
	if err := g.maybeCompact(); err != nil {
		if !restart {
			g.logger.Error("compacting the consumer group log while stopping", "err", err)
			return
		}
		g.failLog(err)
	}
}
