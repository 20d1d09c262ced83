package consumers

import (
	"cmp"
	"errors"
	"slices"

	"github.com/braidmq/braid/topology"
	"github.com/braidmq/braid/wal"
)

// Records lost to damage in a unit's log (wal.Hole): a subscription cannot
// deliver them, so it skips them, logs it at error level, and counts them as
// acknowledged, so that the ack cursor, the hand-over of a unit and the
// drained check of a sealed segment go on past them. Nothing about a hole is
// written: after a restart, delivery finds it again.

// lostRun is a run of offsets a stream group skipped, [from, to).
type lostRun struct{ from, to uint64 }

// holeAt returns the hole err reports if it holds off.
func holeAt(err error, off uint64) (wal.Hole, bool) {
	var h *wal.HoleError
	if errors.As(err, &h) && h.From <= off && off < h.To {
		return h.Hole, true
	}
	return wal.Hole{}, false
}

// skipLost moves a stream unit's delivery past a hole at its delivered
// offset. When nothing before the hole waits for an ack, the cursor moves
// past it now; otherwise the ack that reaches it will (pastLost).
func (g *group) skipLost(u topology.Unit, us *unitState, h wal.Hole) {
	g.logger.Error("subscription skips records lost to damage in the log", "segment", u.Segment, "bucket", u.Bucket,
		"from", us.delivered, "to", h.To, "file", h.File, "reason", h.Reason)
	g.skipTo(u, us, h.To)
}

// skipTo moves a stream unit's delivery from its delivered offset to to,
// over offsets that have nothing to deliver (lost to damage, removed by
// compaction), counting them as acknowledged: at once when nothing before
// them waits for an ack, else when the ack that reaches them comes.
func (g *group) skipTo(u topology.Unit, us *unitState, to uint64) {
	from := us.delivered
	if to <= from {
		return
	}
	us.delivered = to
	if max(us.acked, g.batch.cursors[u]) >= from {
		g.batch.cursors[u] = to
		g.scheduleFlush()
		return
	}
	for _, r := range us.lost {
		if r.from <= from && to <= r.to {
			return // skipped before, then delivered again (a resync)
		}
	}
	us.lost = append(us.lost, lostRun{from: from, to: to})
	slices.SortFunc(us.lost, func(a, b lostRun) int { return cmp.Compare(a.from, b.from) })
}

// pastLost returns an ack cursor of us moved past the skipped runs it
// reaches.
func (us *unitState) pastLost(cursor uint64) uint64 {
	for _, r := range us.lost {
		if r.from <= cursor && cursor < r.to {
			cursor = r.to
		}
	}
	return cursor
}

// trimLost forgets the skipped runs below the ack cursor.
func (us *unitState) trimLost() {
	i := 0
	for i < len(us.lost) && us.lost[i].to <= us.acked {
		i++
	}
	us.lost = us.lost[i:]
}

// skipLost takes the never-delivered offsets of a queue unit that a hole at
// its read offset holds, up to limit (the window's), as acknowledged.
func (q *queueGroup) skipLost(unit topology.Unit, u *queueUnit, h wal.Hole, limit uint64) {
	from := u.read()
	to := min(h.To, limit)
	if len(u.entries) == 0 {
		to = h.To // nothing waits in the window: the floor moves past it all
	}
	q.logger.Error("queue subscription skips records lost to damage in the log", "segment", unit.Segment, "bucket", unit.Bucket,
		"from", from, "to", to, "file", h.File, "reason", h.Reason)
	if len(u.entries) == 0 {
		u.raiseFloor(to)
	} else {
		u.extend(to, entryAcked, 0, "")
		u.advanceFloor()
	}
	q.batch.units[unit] = true
}

// skipLostEntry takes an offset of a queue unit's window whose record was
// found lost as it was to be delivered again as acknowledged.
func (q *queueGroup) skipLostEntry(unit topology.Unit, u *queueUnit, off uint64, e *queueEntry, h wal.Hole) {
	q.logger.Error("queue subscription drops a message lost to damage in the log", "segment", unit.Segment, "bucket", unit.Bucket,
		"offset", off, "file", h.File, "reason", h.Reason)
	u.setState(e, entryAcked, 0)
	q.batch.touch(unit, off)
}
