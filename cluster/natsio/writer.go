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
	// goroutine holds a batch it is writing. Guarded by mu.
	buf     []byte
	spare   []byte
	writing bool
}

func newWriter(c *Conn, max int) *writer {
	w := &writer{c: c, max: max, kick: make(chan struct{}, 1)}
	w.room = sync.NewCond(&w.mu)
	return w
}

// publish queues a PUB (or an HPUB when hdr is not empty).
func (w *writer) publish(subject, reply, hdr, data []byte) error {
	w.mu.Lock()
	for len(w.buf) > w.max && !w.closed() {
		w.room.Wait()
	}
	if w.closed() {
		w.mu.Unlock()
		return ErrClosed
	}
	wasEmpty := len(w.buf) == 0
	b := w.buf
	if len(hdr) > 0 {
		b = append(b, "HPUB "...)
	} else {
		b = append(b, "PUB "...)
	}
	b = append(b, subject...)
	b = append(b, ' ')
	if len(reply) > 0 {
		b = append(b, reply...)
		b = append(b, ' ')
	}
	if len(hdr) > 0 {
		b = strconv.AppendInt(b, int64(len(hdr)), 10)
		b = append(b, ' ')
	}
	b = strconv.AppendInt(b, int64(len(hdr)+len(data)), 10)
	b = append(b, "\r\n"...)
	b = append(b, hdr...)
	b = append(b, data...)
	b = append(b, "\r\n"...)
	w.buf = b
	w.mu.Unlock()
	if wasEmpty {
		w.wake()
	}
	return nil
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
			if len(w.buf) == 0 {
				w.mu.Unlock()
				break
			}
			batch := w.buf
			w.buf, w.spare = w.spare[:0], nil
			w.writing = true
			w.mu.Unlock()
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

// pongQueue holds the Flush calls waiting for a PONG, oldest first.
type pongQueue struct {
	mu      sync.Mutex
	waiting []chan struct{}
}

func (q *pongQueue) push(ch chan struct{}) {
	q.mu.Lock()
	q.waiting = append(q.waiting, ch)
	q.mu.Unlock()
}

func (q *pongQueue) pop() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.waiting) == 0 {
		return
	}
	close(q.waiting[0])
	q.waiting = q.waiting[1:]
}
