package actors

import (
	"log/slog"
	"sync"

	"github.com/braidmq/braid/wal"
)

// committer writes and fsyncs a bucket's appends off the actor's goroutine
// (DurabilityAlways): the actor submits what it accepted, in order; the
// committer writes everything submitted so far as one batch, starts its
// fsync, acknowledges the batch before it (durable since the previous
// fsync) while the disk works, and waits. What arrives during an fsync is
// the next batch: one write and one fsync per batch however the appends
// trickle in, the next fsync starting as soon as the last one returns, and
// no hop between goroutines on the way.
type committer struct {
	key       UnitKey
	w         *unitWriter
	logger    *slog.Logger
	onDurable func() // called after each acknowledged batch
	// account, when set before the first submit, is told of each batch
	// as it is written (the bucket's metrics and load meter).
	account func(reqs []appendReq)

	mu   sync.Mutex
	cond *sync.Cond // signalled when work arrives, the loop idles, or stop
	// incoming holds the submitted appends not yet written, in order;
	// busy says the loop holds appends not yet acknowledged; stopping is
	// set by close. Guarded by mu.
	incoming []appendReq
	busy     bool
	stopping bool

	batch []wal.Record // the loop's reused gather buffer
	done  chan struct{}
}

// writtenBatch is one batch written to the log and not yet acknowledged:
// the appends it holds and the offset of its first record.
type writtenBatch struct {
	reqs  []appendReq
	first uint64
}

func startCommitter(key UnitKey, w *unitWriter, logger *slog.Logger, onDurable func()) *committer {
	c := &committer{key: key, w: w, logger: logger, onDurable: onDurable, done: make(chan struct{})}
	c.cond = sync.NewCond(&c.mu)
	go c.run()
	return c
}

// submit queues appends for the next batch, after everything submitted
// before.
func (c *committer) submit(reqs []appendReq) {
	c.mu.Lock()
	wake := len(c.incoming) == 0
	c.incoming = append(c.incoming, reqs...)
	c.mu.Unlock()
	if wake {
		c.cond.Broadcast()
	}
}

// drain returns once every append submitted before it is acknowledged.
func (c *committer) drain() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.incoming) > 0 || c.busy {
		c.cond.Wait()
	}
}

// close drains and stops the committer.
func (c *committer) close() {
	c.drain()
	c.mu.Lock()
	c.stopping = true
	c.mu.Unlock()
	c.cond.Broadcast()
	<-c.done
}

// take returns the submitted appends; with wait, it waits for some (and
// reports false once stopping), else it may return none.
func (c *committer) take(wait bool) ([]appendReq, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if wait {
		for len(c.incoming) == 0 {
			if c.busy {
				c.busy = false
				c.cond.Broadcast() // drain may be waiting
			}
			if c.stopping {
				return nil, false
			}
			c.cond.Wait()
		}
	}
	reqs := c.incoming
	c.incoming = nil
	if len(reqs) > 0 {
		c.busy = true
	}
	return reqs, true
}

func (c *committer) run() {
	defer close(c.done)
	var durable *writtenBatch // fsynced, not yet acknowledged
	for {
		reqs, ok := c.take(durable == nil)
		if !ok {
			return
		}
		if len(reqs) == 0 {
			c.ack(durable)
			durable = nil
			continue
		}
		l, err := c.w.writable()
		if err != nil {
			c.ack(durable)
			durable = nil
			c.refuse(reqs, err)
			continue
		}
		written, err := c.write(l, reqs)
		if err != nil {
			c.ack(durable)
			durable = nil
			c.refuse(reqs, c.w.failed(l, err))
			continue
		}
		pending := l.StartCommit()
		c.ack(durable)
		durable = nil
		if _, err := pending.Wait(); err != nil {
			c.refuse(reqs, c.w.failed(l, err))
			continue
		}
		durable = &written
	}
}

// write writes reqs to l as one batch.
func (c *committer) write(l *wal.Log, reqs []appendReq) (writtenBatch, error) {
	recs := reqs[0].records
	if len(reqs) > 1 {
		c.batch = c.batch[:0]
		for i := range reqs {
			c.batch = append(c.batch, reqs[i].records...)
		}
		recs = c.batch
	}
	first, err := l.Write(recs...)
	clear(c.batch) // drop the references to the request buffers
	if err == nil && c.account != nil {
		c.account(reqs)
	}
	return writtenBatch{reqs: reqs, first: first}, err
}

func (c *committer) ack(b *writtenBatch) {
	if b == nil {
		return
	}
	ackBatch(c.unit(), *b)
	if c.onDurable != nil {
		c.onDurable()
	}
}

// refuse answers reqs with err (the unitWriter logged the failure).
func (c *committer) refuse(reqs []appendReq, err error) {
	for i := range reqs {
		reqs[i].settle(c.unit(), 0, err)
	}
}

func (c *committer) unit() unitRef { return unitRef{c.key.Segment, c.key.Bucket} }

// ackBatch acknowledges the appends of a durable batch of unit u with
// their offsets.
func ackBatch(u unitRef, b writtenBatch) {
	off := b.first
	for i := range b.reqs {
		b.reqs[i].settle(u, off, nil)
		off += uint64(len(b.reqs[i].records))
	}
}
