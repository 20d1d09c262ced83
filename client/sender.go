package client

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/braidmq/braid/api"
)

// The sender half of the Producer: the loop that cuts batches out of the
// unit queues and publishes them, and the handling of their replies.
//
// A batch is handed to the connection's mux (mux.go), which sends it in a
// produce-multi request and hands its results back by the batch's id
// (settle). So any number of units have batches in flight at once: each
// unit one, or up to WithUnitPipeline when it has full batches to send.

// sendLoop publishes the batches that are ready, then sleeps until a Send, a
// reply, a Flush or the earliest linger deadline wakes it.
func (p *Producer) sendLoop() {
	defer close(p.senderDone)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var buf []byte
	for {
		batches, wait := p.collect(time.Now())
		if len(batches) > 0 {
			var failed []failedPart
			for _, b := range batches {
				var f []failedPart
				buf, f = p.publish(b, buf[:0])
				failed = append(failed, f...)
			}
			p.pubMu.Unlock() // collect took it
			settleFailed(failed)
			continue
		}
		var deadline <-chan time.Time
		if wait > 0 {
			timer.Reset(wait)
			deadline = timer.C
		}
		select {
		case <-p.kick:
		case <-deadline:
		case <-p.ctx.Done():
			timer.Stop()
			return
		}
		timer.Stop()
	}
}

// collect cuts one batch from every unit that is idle and ready, and
// registers them as in flight. A unit is ready when its queue fills a batch,
// its oldest record has lingered long enough, or a Flush waits. wait is how
// long until the next unit becomes ready by lingering (0: none will).
//
// With batches, it returns holding pubMu (taken before mu is let go, so
// that batches reach the mux in the order they were cut); the caller
// publishes them and lets go of it.
func (p *Producer) collect(now time.Time) (batches []*batch, wait time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	defer func() {
		if len(batches) == 0 && wait > 0 {
			p.wakeAt = now.Add(wait)
		} else {
			p.wakeAt = time.Time{}
		}
		p.sleeping = len(batches) == 0 && wait == 0
		if len(batches) > 0 {
			p.pubMu.Lock()
		}
	}()
	if p.paused || p.stopped {
		return nil, 0
	}
	for u, q := range p.units {
		b, left := p.cutLocked(u, q, now)
		if b != nil {
			batches = append(batches, b)
		} else if left > 0 && (wait == 0 || left < wait) {
			wait = left
		}
	}
	return batches, wait
}

// cutLocked cuts a batch from unit u's queue q if the unit is idle and
// ready (see collect) and registers it as in flight; else it returns how
// long until the unit is ready by lingering (0: not by lingering). p.mu
// must be held.
func (p *Producer) cutLocked(u unit, q *unitQueue, now time.Time) (*batch, time.Duration) {
	if len(q.sent) >= p.cfg.unitPipeline || len(q.records) == 0 {
		return nil, 0
	}
	full := len(q.records) >= p.cfg.batchRecords || q.bytes >= p.cfg.batchBytes
	if len(q.sent) > 0 && !full && p.flushing == 0 {
		// Pipeline full batches only: a partial one waits for the batch
		// in flight and gathers what comes meanwhile.
		return nil, 0
	}
	if p.flushing == 0 && p.cfg.linger > 0 && !full {
		if left := q.since.Add(p.cfg.linger).Sub(now); left > 0 {
			return nil, left
		}
	}
	n, size := 0, 0
	for n < len(q.records) && n < p.cfg.batchRecords && (n == 0 || size+q.records[n].size <= p.cfg.batchBytes) {
		size += q.records[n].size
		n++
	}
	p.lastID++
	b := &batch{id: p.lastID, unit: u, records: q.records[:n:n]}
	if p.cfg.epochRouting {
		b.epoch = p.router.epoch
	}
	if p.cfg.direct && !p.ownerDown.Load() {
		b.owner = p.router.owner
	}
	q.records = q.records[n:]
	q.bytes -= size
	q.sent = append(q.sent, b)
	p.inFlight[b.id] = b
	p.unsettled++
	return b, 0
}

// publish encodes one batch and hands it to the connection's mux, which
// sends it (see produceMux); buf is scratch space, returned for reuse.
// The caller holds pubMu. It returns the batches that could not be sent,
// to fail once pubMu is let go.
func (p *Producer) publish(b *batch, buf []byte) ([]byte, []failedPart) {
	buf = p.encode(b, buf)
	return buf, p.mux.send(p, b, slices.Clone(buf))
}

// encode appends the encoding of batch b to buf.
func (p *Producer) encode(b *batch, buf []byte) []byte {
	buf = api.AppendBatchHeader(buf, len(b.records))
	for _, pd := range b.records {
		buf = api.AppendRecord(buf, &pd.rec)
	}
	return buf
}

// settle records the outcome of batch id: per-record results, or err for
// the whole batch. A second outcome (a reply after the timeout) finds
// nothing and is dropped. Outcomes are processed per unit in send order, by
// one settle call at a time per unit (the others leave theirs to it), each
// in three steps, so that the callbacks of one key run in Send order and
// records rejected as sealed queue up in send order:
//
//  1. under mu: take the answered batches from the head of the unit's sent
//     list and sort their records into done and rejected-as-sealed;
//  2. call the callbacks of the done records;
//  3. under mu: count the batches settled, and loop while more are
//     answered; then apply a pending layout change if nothing is in flight.
func (p *Producer) settle(id uint64, results []api.Result, err error) {
	p.mu.Lock()
	b := p.inFlight[id]
	if b == nil {
		p.mu.Unlock()
		return
	}
	delete(p.inFlight, id)
	b.answered, b.results, b.err = true, results, err
	q := p.units[b.unit]
	if q == nil || q.settling {
		p.mu.Unlock()
		return
	}
	q.settling = true
	for {
		var ready []*batch
		for len(q.sent) > 0 && q.sent[0].answered {
			ready = append(ready, q.sent[0])
			q.sent[0] = nil
			q.sent = q.sent[1:]
		}
		if len(ready) == 0 {
			break
		}
		var done []completion
		for _, rb := range ready {
			done = p.outcomeLocked(rb, done)
		}
		p.mu.Unlock()
		p.complete(done)
		p.mu.Lock()
		p.unsettled -= len(ready)
	}
	q.settling = false
	// The sender has work only if this unit has records waiting for the
	// place its batch freed (another unit's readiness did not change; a
	// layout to apply wakes it from tryApply).
	wake := len(q.records) > 0 || p.units[b.unit] != q || p.flushing > 0 || p.closed
	if len(q.records) == 0 && len(q.sent) == 0 && p.units[b.unit] == q {
		delete(p.units, b.unit)
	}
	p.tryApply()
	p.mu.Unlock()
	if wake {
		p.wakeSender()
	}
}

// outcomeLocked sorts the records of an answered batch into done (returned,
// appended to) and rejected-as-sealed (queued for re-routing, asking for the
// layout the rejection named). p.mu must be held.
func (p *Producer) outcomeLocked(b *batch, done []completion) []completion {
	err := b.err
	if err == nil && len(b.results) != len(b.records) {
		err = fmt.Errorf("braid/client: produce-batch reply from %s: %w: %d results for %d records",
			p.topic, api.ErrMalformed, len(b.results), len(b.records))
	}
	var sealedEpoch uint64
	anySealed := false
	done = slices.Grow(done, len(b.records))
	for i, pd := range b.records {
		rerr := err
		if rerr == nil {
			r := b.results[i]
			if r.Code == 0 {
				pd.sealed = 0
				done = append(done, completion{p: pd, id: MessageID{Segment: r.Segment, Bucket: r.Bucket, Offset: r.Offset}})
				continue
			}
			rerr = r.Err()
		}
		var apiErr *api.Error
		if errors.As(rerr, &apiErr) && apiErr.Code == api.CodeSegmentSealed && !p.stopped {
			pd.sealed++
			pd.lastSealed = rerr
			if pd.sealed <= maxReroutes {
				p.rejected[b.unit] = append(p.rejected[b.unit], pd)
				sealedEpoch = max(sealedEpoch, apiErr.Epoch)
				anySealed = true
				continue
			}
			rerr = fmt.Errorf("%w: %w", ErrRerouteLimit, rerr)
		}
		done = append(done, completion{p: pd, err: rerr})
	}
	if anySealed {
		p.needLayout(sealedEpoch)
	}
	b.results = nil
	return done
}
