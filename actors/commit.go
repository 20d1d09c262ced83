package actors

import (
	"sync"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/wal"
)

// committer makes a bucket's batches durable off the actor's goroutine
// (DurabilityAlways): the actor writes a batch with wal.Write and hands its
// appends here; the committer runs wal.Commit, which covers every batch
// written before it, and acknowledges them, while the actor writes the
// next. So the fsync of one batch overlaps the encoding and writing of the
// next instead of holding up the bucket, and a batch that arrives during
// an fsync waits for one fsync, not for two.
type committer struct {
	key       UnitKey
	log       *wal.Log
	onDurable func() // called after each commit that acknowledged something
	// onSynced, when set, is called right after each fsync returns, before
	// its appends are acknowledged: the bucket writes its next batch then.
	onSynced func()

	mu   sync.Mutex
	idle *sync.Cond // broadcast when waiting becomes empty
	// waiting holds the written batches not yet acknowledged, in offset
	// order. Guarded by mu.
	waiting []writtenBatch

	wake chan struct{} // capacity 1: work may be waiting
	stop chan struct{}
	done chan struct{}
}

// writtenBatch is one batch written to the log and not yet durable: the
// appends it holds and the offset after its last record.
type writtenBatch struct {
	reqs  []appendReq
	first uint64
	end   uint64
}

func startCommitter(key UnitKey, log *wal.Log, onDurable func()) *committer {
	c := &committer{key: key, log: log, onDurable: onDurable,
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	c.idle = sync.NewCond(&c.mu)
	go c.run()
	return c
}

// add queues a written batch for acknowledgement once durable.
func (c *committer) add(b writtenBatch) {
	c.mu.Lock()
	c.waiting = append(c.waiting, b)
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// drain returns once every batch added before it is acknowledged.
func (c *committer) drain() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.waiting) > 0 {
		c.idle.Wait()
	}
}

// close drains and stops the committer.
func (c *committer) close() {
	c.drain()
	close(c.stop)
	<-c.done
}

func (c *committer) run() {
	defer close(c.done)
	for {
		select {
		case <-c.wake:
		case <-c.stop:
			return
		}
		for c.commitOnce() {
		}
	}
}

// commitOnce commits what is written and acknowledges the batches it
// covers; it reports whether there was anything waiting.
func (c *committer) commitOnce() bool {
	c.mu.Lock()
	empty := len(c.waiting) == 0
	c.mu.Unlock()
	if empty {
		return false
	}
	next, err := c.log.Commit()
	if c.onSynced != nil {
		c.onSynced()
	}
	c.mu.Lock()
	n := len(c.waiting)
	if err == nil {
		n = 0
		for n < len(c.waiting) && c.waiting[n].end <= next {
			n++
		}
	}
	ready := c.waiting[:n:n]
	c.waiting = append([]writtenBatch(nil), c.waiting[n:]...)
	c.mu.Unlock()
	for _, b := range ready {
		if err != nil {
			for i := range b.reqs {
				b.reqs[i].settle(c.unit(), 0, api.Errorf(api.CodeInternal, "append to %s: %v", c.key, err))
			}
			continue
		}
		ackBatch(c.unit(), b)
	}
	if len(ready) > 0 && err == nil && c.onDurable != nil {
		c.onDurable()
	}
	c.mu.Lock()
	if len(c.waiting) == 0 {
		c.idle.Broadcast()
	}
	c.mu.Unlock()
	return true
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
