package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/topology"
)

// CheckpointConsumer reads a topic with no subscription and no state on the
// server, for stream processors that keep their own offsets (DESIGN.md §2).
// It follows the topic's layout itself (topic.describe and the layout push)
// and reads units directly (braid.v1.read.*) under the ordering rule of
// DESIGN.md §1, with its own drained segments: a segment is read only once
// every ancestor has been read to its end, so every key comes in the order
// it was produced, across splits, merges and rebuckets.
//
// Checkpoint returns where the consumer is: the next offset of every unit it
// has started and the segments it has drained, counting exactly the messages
// Next has returned. Restore goes back there, on this consumer or another,
// also after layout changes made in between.
//
// Data that retention removed before the consumer read it (a deleted
// segment, offsets below a unit's first retained one) makes Next fail with a
// *SegmentGoneError naming it, every time, until the application restores
// another checkpoint, or, with WithSkipGone, is skipped and reported. So are
// records the server lost to damage in its log (OFFSETS_LOST; the error's
// Lost is set). The consumer never jumps over data silently.
//
// A CheckpointConsumer is safe for concurrent use; Next calls are served one
// at a time.
type CheckpointConsumer struct {
	nc       *nats.Conn
	cfg      checkpointConfig
	topic    string
	subjects struct{ fetch, offsets string }
	admin    *Admin
	push     *nats.Subscription

	closing   chan struct{}
	closeOnce sync.Once
	ctx       context.Context
	stop      context.CancelFunc

	// nextMu serializes Next; it guards fetching, the read in flight.
	nextMu   sync.Mutex
	fetching chan readResult

	mu sync.Mutex
	// Guarded by mu:
	layout topology.Layout
	// changed is closed when layout is replaced.
	changed chan struct{}
	// gen counts Restores: a read started before one is dropped.
	gen uint64
	// buf holds read messages not returned yet, in the order to return them.
	buf []api.Message
	// pos is, per unit, the next offset Next returns (what Checkpoint
	// records); drained the segments whose every message Next returned.
	pos     map[unit]uint64
	drained map[topology.SegmentID]bool
	// fetchPos and fetchDrained are the same for what was read into buf;
	// the ordering rule is applied to them: a segment is read once its
	// ancestors are in buf, which Next empties in order.
	// Invariant: pos[u] <= fetchPos[u] for every unit not skipped.
	fetchPos     map[unit]uint64
	fetchDrained map[topology.SegmentID]bool
	// final is the final next offset of units of sealed segments.
	final map[unit]uint64
}

// CheckpointMessage is one message read by a CheckpointConsumer.
type CheckpointMessage struct {
	ID      MessageID
	Key     []byte
	Payload []byte
	Headers []api.Header
	Time    time.Time
}

// ErrDataGone is matched by every *SegmentGoneError (errors.Is).
var ErrDataGone = errors.New("braid/client: data removed or lost before it was read")

// SegmentGoneError says that retention removed data a CheckpointConsumer had
// not read: a whole segment (Bucket -1), or the offsets of one unit from
// Offset up to First.
type SegmentGoneError struct {
	Topic   string
	Segment uint64
	Bucket  int    // -1: the segment was deleted
	Offset  uint64 // the next offset the consumer was to read
	First   uint64 // the first offset still retained (with Lost: after the lost ones)
	// Lost says the records were not removed by retention but lost to
	// damage in the server's log (the server logged and counted it);
	// [Offset, First) is what the consumer did not get.
	Lost bool
}

func (e *SegmentGoneError) Error() string {
	if e.Lost {
		return fmt.Sprintf("braid/client: offsets %d to %d of segment %d bucket %d of %s were lost to damage in the server's log",
			e.Offset, e.First-1, e.Segment, e.Bucket, e.Topic)
	}
	if e.Bucket < 0 {
		return fmt.Sprintf("braid/client: segment %d of %s was deleted by retention before it was read to its end", e.Segment, e.Topic)
	}
	return fmt.Sprintf("braid/client: offsets %d to %d of segment %d bucket %d of %s were removed by retention before they were read",
		e.Offset, e.First-1, e.Segment, e.Bucket, e.Topic)
}

// Unwrap makes errors.Is(err, ErrDataGone) hold.
func (e *SegmentGoneError) Unwrap() error { return ErrDataGone }

type readResult struct {
	req   api.ReadRequest
	reply api.ReadReply
	gen   uint64
	err   error
}

// NewCheckpointConsumer returns a consumer of topicURI starting at the
// earliest retained message (default), the latest (WithStart(api.StartLatest):
// only what is appended from now on), or a time (WithStartTime). It asks the
// server for the layout and the units' offsets, bounded by the request
// timeout.
func NewCheckpointConsumer(nc *nats.Conn, topicURI string, opts ...CheckpointOption) (*CheckpointConsumer, error) {
	cfg := checkpointConfig{consumerConfig: defaultConsumerConfig()}
	for _, o := range opts {
		o.applyCheckpoint(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	name, err := parseTopic(topicURI)
	if err != nil {
		return nil, err
	}
	ctx, stop := context.WithCancel(context.Background())
	c := &CheckpointConsumer{
		nc: nc, cfg: cfg, topic: topicURI, admin: NewAdmin(nc, WithRequestTimeout(cfg.requestTimeout)),
		closing: make(chan struct{}), ctx: ctx, stop: stop, changed: make(chan struct{}),
		pos: map[unit]uint64{}, drained: map[topology.SegmentID]bool{},
		fetchPos: map[unit]uint64{}, fetchDrained: map[topology.SegmentID]bool{}, final: map[unit]uint64{},
	}
	c.subjects.fetch = api.ReadSubject(api.ReadFetch, name.Tenant, name.Namespace, name.Name)
	c.subjects.offsets = api.ReadSubject(api.ReadOffsets, name.Tenant, name.Namespace, name.Name)
	c.push, err = nc.Subscribe(api.TopicSubject(api.LayoutPrefix, name.Tenant, name.Namespace, name.Name), func(m *nats.Msg) {
		var d api.TopicDescription
		if json.Unmarshal(m.Data, &d) != nil {
			return
		}
		if l, err := layoutOf(d); err == nil {
			c.setLayout(l)
		}
	})
	if err != nil {
		stop()
		return nil, fmt.Errorf("braid/client: subscribing to the layout of %s: %w", topicURI, err)
	}
	if err := c.start(ctx); err != nil {
		c.push.Unsubscribe()
		stop()
		return nil, err
	}
	return c, nil
}

// start sets the positions of the start: every unit at its first retained
// offset, its next offset (latest; sealed segments drained) or the offset
// of the start time; deleted segments drained.
func (c *CheckpointConsumer) start(ctx context.Context) error {
	if err := c.refreshLayout(ctx); err != nil {
		return err
	}
	req := api.OffsetsRequest{}
	if !c.cfg.startTime.IsZero() {
		req.Time = max(c.cfg.startTime.UnixMilli(), 1)
	}
	var offs api.OffsetsReply
	if err := requestJSON(ctx, c.nc, c.cfg.requestTimeout, c.subjects.offsets, req, &offs); err != nil {
		return fmt.Errorf("offsets of %s: %w", c.topic, err)
	}
	c.mu.Lock()
	stale := offs.Epoch > c.layout.Epoch
	c.mu.Unlock()
	if stale {
		if err := c.refreshLayout(ctx); err != nil {
			return err
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	latest := c.cfg.startTime.IsZero() && c.cfg.start == api.StartLatest
	for _, s := range c.layout.Segments {
		if s.State == topology.StateDeleted || (latest && s.State == topology.StateSealed) {
			c.drained[s.ID], c.fetchDrained[s.ID] = true, true
		}
	}
	for _, u := range offs.Units {
		off := u.First
		switch {
		case !c.cfg.startTime.IsZero():
			off = u.TimeOffset
		case latest:
			off = u.Next
		}
		k := unit{u.Segment, u.Bucket}
		c.pos[k], c.fetchPos[k] = off, off
	}
	return nil
}

// refreshLayout asks the server for the layout.
func (c *CheckpointConsumer) refreshLayout(ctx context.Context) error {
	d, err := c.admin.DescribeTopic(ctx, c.topic)
	if err != nil {
		return fmt.Errorf("describe %s: %w", c.topic, err)
	}
	l, err := layoutOf(d)
	if err != nil {
		return err
	}
	c.setLayout(l)
	return nil
}

// layoutOf converts a topic description (the describe reply, the layout
// push) to the layout it describes, and validates it.
func layoutOf(d api.TopicDescription) (topology.Layout, error) {
	l := topology.Layout{Epoch: d.Epoch, NextID: topology.SegmentID(d.NextID), Segments: make([]topology.Segment, len(d.Segments))}
	ids := func(in []uint64) []topology.SegmentID {
		var out []topology.SegmentID
		for _, id := range in {
			out = append(out, topology.SegmentID(id))
		}
		return out
	}
	for i, s := range d.Segments {
		lo, err := topology.ParseHash(s.Range[0])
		if err == nil {
			var hi uint64
			hi, err = topology.ParseHash(s.Range[1])
			l.Segments[i].Range = topology.Range{Lo: lo, Hi: hi}
		}
		if err != nil {
			return topology.Layout{}, fmt.Errorf("braid/client: layout of %s: segment %d: %w", d.Topic, s.ID, err)
		}
		l.Segments[i].ID, l.Segments[i].State = topology.SegmentID(s.ID), topology.State(s.State)
		l.Segments[i].Parents, l.Segments[i].Children = ids(s.Parents), ids(s.Children)
		l.Segments[i].Buckets, l.Segments[i].CreatedEpoch, l.Segments[i].SealedEpoch = s.Buckets, s.CreatedEpoch, s.SealedEpoch
		l.Segments[i].Partition = -1
		if s.Partition != nil {
			l.Segments[i].Partition = *s.Partition
		}
	}
	if err := l.Validate(); err != nil {
		return topology.Layout{}, fmt.Errorf("braid/client: layout of %s at epoch %d: %w", d.Topic, d.Epoch, err)
	}
	return l, nil
}

// setLayout takes l if it is newer than the layout held.
func (c *CheckpointConsumer) setLayout(l topology.Layout) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if l.Epoch <= c.layout.Epoch && len(c.layout.Segments) > 0 {
		return
	}
	c.layout = l
	close(c.changed)
	c.changed = make(chan struct{})
}

// Next returns the next message, waiting as long as ctx allows. Messages of
// one unit come in offset order, and no message of a segment comes before
// every message of its ancestors. It returns ctx.Err() when ctx ends,
// ErrClosed after Close, a *SegmentGoneError when data it had to read next
// was removed by retention (see WithSkipGone), and a read's error otherwise
// (ErrTimeout, ErrNoServer, an *api.Error); calling Next again retries.
func (c *CheckpointConsumer) Next(ctx context.Context) (*CheckpointMessage, error) {
	c.nextMu.Lock()
	defer c.nextMu.Unlock()
	for {
		select {
		case <-c.closing:
			return nil, ErrClosed
		default:
		}
		c.mu.Lock()
		if len(c.buf) > 0 {
			m := c.buf[0]
			c.buf[0] = api.Message{}
			c.buf = c.buf[1:]
			c.consumed(&m)
			if m.Deliveries == skipMarker {
				c.mu.Unlock()
				continue
			}
			c.mu.Unlock()
			out := &CheckpointMessage{ID: MessageID{Segment: m.Segment, Bucket: m.Bucket, Offset: m.Offset},
				Key: m.Key, Payload: m.Payload, Headers: m.Headers}
			if m.Time != 0 {
				out.Time = time.UnixMilli(m.Time)
			}
			return out, nil
		}
		if err := c.checkDeletedLocked(); err != nil {
			c.mu.Unlock()
			return nil, err
		}
		changed := c.changed
		if !c.startReadLocked() {
			c.mu.Unlock()
			// Nothing readable: the layout must have moved on (a sealed
			// segment read to its end, its children unknown yet).
			if err := c.waitLayout(ctx, changed); err != nil {
				return nil, err
			}
			continue
		}
		c.mu.Unlock()
		select {
		case r := <-c.fetching:
			c.fetching = nil
			if err := c.apply(ctx, r); err != nil {
				return nil, err
			}
			// Read the next batch while this one is consumed: one read in
			// flight behind the buffer, not a round trip of idle time per
			// batch.
			c.mu.Lock()
			if len(c.buf) > 0 {
				c.startReadLocked()
			}
			c.mu.Unlock()
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-c.closing:
			return nil, ErrClosed
		}
	}
}

// startReadLocked starts a read of what the ordering rule lets the
// consumer read from its fetch positions, unless one is in flight. It
// reports false when nothing is readable. The caller holds nextMu and mu.
func (c *CheckpointConsumer) startReadLocked() bool {
	if c.fetching != nil {
		return true
	}
	req, ok := c.nextReadLocked()
	if !ok {
		return false
	}
	ch, gen := make(chan readResult, 1), c.gen
	c.fetching = ch
	go func() { ch <- c.read(req, gen) }()
	return true
}

// waitLayout refreshes the layout and, if it did not change, waits for the
// push (or the fetch wait) before the caller looks again.
func (c *CheckpointConsumer) waitLayout(ctx context.Context, changed chan struct{}) error {
	if err := c.refreshLayout(ctx); err != nil {
		return err
	}
	timer := time.NewTimer(max(c.cfg.fetchWait, 10*time.Millisecond))
	defer timer.Stop()
	select {
	case <-changed:
	case <-timer.C:
	case <-ctx.Done():
		return ctx.Err()
	case <-c.closing:
		return ErrClosed
	}
	return nil
}

// skipMarker, as the Deliveries of a message in buf, marks the end of a
// run of offsets compaction removed (at Offset): Next moves past it without
// returning it.
const skipMarker = ^uint32(0)

// consumed records that Next returned m.
func (c *CheckpointConsumer) consumed(m *api.Message) {
	u := unit{m.Segment, m.Bucket}
	c.pos[u] = max(c.pos[u], m.Offset+1)
	c.settleLocked(topology.SegmentID(m.Segment))
}

// settleLocked marks a sealed segment drained (returned to its end) and
// fetch-drained (read to its end) once every bucket's final next offset is
// known and reached.
func (c *CheckpointConsumer) settleLocked(id topology.SegmentID) {
	s, ok := c.layout.Segment(id)
	if !ok || s.State != topology.StateSealed || c.drained[id] {
		return
	}
	fetched, returned := true, true
	for b := range s.Buckets {
		final, ok := c.final[unit{uint64(id), b}]
		if !ok {
			return
		}
		fetched = fetched && c.fetchPos[unit{uint64(id), b}] >= final
		returned = returned && c.pos[unit{uint64(id), b}] >= final
	}
	if fetched {
		c.fetchDrained[id] = true
	}
	if returned {
		c.drained[id] = true
		c.fetchDrained[id] = true
		for b := range s.Buckets {
			delete(c.pos, unit{uint64(id), b})
			delete(c.fetchPos, unit{uint64(id), b})
		}
	}
}

// checkDeletedLocked fails (or skips, with WithSkipGone) a deleted segment
// that was not read to its end.
func (c *CheckpointConsumer) checkDeletedLocked() error {
	for _, s := range c.layout.Segments {
		if s.State != topology.StateDeleted || c.fetchDrained[s.ID] {
			continue
		}
		e := &SegmentGoneError{Topic: c.topic, Segment: uint64(s.ID), Bucket: -1}
		if c.cfg.skipGone == nil {
			return e
		}
		c.drained[s.ID], c.fetchDrained[s.ID] = true, true
		c.cfg.skipGone(e)
	}
	return nil
}

// nextReadLocked builds the read of every unit the ordering rule allows
// that is not read to its end.
func (c *CheckpointConsumer) nextReadLocked() (api.ReadRequest, bool) {
	req := api.ReadRequest{Max: c.cfg.fetchMax, MaxBytes: c.cfg.fetchMaxBytes, Wait: c.cfg.fetchWait.String(), Compacted: c.cfg.readCompacted}
	for {
		settled := false
		req.Units = req.Units[:0]
		for _, id := range topology.Readable(c.layout, func(id topology.SegmentID) bool { return c.fetchDrained[id] }) {
			s, _ := c.layout.Segment(id)
			for b := range s.Buckets {
				u := unit{uint64(id), b}
				if final, ok := c.final[u]; ok && c.fetchPos[u] >= final {
					continue
				}
				req.Units = append(req.Units, api.ReadUnit{Segment: u.segment, Bucket: b, Offset: c.fetchPos[u]})
			}
			if s.State == topology.StateSealed && !c.fetchDrained[id] {
				c.settleLocked(id)
				settled = settled || c.fetchDrained[id]
			}
		}
		if !settled {
			return req, len(req.Units) > 0
		}
	}
}

// read runs one read request, bounded by the fetch wait plus the request
// timeout, and by Close.
func (c *CheckpointConsumer) read(req api.ReadRequest, gen uint64) readResult {
	body, err := json.Marshal(req)
	if err != nil {
		return readResult{err: err, gen: gen}
	}
	ctx, cancel := context.WithTimeout(c.ctx, c.cfg.fetchWait+c.cfg.requestTimeout)
	defer cancel()
	m, err := request(ctx, c.nc, 0, &nats.Msg{Subject: c.subjects.fetch, Data: body})
	if err != nil {
		return readResult{req: req, gen: gen, err: fmt.Errorf("read %s: %w", c.topic, err)}
	}
	reply, err := api.DecodeReadReply(m.Data)
	if err != nil {
		return readResult{req: req, gen: gen, err: fmt.Errorf("braid/client: read reply from %s: %w", c.topic, err)}
	}
	return readResult{req: req, reply: reply, gen: gen}
}

// apply takes a read's result: messages into buf, final offsets of sealed
// units, and what retention removed.
func (c *CheckpointConsumer) apply(ctx context.Context, r readResult) error {
	c.mu.Lock()
	if r.gen != c.gen {
		c.mu.Unlock()
		return nil // a Restore came in between
	}
	if r.err != nil {
		c.mu.Unlock()
		return r.err
	}
	stale := r.reply.Epoch > c.layout.Epoch
	var gone error
	for i, st := range r.reply.Units {
		if i >= len(r.req.Units) {
			break
		}
		u := unit{st.Segment, st.Bucket}
		switch st.Code {
		case 0:
			if st.Sealed {
				c.final[u] = st.Next
			}
		case api.CodeSegmentGone.Number:
			stale = true
		case api.CodeSegmentNotFound.Number:
			stale = true
		case api.CodeOffsetGone.Number, api.CodeOffsetsLost.Number:
			e := &SegmentGoneError{Topic: c.topic, Segment: st.Segment, Bucket: st.Bucket, Offset: r.req.Units[i].Offset, First: st.First}
			if st.Code == api.CodeOffsetsLost.Number {
				e.First, e.Lost = st.LostTo, true
			}
			if c.cfg.skipGone == nil {
				gone = errors.Join(gone, e)
				continue
			}
			c.fetchPos[u] = max(c.fetchPos[u], st.First)
			c.pos[u] = max(c.pos[u], st.First)
			c.cfg.skipGone(e)
		default:
			c.mu.Unlock()
			code, _ := api.CodeByNumber(st.Code)
			return fmt.Errorf("read segment %d bucket %d of %s: %w", st.Segment, st.Bucket, c.topic, &api.Error{Code: code, Message: st.Message})
		}
	}
	for i := range r.reply.Messages {
		m := &r.reply.Messages[i]
		u := unit{m.Segment, m.Bucket}
		if m.Offset != c.fetchPos[u] && (!c.cfg.readCompacted || m.Offset < c.fetchPos[u]) {
			continue // cannot happen with a well-behaved server
		}
		c.fetchPos[u] = m.Offset + 1
		c.buf = append(c.buf, *m)
	}
	if c.cfg.readCompacted {
		// Past the offsets compaction removed: a marker in buf moves pos
		// there too once Next has returned what comes before it.
		for _, st := range r.reply.Units {
			if u := (unit{st.Segment, st.Bucket}); st.Code == 0 && st.Resume > c.fetchPos[u] {
				c.fetchPos[u] = st.Resume
				c.buf = append(c.buf, api.Message{Segment: st.Segment, Bucket: st.Bucket, Offset: st.Resume - 1, Deliveries: skipMarker})
			}
		}
	}
	for _, st := range r.reply.Units {
		if st.Code == 0 && st.Sealed {
			c.settleLocked(topology.SegmentID(st.Segment))
		}
	}
	c.mu.Unlock()
	if stale {
		if err := c.refreshLayout(ctx); err != nil {
			return err
		}
	}
	return gone
}

// Checkpoint returns where the consumer is: after the last message Next
// returned.
func (c *CheckpointConsumer) Checkpoint() Checkpoint {
	c.mu.Lock()
	defer c.mu.Unlock()
	cp := Checkpoint{Topic: c.topic, Epoch: c.layout.Epoch}
	for id := range c.drained {
		cp.Drained = append(cp.Drained, uint64(id))
	}
	for u, off := range c.pos {
		if off > 0 && !c.drained[topology.SegmentID(u.segment)] {
			cp.Positions = append(cp.Positions, UnitPosition{Segment: u.segment, Bucket: u.bucket, Offset: off})
		}
	}
	// Canonical order, so that equal positions give equal checkpoints.
	slices.Sort(cp.Drained)
	slices.SortFunc(cp.Positions, comparePositions)
	return cp
}

// ErrCheckpointMismatch is returned by Restore for a checkpoint of another
// topic, or of a layout the server does not have.
var ErrCheckpointMismatch = errors.New("braid/client: checkpoint does not belong to this topic")

// Restore moves the consumer to cp: the next message Next returns is the
// first one after cp in its unit, under the ordering rule. Messages read
// ahead are dropped; a read in flight is ignored. A deleted segment cp did
// not drain, or offsets below a unit's first retained offset, are reported
// by Next as a *SegmentGoneError (or skipped, with WithSkipGone).
func (c *CheckpointConsumer) Restore(ctx context.Context, cp Checkpoint) error {
	if cp.Topic != c.topic {
		return fmt.Errorf("%w: checkpoint of %q restored on %q", ErrCheckpointMismatch, cp.Topic, c.topic)
	}
	c.mu.Lock()
	stale := cp.Epoch > c.layout.Epoch
	c.mu.Unlock()
	if stale {
		if err := c.refreshLayout(ctx); err != nil {
			return err
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if cp.Epoch > c.layout.Epoch {
		return fmt.Errorf("%w: checkpoint at layout epoch %d, the server's layout is at %d", ErrCheckpointMismatch, cp.Epoch, c.layout.Epoch)
	}
	c.gen++
	c.buf = nil
	c.pos, c.fetchPos = map[unit]uint64{}, map[unit]uint64{}
	c.drained, c.fetchDrained = map[topology.SegmentID]bool{}, map[topology.SegmentID]bool{}
	for _, id := range cp.Drained {
		c.drained[topology.SegmentID(id)], c.fetchDrained[topology.SegmentID(id)] = true, true
	}
	for _, p := range cp.Positions {
		u := unit{p.Segment, p.Bucket}
		c.pos[u], c.fetchPos[u] = p.Offset, p.Offset
	}
	return nil
}

// Close stops the consumer: Next returns ErrClosed. It is idempotent.
func (c *CheckpointConsumer) Close() error {
	c.closeOnce.Do(func() {
		close(c.closing)
		_ = c.push.Unsubscribe()
		c.stop()
	})
	return nil
}
