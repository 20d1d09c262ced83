package natsio

import (
	"strconv"
	"sync"
	"time"
)

// writer queues what the connection sends and writes it from one
// goroutine: whatever was published while the previous write ran goes out
// in the next, as one write.
type writer struct {
	c     *Conn
	max   int
	kick  chan struct{} // capacity 1: there may be something to write
	pongs pongQueue

	mu   sync.Mutex
	room *sync.Cond // broadcast when a write is done
	// buf is what is queued and not yet written; writing says the run
	// goroutine holds a batch it is writing; holds counts the holds
	// (Conn.Hold) under way. Guarded by mu.
	buf     []byte
	spare   []byte
	writing bool
	holds   int
}

func newWriter(c *Conn, max int) *writer {
	w := &writer{c: c, max: max, kick: make(chan struct{}, 1)}
	w.room = sync.NewCond(&w.mu)
	return w
}

// publish queues a PUB (or an HPUB when hdr is not empty).
func (w *writer) publish(subject, reply, hdr, data []byte) error {
	w.mu.Lock()
	if err := w.waitRoomLocked(); err != nil {
		w.mu.Unlock()
		return err
	}
	wasEmpty := len(w.buf) == 0
	w.buf = AppendPublish(w.buf, subject, reply, hdr, data)
	w.mu.Unlock()
	if wasEmpty {
		w.wake()
	}
	return nil
}

// waitRoomLocked waits while MaxPending bytes are queued; it fails once
// the connection is closed. The caller holds mu.
func (w *writer) waitRoomLocked() error {
	// Not while held: the holder may be the caller, and writes at its
	// release.
	for len(w.buf) > w.max && w.holds == 0 && !w.closed() {
		w.room.Wait()
	}
	if w.closed() {
		return ErrClosed
	}
	return nil
}

// AppendPublish appends the frame of a publish (a PUB, or an HPUB when hdr
// is not empty) to dst, for Conn.WriteFrames.
func AppendPublish(dst, subject, reply, hdr, data []byte) []byte {
	if len(hdr) > 0 {
		dst = append(dst, "HPUB "...)
	} else {
		dst = append(dst, "PUB "...)
	}
	dst = append(dst, subject...)
	dst = append(dst, ' ')
	if len(reply) > 0 {
		dst = append(dst, reply...)
		dst = append(dst, ' ')
	}
	if len(hdr) > 0 {
		dst = strconv.AppendInt(dst, int64(len(hdr)), 10)
		dst = append(dst, ' ')
	}
	dst = strconv.AppendInt(dst, int64(len(hdr)+len(data)), 10)
	dst = append(dst, "\r\n"...)
	dst = append(dst, hdr...)
	dst = append(dst, data...)
	return append(dst, "\r\n"...)
}

// writeFrames queues frames and, when no write is under way, writes
// everything queued from the calling goroutine rather than waking the
// writer's: a caller answering a batch of requests saves the hand-over.
func (w *writer) writeFrames(frames []byte) error {
	w.mu.Lock()
	if err := w.waitRoomLocked(); err != nil {
		w.mu.Unlock()
		return err
	}
	w.buf = append(w.buf, frames...)
	if w.writing || w.holds > 0 {
		// The write under way is followed by the next; a hold's release
		// writes what it held.
		w.mu.Unlock()
		return nil
	}
	return w.writeQueuedLocked()
}

// hold makes writeFrames queue without writing until release.
func (w *writer) hold() {
	w.mu.Lock()
	w.holds++
	w.mu.Unlock()
}

// release ends a hold; the last one writes what is queued, from the
// calling goroutine, unless a write is under way (which is followed by
// the next).
func (w *writer) release() {
	w.mu.Lock()
	w.holds--
	if w.holds > 0 || w.writing || len(w.buf) == 0 {
		w.mu.Unlock()
		return
	}
	_ = w.writeQueuedLocked()
}

// writeQueuedLocked writes what is queued from the calling goroutine and
// wakes the writer's if more was queued meanwhile. The caller holds mu,
// which it lets go of.
func (w *writer) writeQueuedLocked() error {
	batch := w.takeLocked()
	w.mu.Unlock()
	err := w.writeBatch(batch)
	w.mu.Lock()
	more := len(w.buf) > 0
	w.mu.Unlock()
	if more {
		w.wake()
	}
	return err
}

// takeLocked takes the queued bytes for a write; the caller holds mu and
// must call writeBatch with them.
func (w *writer) takeLocked() []byte {
	batch := w.buf
	w.buf, w.spare = w.spare[:0], nil
	w.writing = true
	return batch
}

// writeBatch writes a batch taken by takeLocked.
func (w *writer) writeBatch(batch []byte) error {
	_, err := w.c.conn.Write(batch)
	w.mu.Lock()
	w.writing = false
	if cap(batch) <= 4*w.max {
		w.spare = batch[:0]
	}
	w.room.Broadcast()
	w.mu.Unlock()
	if err != nil {
		w.c.fail(err)
	}
	return err
}

// appendRaw queues a protocol line as it is.
func (w *writer) appendRaw(p []byte) error {
	w.mu.Lock()
	if w.closed() {
		w.mu.Unlock()
		return ErrClosed
	}
	wasEmpty := len(w.buf) == 0
	w.buf = append(w.buf, p...)
	w.mu.Unlock()
	if wasEmpty {
		w.wake()
	}
	return nil
}

func (w *writer) closed() bool {
	select {
	case <-w.c.done:
		return true
	default:
		return false
	}
}

func (w *writer) wake() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

func (w *writer) run() {
	for {
		select {
		case <-w.kick:
		case <-w.c.done:
			w.mu.Lock()
			w.room.Broadcast()
			w.mu.Unlock()
			return
		}
		for {
			w.mu.Lock()
			if len(w.buf) == 0 || w.writing {
				// Nothing to write, or a caller of writeFrames is
				// writing: it wakes this loop if more is queued after.
				w.mu.Unlock()
				break
			}
			batch := w.takeLocked()
			w.mu.Unlock()
			if w.writeBatch(batch) != nil {
				return
			}
		}
	}
}

// drain waits until what is queued is written, or timeout.
func (w *writer) drain(timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	timer := time.AfterFunc(timeout, func() {
		w.mu.Lock()
		w.room.Broadcast()
		w.mu.Unlock()
	})
	defer timer.Stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	for (len(w.buf) > 0 || w.writing) && !w.closed() && time.Now().Before(deadline) {
		w.room.Wait()
	}
}

// pongQueue holds what waits for the PONG of a PING sent (a Flush, the
// end of an Unsubscribe), oldest first; each PONG runs the oldest.
type pongQueue struct {
	mu      sync.Mutex
	waiting []func()
}

func (q *pongQueue) push(f func()) {
	q.mu.Lock()
	q.waiting = append(q.waiting, f)
	q.mu.Unlock()
}

func (q *pongQueue) pop() {
	q.mu.Lock()
	if len(q.waiting) == 0 {
		q.mu.Unlock()
		return
	}
	f := q.waiting[0]
	q.waiting = q.waiting[1:]
	q.mu.Unlock()
	f()
}
