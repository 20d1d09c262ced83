package frontend

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/braidmq/braid/compaction"

	"github.com/braidmq/braid/actors"
	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/consumers"
	"github.com/braidmq/braid/topology"
	"github.com/braidmq/braid/wal"
	"github.com/nats-io/nats.go/micro"
)

// Direct reads (braid.v1.read.*): no subscription, no state on the server.

// MaxReadUnits bounds the units of one read.fetch.
const MaxReadUnits = 4096

// readFetch serves braid.v1.read.fetch.<t>.<ns>.<topic>.
func (n *Frontend) readFetch(r replier, req micro.Request, t *actors.Topic) {
	var rr api.ReadRequest
	if err := decodeJSON(req.Data(), &rr); err != nil {
		r.err(err)
		return
	}
	if len(rr.Units) == 0 || len(rr.Units) > MaxReadUnits {
		r.err(api.Errorf(api.CodeInvalidArgument, "units: want 1 to %d, got %d", MaxReadUnits, len(rr.Units)))
		return
	}
	if l := t.Layout(); l.Fixed() && someParts(l, rr.Units) {
		t.NotePartitionClient(r.reply) // a reader of some partitions only (topic.migrate asks)
	}
	// The limits and defaults of a fetch, but no wait unless asked for.
	if rr.Wait == "" {
		rr.Wait = "0s"
	}
	f, err := consumers.ParseFetch(api.FetchRequest{Subscription: "read", Consumer: "read", Max: rr.Max, MaxBytes: rr.MaxBytes, Wait: rr.Wait, Format: rr.Format})
	if err != nil {
		r.err(err)
		return
	}
	maxBytes := min(f.MaxBytes, maxFetchReplyBytes)
	deadline := time.Now().Add(f.Wait)
	send := func(reply *api.ReadReply) {
		if rr.Format == consumers.FormatJSON {
			r.json(readReplyJSON(reply))
			return
		}
		size := 16 + 24*len(reply.Units) + messagesSize(reply.Messages)
		r.data(api.AppendReadReply(make([]byte, 0, size), reply), nil)
	}
	appended, changed := t.Appended(), t.Changed()
	reply := readUnits(t, rr.Units, f.Max, maxBytes, rr.Compacted)
	if !worthWaiting(reply) || f.Wait <= 0 {
		send(reply)
		return
	}
	// Nothing to say yet: wait for an append or a layout change, off the
	// NATS handler goroutine.
	stopping, ok := n.reads.add()
	if !ok {
		r.err(api.Errorf(api.CodeUnavailable, "the server is stopping"))
		return
	}
	go func() {
		defer n.reads.done()
		for {
			timer := time.NewTimer(time.Until(deadline))
			select {
			case <-appended:
			case <-changed:
			case <-timer.C:
			case <-stopping:
				timer.Stop()
				r.err(api.Errorf(api.CodeUnavailable, "the server is stopping"))
				return
			}
			timer.Stop()
			appended, changed = t.Appended(), t.Changed()
			reply := readUnits(t, rr.Units, f.Max, maxBytes, rr.Compacted)
			if !worthWaiting(reply) || !time.Now().Before(deadline) {
				send(reply)
				return
			}
		}
	}()
}

// readReplyJSON converts a read reply to its JSON form.
func readReplyJSON(r *api.ReadReply) api.ReadReplyJSON {
	out := api.ReadReplyJSON{Epoch: r.Epoch, Units: make([]api.UnitStatusJSON, len(r.Units)), Messages: fetchJSON(r.Messages).Messages}
	for i, u := range r.Units {
		j := api.UnitStatusJSON{Segment: u.Segment, Bucket: u.Bucket, Code: u.Code, First: u.First, Next: u.Next, Sealed: u.Sealed,
			LostFrom: u.LostFrom, LostTo: u.LostTo, Resume: u.Resume}
		if c, ok := api.CodeByNumber(u.Code); ok && u.Code != 0 {
			j.Error = c.Symbol
			if u.Message != "" {
				j.Error += ": " + u.Message
			}
		}
		out.Units[i] = j
	}
	return out
}

// worthWaiting reports whether a read found nothing to report: no message,
// every unit readable, active and at its end.
func worthWaiting(r *api.ReadReply) bool {
	if len(r.Messages) > 0 {
		return false
	}
	for _, u := range r.Units {
		if u.Code != 0 || u.Sealed {
			return false
		}
	}
	return true
}

// readUnits reads up to maxMsgs messages and about maxBytes of payload from
// the units, in fair shares, each from its offset; compacted reads the
// compacted view (actors.Topic.ReadCompacted).
func readUnits(t *actors.Topic, units []api.ReadUnit, maxMsgs, maxBytes int, compacted bool) *api.ReadReply {
	l := t.Layout()
	reply := &api.ReadReply{Epoch: l.Epoch, Units: make([]api.UnitStatus, len(units))}
	from := make([]uint64, len(units))
	var active []int
	for i, ru := range units {
		st := &reply.Units[i]
		st.Segment, st.Bucket = ru.Segment, ru.Bucket
		from[i] = ru.Offset
		s, ok := l.Segment(topology.SegmentID(ru.Segment))
		switch {
		case !ok:
			st.Code = api.CodeSegmentNotFound.Number
			continue
		case s.State == topology.StateDeleted:
			st.Code = api.CodeSegmentGone.Number
			continue
		case ru.Bucket < 0 || ru.Bucket >= s.Buckets:
			st.Code = api.CodeInvalidArgument.Number
			continue
		}
		first, next, err := t.Bounds(s.ID, ru.Bucket)
		if err != nil {
			st.Code = api.AsError(err).Code.Number
			continue
		}
		st.First, st.Next, st.Sealed = first, next, s.State == topology.StateSealed
		switch {
		case ru.Offset < first && compacted:
			from[i] = first // what retention removed is not in the compacted view: read on
			if first < next {
				active = append(active, i)
			}
		case ru.Offset < first:
			st.Code = api.CodeOffsetGone.Number
		case ru.Offset > next:
			st.Code = api.CodeInvalidArgument.Number
		case ru.Offset < next:
			active = append(active, i)
		}
	}
	// Size the reply once: growing it message by message copies it over
	// and over.
	room := uint64(0)
	for _, i := range active {
		room += reply.Units[i].Next - from[i]
	}
	reply.Messages = make([]api.Message, 0, min(room, uint64(maxMsgs)))
	bytes := 0
	started := make([]bool, len(units))
	full := func() bool { return len(reply.Messages) >= maxMsgs || (len(reply.Messages) > 0 && bytes >= maxBytes) }
	_ = consumers.FairShares(active, maxMsgs, func() int { return len(reply.Messages) }, full, func(i int, n int) (bool, error) {
		ru := units[i]
		// recs from the log, at offsets from[i] on; or, compacted, the
		// kept records at the offsets in offs.
		var recs []wal.Record
		var kept []compaction.Kept // compacted: the records at their offsets
		var err error
		resume := uint64(0)
		if compacted {
			kept, resume, err = t.ReadCompacted(topology.SegmentID(ru.Segment), ru.Bucket, from[i], n, max(maxBytes-bytes, 1))
		} else {
			recs, err = t.Read(topology.SegmentID(ru.Segment), ru.Bucket, from[i], n, max(maxBytes-bytes, 1))
		}
		if err != nil {
			if !started[i] {
				// Nothing of the unit was read: its status says why.
				unitError(&reply.Units[i], err)
			}
			return false, err
		}
		started[i] = true
		taken, got := 0, len(recs)+len(kept)
		for j := range got {
			rec, off := (*wal.Record)(nil), from[i]
			if compacted {
				rec, off = &kept[j].Record, kept[j].Offset
			} else {
				rec = &recs[j]
			}
			if len(reply.Messages) > 0 && bytes+len(rec.Payload) > maxBytes {
				break
			}
			m := api.Message{Segment: ru.Segment, Bucket: ru.Bucket, Offset: off, Time: rec.Timestamp, Key: rec.Key, Payload: rec.Payload}
			for _, h := range rec.Headers {
				m.Headers = append(m.Headers, api.Header{Name: h.Key, Value: h.Value})
			}
			reply.Messages = append(reply.Messages, m)
			bytes += len(rec.Payload)
			from[i] = off + 1
			taken++
		}
		if compacted && taken == got {
			from[i] = max(from[i], resume) // past what compaction removed after the last one too
		}
		return taken == n && taken == got && from[i] < reply.Units[i].Next, nil
	})
	if compacted {
		for i := range reply.Units {
			if st := &reply.Units[i]; st.Code == 0 {
				st.Resume = from[i]
			}
		}
	}
	return reply
}

// unitError sets the status of a unit whose read failed: OFFSETS_LOST with
// the lost range for a hole in its log, else the error's code, and its text.
func unitError(st *api.UnitStatus, err error) {
	var hole *wal.HoleError
	if errors.As(err, &hole) {
		st.Code, st.LostFrom, st.LostTo = api.CodeOffsetsLost.Number, hole.From, hole.To
		st.Message = fmt.Sprintf("offsets [%d, %d) of segment %d bucket %d were lost to damage in its log; read on from %d",
			hole.From, hole.To, st.Segment, st.Bucket, hole.To)
		return
	}
	e := api.AsError(err)
	st.Code, st.Message = e.Code.Number, e.Message
}

// readOffsets serves braid.v1.read.offsets.<t>.<ns>.<topic>.
func (n *Frontend) readOffsets(r replier, req micro.Request, t *actors.Topic) {
	var or api.OffsetsRequest
	if len(req.Data()) > 0 {
		if err := decodeJSON(req.Data(), &or); err != nil {
			r.err(err)
			return
		}
	}
	if or.Time < 0 {
		r.err(api.Errorf(api.CodeInvalidArgument, "time %d: want unix milliseconds", or.Time))
		return
	}
	l := t.Layout()
	reply := api.OffsetsReply{Epoch: l.Epoch, Units: []api.UnitOffsets{}}
	for _, s := range l.Segments {
		if s.State == topology.StateDeleted {
			continue
		}
		for b := range s.Buckets {
			first, next, err := t.Bounds(s.ID, b)
			if err != nil {
				r.err(err)
				return
			}
			u := api.UnitOffsets{Segment: uint64(s.ID), Bucket: b, First: first, Next: next, Sealed: s.State == topology.StateSealed}
			if or.Time > 0 {
				u.HasTimeOffset = true
				if u.TimeOffset, err = offsetForTime(t, s.ID, b, first, next, or.Time); err != nil {
					r.err(err)
					return
				}
			}
			reply.Units = append(reply.Units, u)
		}
	}
	b, _ := json.Marshal(reply)
	r.data(b, nil)
}

// offsetForTime binary-searches [first, next) for the first offset whose
// record time is >= ts, assuming times do not decrease along the log (see
// api.OffsetsRequest for what it returns when they do).
func offsetForTime(t *actors.Topic, seg topology.SegmentID, bucket int, first, next uint64, ts int64) (uint64, error) {
	lo, hi := first, next
	for lo < hi {
		mid := lo + (hi-lo)/2
		recs, err := t.Read(seg, bucket, mid, 1, 0)
		if err != nil {
			return 0, err
		}
		if len(recs) == 0 || recs[0].Timestamp >= ts {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo, nil
}

// parkedReads tracks the read.fetch requests waiting for data, so that the
// node stops them before it closes the logs they would read.
type parkedReads struct {
	mu      sync.Mutex
	stopped bool
	closing chan struct{}
	wg      sync.WaitGroup
}

// add registers a waiting read; it returns the channel closed at stop, or
// false once the node is stopping.
func (p *parkedReads) add() (<-chan struct{}, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return nil, false
	}
	if p.closing == nil {
		p.closing = make(chan struct{})
	}
	p.wg.Add(1)
	return p.closing, true
}

func (p *parkedReads) done() { p.wg.Done() }

// stop answers every waiting read and waits for them.
func (p *parkedReads) stop() {
	p.mu.Lock()
	if !p.stopped {
		p.stopped = true
		if p.closing != nil {
			close(p.closing)
		}
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// someParts reports whether units, read from fixed layout l, leave out
// some of its partitions.
func someParts(l topology.Layout, units []api.ReadUnit) bool {
	read := make([]bool, len(l.Partitions()))
	n := 0
	for _, u := range units {
		if p := l.PartitionOf(topology.SegmentID(u.Segment)); p >= 0 && p < len(read) && !read[p] {
			read[p] = true
			n++
		}
	}
	return n < len(read)
}
