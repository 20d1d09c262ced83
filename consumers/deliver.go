package consumers

import (
	"slices"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/topology"
	"github.com/braidmq/braid/wal"
)

// This file is the delivery side of the group: which units are readable and
// who holds them (refresh), and handing out their messages (fetch, parked
// fetches).

// refresh brings the readable units and the assignment up to date with the
// layout, the drained segments and the members, and writes the owners that
// changed. It does the work only when something it depends on changed: the
// layout epoch, durable acks, members. Every delivery comes after a
// refresh, so a unit's owner is durable before the owner gets anything.
func (g *group) refresh() {
	if !g.state.Created {
		return
	}
	g.reassign()
	g.persistOwners()
}

// reassign is the work of refresh but writing the owners.
func (g *group) reassign() {
	l := g.cfg.Source.Layout()
	if l.Epoch != g.layout.Epoch || len(l.Segments) != len(g.layout.Segments) {
		g.dirty = true
	}
	// Drained-ness is checked every time (it costs a Bounds call per bucket
	// of the sealed segments not drained yet, usually none): retention or a
	// bucket whose bounds were unknown can change it without any event.
	if g.detectDrained(l) {
		g.dirty = true
	}
	if !g.dirty {
		return
	}
	g.dirty = false
	g.layout = l

	readable := topology.ReadableUnits(l, g.state.isDrained)
	isReadable := make(map[topology.Unit]bool, len(readable))
	for _, u := range readable {
		isReadable[u] = true
		if g.units[u] == nil {
			g.units[u] = g.newUnitState(u)
		}
	}
	for u := range g.units {
		if !isReadable[u] {
			// Drained or deleted: nothing is left to deliver or to ack.
			delete(g.units, u)
			for _, c := range g.consumers {
				delete(c.held, u)
			}
		}
	}

	g.targets = Assign(readable, g.assignees(), g.targets)
	for u, us := range g.units {
		g.settle(u, us)
	}
}

// detectDrained records every sealed segment whose units are all
// acknowledged up to their final next offset, and every deleted segment.
// It uses durable ack cursors only: a segment drained on an ack a crash
// could take back would release its children too early.
// It reports whether it found any.
func (g *group) detectDrained(l topology.Layout) bool {
	acked := func(u topology.Unit) uint64 {
		if us := g.units[u]; us != nil {
			return us.acked
		}
		return g.state.Cursors[u]
	}
	bounds := func(u topology.Unit) (first, next uint64, ok bool) {
		first, next, err := g.cfg.Source.Bounds(u.Segment, u.Bucket)
		if err != nil {
			g.logger.Debug("bounds of a sealed unit unknown", "segment", u.Segment, "bucket", u.Bucket, "err", err)
			return 0, 0, false
		}
		return first, next, true
	}
	newly := newlyDrained(l, g.state.isDrained, acked, bounds)
	if len(newly) == 0 {
		return false
	}
	g.state.markDrained(newly)
	g.batch.drained = append(g.batch.drained, newly...)
	g.scheduleFlush()
	g.logger.Debug("segments drained", "segments", newly)
	return true
}

// settle moves a unit to its target once that is allowed: at once when it
// has no live owner, otherwise when the owner has acknowledged (durably)
// everything it was given — after a restart, everything below
// restoredUntil too. An owner restored from the log and not back yet is
// waited for until its grace ends. Until then the unit is pending handoff.
func (g *group) settle(u topology.Unit, us *unitState) {
	target := g.targets[u]
	if us.owner == target {
		return
	}
	if us.owner != "" {
		if g.awaited(us.owner) {
			return
		}
		if us.restoredUntil == unknownBound {
			if _, next, err := g.cfg.Source.Bounds(u.Segment, u.Bucket); err == nil {
				us.restoredUntil = next
			}
		}
		if g.consumers[us.owner] != nil && (us.acked < us.delivered || us.acked < us.restoredUntil) {
			return
		}
		g.countReassigned()
	}
	g.setOwner(u, us, target)
}

// skipRetained moves a unit's cursors over offsets retention has removed.
// The raised ack cursor is not written: replaying finds the same first
// offset again.
func (g *group) skipRetained(us *unitState, first uint64) {
	if us.acked < first {
		us.acked = first
		us.counts.trim(first)
	}
	us.delivered = max(us.delivered, us.acked)
}

// assignedTo counts the units assigned to a consumer.
func (g *group) assignedTo(name string) int {
	n := 0
	for _, c := range g.targets {
		if c == name {
			n++
		}
	}
	return n
}

func (g *group) onFetch(m *Fetch) {
	c := g.consumers[m.Consumer]
	if c == nil {
		replyFetch(m, nil, 0, api.Errorf(api.CodeConsumerUnknown, "consumer %q is not in subscription %q (expired or never joined); join again", m.Consumer, g.cfg.Subscription))
		return
	}
	c.lastSeen = g.clock.Now()
	if c.parked != nil {
		// A consumer has one fetch outstanding; a new one supersedes it.
		g.releaseParked(c, nil, nil)
	}
	if m.Resync {
		g.resync(c, m.Received)
	}
	// Take the channel before reading: an append after the read closes it.
	appended := g.cfg.Source.Appended()
	g.refresh()
	msgs, err := g.collect(c, m.Max, m.MaxBytes)
	if len(msgs) > 0 || err != nil || m.Wait <= 0 {
		replyFetch(m, msgs, g.assignedTo(c.name), err)
		return
	}
	g.park(c, m)
	g.watch(appended)
}

// resync rewinds the delivery cursor of every unit c owns to the next
// offset c says it expects (received), or to the ack cursor for a unit it
// does not list: a fetch reply it lost moved the cursor past messages it
// never saw. Pending acks are made durable first, so the ack cursor is
// current; a rewind never goes below it.
func (g *group) resync(c *consumerState, received map[topology.Unit]uint64) {
	if !g.batch.empty() {
		g.flushOrFail(true)
	}
	for u, us := range g.units {
		if us.owner != c.name {
			continue
		}
		from, ok := received[u]
		if !ok || from < us.acked {
			from = us.acked
		}
		if from < us.delivered {
			us.counts.rewindFrom(us.acked, from, us.delivered)
			g.logger.Info("redelivering after a lost fetch reply", "consumer", c.name,
				"segment", u.Segment, "bucket", u.Bucket, "from", from, "messages", us.delivered-from)
			us.delivered = from
		}
	}
}

// releaseParked answers c's parked fetch.
func (g *group) releaseParked(c *consumerState, msgs []api.Message, err error) {
	p := c.parked
	c.parked = nil
	c.lastSeen = g.clock.Now()
	replyFetch(p.req, msgs, g.assignedTo(c.name), err)
}

// serveParked retries every parked fetch; the ones that find nothing stay
// parked until the next wake or their expiry.
func (g *group) serveParked() {
	parked := g.parkedConsumers()
	if len(parked) == 0 {
		g.refresh()
		return
	}
	appended := g.cfg.Source.Appended()
	g.refresh()
	waiting := false
	for _, c := range parked {
		msgs, err := g.collect(c, c.parked.req.Max, c.parked.req.MaxBytes)
		if len(msgs) > 0 || err != nil {
			g.releaseParked(c, msgs, err)
			continue
		}
		waiting = true
	}
	if waiting {
		g.watch(appended)
	}
}

// collect hands out up to maxMsgs messages and about maxBytes of payload
// from the units c holds (not those being handed over, except below their
// restoredUntil), round-robin over the units in rounds of fair shares,
// starting from a different unit each fetch. Within a unit, messages go
// out in offset order from its delivery cursor.
func (g *group) collect(c *consumerState, maxMsgs, maxBytes int) ([]api.Message, error) {
	var units []topology.Unit
	for u, us := range g.units {
		if us.owner == c.name && (g.targets[u] == c.name || us.delivered < us.restoredUntil) {
			units = append(units, u)
		}
	}
	if len(units) == 0 {
		return nil, nil
	}
	slices.SortFunc(units, compareUnits)
	start := c.rr % len(units)
	c.rr++
	active := slices.Concat(units[start:], units[:start])

	// Size the reply once: appending message by message to a fetch of
	// thousands copies it several times over.
	out := make([]api.Message, 0, g.available(units, maxMsgs))
	bytes := 0
	full := func() bool { return len(out) >= maxMsgs || (len(out) > 0 && bytes >= maxBytes) }
	firstErr := FairShares(active, maxMsgs, func() int { return len(out) }, full, func(u topology.Unit, n int) (bool, error) {
		left, err := g.readUnit(u, n, maxBytes, &out, &bytes)
		if err != nil {
			// Once in readWarnEvery per group, with how many were not
			// logged: a unit on a node that is down fails every fetch.
			if now := g.clock.Now(); now.Sub(g.readWarned) >= readWarnEvery {
				g.logger.Warn("reading a unit for a fetch", "segment", u.Segment, "bucket", u.Bucket, "err", err,
					"suppressed_since_last", g.readWarnSuppressed)
				g.readWarned, g.readWarnSuppressed = now, 0
			} else {
				g.readWarnSuppressed++
			}
		}
		return left, err
	})
	if len(out) == 0 && firstErr != nil {
		return nil, api.Errorf(api.CodeUnavailable, "reading subscription %q: %v", g.cfg.Subscription, firstErr)
	}
	return out, nil
}

// available returns how many messages the units hold past their delivery
// cursors, at most limit.
func (g *group) available(units []topology.Unit, limit int) int {
	total := 0
	for _, u := range units {
		_, next, err := g.cfg.Source.Bounds(u.Segment, u.Bucket)
		if d := g.units[u].delivered; err == nil && next > d {
			total += int(min(next-d, uint64(limit)))
		}
		if total >= limit {
			return limit
		}
	}
	return total
}

// readWarnEvery is how often a group logs the failed reads of its fetches.
const readWarnEvery = 10 * time.Second

// readUnit appends up to n messages of u to out, keeping the payload total
// within maxBytes unless out is empty. It reports whether u may have more
// for this fetch.
func (g *group) readUnit(u topology.Unit, n, maxBytes int, out *[]api.Message, bytes *int) (bool, error) {
	us := g.units[u]
	first, next, err := g.cfg.Source.Bounds(u.Segment, u.Bucket)
	if err != nil {
		return false, err
	}
	if us.restoredUntil == unknownBound {
		us.restoredUntil = next
		g.dirty = true // settle may hand the unit over now
	}
	if g.targets[u] != us.owner {
		// Being handed over by an owner restored from the log: it gets
		// again what it may have had before the restart, nothing more.
		next = min(next, us.restoredUntil)
	}
	g.skipRetained(us, first)
	if us.delivered >= next || n <= 0 {
		return false, nil
	}
	n = int(min(uint64(n), next-us.delivered))
	if g.state.Start.compacted() {
		return g.readCompacted(u, us, n, next, maxBytes, out, bytes)
	}
	recs, err := g.cfg.Source.Read(u.Segment, u.Bucket, us.delivered, n, max(maxBytes-*bytes, 1))
	if len(recs) == 0 {
		if h, ok := holeAt(err, us.delivered); ok {
			g.skipLost(u, us, h)
			return us.delivered < next, nil
		}
		return false, err
	}
	taken := 0
	for i := range recs {
		rec := &recs[i]
		if len(*out) > 0 && *bytes+len(rec.Payload) > maxBytes {
			break
		}
		*out = append(*out, message(u, us, us.delivered, rec))
		us.delivered++
		*bytes += len(rec.Payload)
		taken++
	}
	return taken == len(recs) && us.delivered < next, nil
}

// readCompacted is readUnit for a subscription reading the compacted view:
// the records come at their own offsets, with gaps where compaction removed
// records, which skipTo takes as acknowledged.
func (g *group) readCompacted(u topology.Unit, us *unitState, n int, next uint64, maxBytes int, out *[]api.Message, bytes *int) (bool, error) {
	kept, resume, err := g.cfg.Source.ReadCompacted(u.Segment, u.Bucket, us.delivered, n, max(maxBytes-*bytes, 1))
	if len(kept) == 0 {
		resume = min(resume, next)
		if resume > us.delivered {
			g.skipTo(u, us, resume)
			return us.delivered < next, nil
		}
		if h, ok := holeAt(err, us.delivered); ok {
			g.skipLost(u, us, h)
			return us.delivered < next, nil
		}
		return false, err
	}
	taken := 0
	for i := range kept {
		k := &kept[i]
		if k.Offset >= next || len(*out) > 0 && *bytes+len(k.Record.Payload) > maxBytes {
			break
		}
		*out = append(*out, message(u, us, k.Offset, &k.Record))
		us.delivered = k.Offset + 1
		*bytes += len(k.Record.Payload)
		taken++
	}
	if taken == len(kept) {
		g.skipTo(u, us, min(resume, next))
	}
	return taken == len(kept) && us.delivered < next, nil
}

// message is the delivery of the record at offset off of unit u.
func message(u topology.Unit, us *unitState, off uint64, rec *wal.Record) api.Message {
	return api.Message{
		Segment:    uint64(u.Segment),
		Bucket:     u.Bucket,
		Offset:     off,
		Deliveries: us.counts.at(off) + 1,
		Time:       rec.Timestamp,
		Key:        rec.Key,
		Headers:    apiHeaders(rec.Headers),
		Payload:    rec.Payload,
	}
}

func apiHeaders(hs []wal.Header) []api.Header {
	if len(hs) == 0 {
		return nil
	}
	out := make([]api.Header, len(hs))
	for i, h := range hs {
		out[i] = api.Header{Name: h.Key, Value: h.Value}
	}
	return out
}
