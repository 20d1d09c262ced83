package client

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/braidmq/braid/api"
)

// The producers of one NATS connection send their batches through one
// produceMux, as produce-multi requests (api.MultiPart): a batch goes out
// at once while fewer than muxInFlight requests of the connection await
// their replies; past that, batches wait and go out together, batches of
// any topics of a tenant in one request, as soon as a reply frees a place.
// So records spread over many topics share requests, as Kafka's producer
// puts the batches of many partitions in one request to a broker, and
// records of one topic still go out as fast as the connection answers.
//
// Order: the mux publishes in the order batches were handed to it, holding
// its lock, and the server appends the parts of a request in order and the
// requests of a connection in order; a unit has one batch in flight (or a
// pipeline of them, handed in order), so each key's records reach the
// server in Send order.

// muxInFlight is how many produce-multi requests a connection keeps in
// flight before batches wait to share one.
const muxInFlight = 8

// muxes holds the mux of each connection with producers, and how many.
var muxes = struct {
	sync.Mutex
	byConn map[*nats.Conn]*produceMux
}{byConn: map[*nats.Conn]*produceMux{}}

// produceMux sends the batches of the producers of one connection.
type produceMux struct {
	nc      *nats.Conn
	inbox   string
	sub     *nats.Subscription
	maxBody int
	refs    int // producers using it; guarded by muxes

	mu sync.Mutex
	// Guarded by mu: queue holds the batches waiting, in order; inFlight
	// are the requests sent and not answered or timed out, by id; lastID
	// the last id used.
	queue    []muxPart
	inFlight map[uint64]*muxRequest
	lastID   uint64
	buf      []byte
	// parts counts the batches sent, in lastID requests.
	parts uint64
	// retryAt, when set, holds the queue until then: its first parts found
	// no node (see onReply); retryTimer fires then.
	retryAt    time.Time
	retryTimer *time.Timer

	lingerer *lingerer // cuts the batches whose linger ends (linger.go)
}

// muxPart is one batch of one producer.
type muxPart struct {
	p      *Producer
	b      *batch
	tenant string
	owner  string // the node it goes straight to ("": any node)
	again  bool   // sent again after no node took it
	// since is when it was first sent (zero before): a part no node takes
	// is sent again until its producer's request timeout has passed.
	since   time.Time
	epoch   uint64
	records []byte // the encoded batch
}

// muxRequest is one produce-multi request in flight.
type muxRequest struct {
	parts []muxPart
	owner string
	timer *time.Timer
}

// acquireMux returns the mux of nc, making it for the first producer.
func acquireMux(nc *nats.Conn) (*produceMux, error) {
	muxes.Lock()
	defer muxes.Unlock()
	if m := muxes.byConn[nc]; m != nil {
		m.refs++
		return m, nil
	}
	m := &produceMux{nc: nc, inbox: nc.NewInbox(), inFlight: map[uint64]*muxRequest{}, refs: 1,
		maxBody: max(int(nc.MaxPayload())-(64<<10), 1<<16)}
	sub, err := nc.Subscribe(m.inbox+".*", m.onReply)
	if err != nil {
		return nil, fmt.Errorf("braid/client: subscribing to produce replies: %w", err)
	}
	m.sub = sub
	m.lingerer = newLingerer(m)
	muxes.byConn[nc] = m
	return m, nil
}

// release lets go of the mux; the last producer's release ends it.
func (m *produceMux) release() {
	muxes.Lock()
	m.refs--
	last := m.refs == 0
	if last {
		delete(muxes.byConn, m.nc)
	}
	muxes.Unlock()
	if last {
		m.lingerer.close()
		m.mu.Lock()
		if m.retryTimer != nil {
			m.retryTimer.Stop()
		}
		m.mu.Unlock()
		_ = m.sub.Unsubscribe()
	}
}

// send hands a batch of p to the mux. records is its encoding, which the
// mux keeps.
// It returns the batches whose request could not be published, for the
// caller to fail (settleFailed) once it holds no lock of its producer.
func (m *produceMux) send(p *Producer, b *batch, records []byte) []failedPart {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.queue = append(m.queue, muxPart{p: p, b: b, tenant: p.tenant, owner: b.owner, epoch: b.epoch, records: records})
	return m.publishLocked()
}

// enqueue queues a batch of p without sending it; the caller publishes
// (publishLocked) once it has queued what it has.
func (m *produceMux) enqueue(p *Producer, b *batch, records []byte) {
	m.mu.Lock()
	m.queue = append(m.queue, muxPart{p: p, b: b, tenant: p.tenant, owner: b.owner, epoch: b.epoch, records: records})
	m.mu.Unlock()
}

// publishLocked sends what waits while places are free: the waiting
// batches of the first one's tenant, in order, in one request up to the
// largest body. It returns the parts whose publish failed.
func (m *produceMux) publishLocked() []failedPart {
	var failed []failedPart
	if !m.retryAt.IsZero() {
		if wait := time.Until(m.retryAt); wait > 0 {
			return nil // the timer publishes then
		}
		m.retryAt = time.Time{}
	}
	for len(m.queue) > 0 && len(m.inFlight) < muxInFlight {
		tenant, owner := m.queue[0].tenant, m.queue[0].owner
		var parts []muxPart
		size := 0
		rest := m.queue[:0]
		var behind map[*Producer]bool // producers with a batch left to wait
		for i, part := range m.queue {
			fits := len(parts) == 0 || size+len(part.records)+64 <= m.maxBody
			// Batches of another tenant, those that do not fit, and those
			// of a producer with one of them, keep their place: each
			// producer's batches go out in order.
			if part.tenant != tenant || part.owner != owner || !fits || behind[part.p] {
				if behind == nil {
					behind = map[*Producer]bool{}
				}
				behind[part.p] = true
				rest = append(rest, m.queue[i])
				continue
			}
			parts = append(parts, part)
			size += len(part.records) + 64
		}
		clear(m.queue[len(rest):])
		m.queue = rest
		m.lastID++
		id := m.lastID
		m.buf = api.AppendMultiHeader(m.buf[:0], len(parts))
		timeout := time.Duration(0)
		now := time.Now()
		for i, part := range parts {
			m.buf = api.AppendMultiPart(m.buf, part.p.namespace, part.p.name, part.epoch, part.records)
			timeout = max(timeout, part.p.cfg.requestTimeout)
			if part.since.IsZero() {
				parts[i].since = now
			}
		}
		req := &muxRequest{parts: parts, owner: owner}
		m.inFlight[id] = req
		m.parts += uint64(len(parts))
		subject := api.ProduceMultiPrefix + "." + tenant
		if owner != "" {
			subject = api.DirectSubject(owner, subject)
		}
		err := m.nc.PublishMsg(&nats.Msg{Subject: subject, Reply: m.inbox + "." + strconv.FormatUint(id, 36), Data: m.buf})
		if err != nil {
			delete(m.inFlight, id)
			for _, part := range parts {
				failed = append(failed, failedPart{part, fmt.Errorf("braid/client: publishing a produce request to %s: %w", part.p.topic, err)})
			}
			continue
		}
		// A request unanswered within its producers' timeout fails its
		// batches with ErrTimeout (never resent: they may have landed).
		req.timer = time.AfterFunc(timeout, func() { m.expire(id) })
	}
	return failed
}

// noResponderRetry is how long batches that no node took wait before
// they are sent again through any node.
const noResponderRetry = 100 * time.Millisecond

// retry sends what the queue held back after a request no node took.
func (m *produceMux) retry() {
	m.mu.Lock()
	m.retryAt = time.Time{}
	failed := m.publishLocked()
	m.mu.Unlock()
	settleFailed(failed)
}

// failedPart is a batch whose request could not be sent.
type failedPart struct {
	part muxPart
	err  error
}

func settleFailed(failed []failedPart) {
	for _, f := range failed {
		f.part.p.settle(f.part.b.id, nil, f.err)
	}
}

// expire fails the batches of a request whose reply did not come in time,
// and frees its place.
func (m *produceMux) expire(id uint64) {
	m.mu.Lock()
	req := m.inFlight[id]
	delete(m.inFlight, id)
	failed := m.publishLocked()
	m.mu.Unlock()
	settleFailed(failed)
	if req == nil {
		return // answered meanwhile
	}
	for _, part := range req.parts {
		part.p.settle(part.b.id, nil, fmt.Errorf("produce batch to %s: %w", part.p.topic, ErrTimeout))
	}
}

// onReply handles the reply to a request: each batch's results go to its
// producer.
func (m *produceMux) onReply(msg *nats.Msg) {
	token := msg.Subject[strings.LastIndexByte(msg.Subject, '.')+1:]
	id, err := strconv.ParseUint(token, 36, 64)
	if err != nil {
		return
	}
	m.mu.Lock()
	req := m.inFlight[id]
	delete(m.inFlight, id)
	var gaveUp []muxPart
	if req != nil && msg.Header.Get("Status") == "503" && len(msg.Data) == 0 {
		// No node took the request (NATS's no-responders status): nothing
		// was appended, so its batches are sent again, ahead of what
		// waits (behind any sent again before: their refusals came first,
		// as they were sent first). Sent straight to an owner nobody
		// serves, they go through any node at once, and their producers
		// stop going straight until their next layout. Sent through any
		// node (no node serves the clients, or the owner it forwarded to
		// is gone and the topic not moved yet), they wait a moment, until
		// their producer's request timeout.
		req.timer.Stop()
		direct := req.owner != ""
		now := time.Now()
		at := 0
		for at < len(m.queue) && m.queue[at].again {
			at++
		}
		again := make([]muxPart, 0, len(req.parts)+len(m.queue))
		again = append(again, m.queue[:at]...)
		for _, part := range req.parts {
			if !direct && now.Sub(part.since) >= part.p.cfg.requestTimeout {
				gaveUp = append(gaveUp, part)
				continue
			}
			if direct {
				part.p.ownerDown.Store(true)
			}
			part.owner, part.again = "", true
			again = append(again, part)
		}
		for _, part := range m.queue[at:] {
			if part.p.ownerDown.Load() {
				part.owner = ""
			}
			again = append(again, part)
		}
		m.queue = again
		if !direct && len(again) > 0 {
			m.retryAt = now.Add(noResponderRetry)
			if m.retryTimer == nil {
				m.retryTimer = time.AfterFunc(noResponderRetry, m.retry)
			} else {
				m.retryTimer.Reset(noResponderRetry)
			}
		}
		req = nil
	}
	failed := m.publishLocked()
	m.mu.Unlock()
	settleFailed(failed)
	for _, part := range gaveUp {
		part.p.settle(part.b.id, nil, fmt.Errorf("produce batch to %s: %w", part.p.topic, ErrNoServer))
	}
	if req == nil {
		return // timed out (the producers failed its batches) or sent again
	}
	req.timer.Stop()
	replies, err := api.DecodeMultiReplies(msg.Data)
	if rerr := replyError(msg); rerr != nil {
		err = rerr
	} else if err == nil && len(replies) != len(req.parts) {
		err = fmt.Errorf("%w: %d part replies for %d parts", api.ErrMalformed, len(replies), len(req.parts))
	}
	for i, part := range req.parts {
		switch {
		case err != nil:
			part.p.settle(part.b.id, nil, fmt.Errorf("braid/client: produce reply from %s: %w", part.p.topic, err))
		case replies[i].Err != nil:
			part.p.settle(part.b.id, nil, replies[i].Err)
		default:
			part.p.settle(part.b.id, replies[i].Results, nil)
		}
	}
}
