package actors

import (
	"sync"
	"sync/atomic"

	"github.com/braidmq/braid/logstore"

	"github.com/asynkron/protoactor-go/actor"
)

// bucketLane lets the produce path hand an append straight to a bucket's
// committer, past the bucket's mailbox, while the bucket is in its plain
// state (active, not gated, durability always): one goroutine hand-over
// less per append. The bucket actor opens and closes the lane as its state
// changes (openLane, closeLane), and an append takes the lane only when no
// append the produce path sent through the mailbox is still waiting there,
// so that appends reach the committer in the order they were sent. A lane
// outlives its bucket's restarts; one is made for each bucket of a
// segment (controller.spawnSegment).
type bucketLane struct {
	mu sync.Mutex
	// Guarded by mu:
	// commit is the committer direct appends go to while open is set.
	// viaMailbox counts the appends sent through the mailbox (laned) that
	// the bucket has not disposed of yet; while it is above zero, appends
	// go through the mailbox too, behind them.
	open       bool
	commit     *logstore.Committer[appendReq]
	viaMailbox int
	// ackedNext is, for a bucket that writes to another node (hosted.go),
	// the offset after the last record that node acknowledged, plus one
	// (0: none yet): the topic answers the bucket's bounds from it.
	ackedNext atomic.Uint64
}

// send hands q to the bucket whose mailbox is pid: to its committer when
// the lane is open and nothing sent through the mailbox is waiting there,
// else through the mailbox (counted).
func (l *bucketLane) send(root *actor.RootContext, pid *actor.PID, q appendReq) {
	if l == nil {
		root.Send(pid, q)
		return
	}
	l.mu.Lock()
	if l.open && l.viaMailbox == 0 {
		l.commit.Submit([]appendReq{q})
		l.mu.Unlock()
		return
	}
	l.viaMailbox++
	l.mu.Unlock()
	q.laned = true
	root.Send(pid, q)
}

// disposed tells the lane that the bucket took a laned append out of its
// mailbox and put it somewhere (its queue, its held or gated list, a
// refusal, a successor). submitTo, when not nil, gets reqs (the append and
// what else the bucket submits with it) under the lane's lock, so that no
// direct append overtakes them.
func (l *bucketLane) disposed(n int, submitTo *logstore.Committer[appendReq], reqs []appendReq) {
	l.mu.Lock()
	if submitTo != nil {
		submitTo.Submit(reqs)
	}
	l.viaMailbox -= n
	l.mu.Unlock()
}

// openLane lets direct appends go to c.
func (l *bucketLane) openLane(c *logstore.Committer[appendReq]) {
	if l == nil || c == nil {
		return
	}
	l.mu.Lock()
	l.open, l.commit = true, c
	l.mu.Unlock()
}

// closeLane sends every later append through the mailbox. Appends that
// took the lane before it returns are in the committer's queue.
func (l *bucketLane) closeLane() {
	if l == nil {
		return
	}
	l.mu.Lock()
	l.open, l.commit = false, nil
	l.mu.Unlock()
}
