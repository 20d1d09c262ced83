package consumers

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/clock"
)

// Notices: what a consumer is told when an admin deletes its subscription,
// or moves its positions, with force while it is attached. Left alone, such
// a consumer would get CONSUMER_UNKNOWN at its next request, join again and
// carry on: after a delete its join would create the subscription anew,
// and after a seek it would keep the positions it held (a stream consumer
// drops messages below the offsets it has returned, and sends again the
// acks it had made). So its joins, fetches, acks and nacks are refused with
// the notice's error instead, until it leaves or the notice expires: its
// session timeout, and at least NoticeTTL. A leave is answered OK.

// NoticeTTL is the shortest time a notice is kept.
const NoticeTTL = time.Minute

// noticeBoard holds the notices of one Manager's subscriptions. Safe for
// concurrent use: the manager checks it before a request is sent to a
// group, the group when it handles the request.
type noticeBoard struct {
	// active counts the entries, so that the common case takes no lock.
	active  atomic.Int64
	mu      sync.Mutex
	entries map[noticeKey]notice
	// clock is the manager's (nil: clock.Real); it times the notices out.
	clock clock.Clock
}

func (b *noticeBoard) now() time.Time { return clock.Or(b.clock).Now() }

type noticeKey struct{ topic, subscription, consumer string }

type notice struct {
	err   *api.Error
	until time.Time
}

// add notices consumer of a subscription with err, for its session timeout
// (at least NoticeTTL).
func (b *noticeBoard) add(topic, subscription, consumer string, session time.Duration, err *api.Error) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.entries == nil {
		b.entries = make(map[noticeKey]notice)
	}
	now := b.now()
	for k, n := range b.entries {
		if !now.Before(n.until) {
			delete(b.entries, k)
		}
	}
	b.entries[noticeKey{topic, subscription, consumer}] = notice{err: err, until: now.Add(max(session, NoticeTTL))}
	b.active.Store(int64(len(b.entries)))
}

// lookup returns consumer's notice, nil if it has none; leaving forgets it.
func (b *noticeBoard) lookup(topic, subscription, consumer string, leaving bool) *api.Error {
	if b == nil || b.active.Load() == 0 {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	k := noticeKey{topic, subscription, consumer}
	n, ok := b.entries[k]
	if !ok {
		return nil
	}
	expired := !b.now().Before(n.until)
	if leaving || expired {
		delete(b.entries, k)
		b.active.Store(int64(len(b.entries)))
	}
	if expired {
		return nil
	}
	return n.err
}

// intercept answers msg, a consumer's request, when that consumer has a
// notice — with the notice's error, or OK for a leave — and reports
// whether it did.
func (b *noticeBoard) intercept(topic, subscription string, msg any) bool {
	if b == nil || b.active.Load() == 0 {
		return false
	}
	consumer, leaving := requestConsumer(msg)
	if consumer == "" {
		return false
	}
	err := b.lookup(topic, subscription, consumer, leaving)
	if err == nil {
		return false
	}
	if leaving {
		replyRequest(msg, nil)
	} else {
		replyRequest(msg, err)
	}
	return true
}

// requestConsumer returns the consumer a request comes from ("" for other
// messages) and whether it is a leave.
func requestConsumer(msg any) (string, bool) {
	switch m := msg.(type) {
	case *Join:
		return m.Consumer, false
	case *queueJoin:
		return m.Consumer, false
	case *Fetch:
		return m.Consumer, false
	case *Ack:
		return m.Consumer, false
	case *queueNack:
		return m.Consumer, false
	case *Leave:
		return m.Consumer, true
	}
	return "", false
}

// replyRequest answers a consumer's request with err (its empty reply).
func replyRequest(msg any, err error) {
	switch m := msg.(type) {
	case *Join:
		replyJoin(m, api.JoinReply{}, err)
	case *queueJoin:
		if m.Reply != nil {
			m.Reply(api.JoinReply{}, err)
		}
	case *Fetch:
		replyFetch(m, nil, 0, err)
	case *Ack:
		replyErr(m.Reply, err)
	case *queueNack:
		replyErr(m.Reply, err)
	case *Leave:
		replyErr(m.Reply, err)
	}
}
