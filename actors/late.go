package actors

import (
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"
)

// lateAppends answers the appends still in a bucket's mailbox when the
// bucket stops. protoactor drops the user messages a stopped actor's
// mailbox holds, unanswered: an append sent by a snapshot of the layout
// that still named the bucket (a topic deleted, a sealed segment retired
// after its grace, a node stopping) reached a mailbox the bucket never
// read again, and its producer waited until its timeout. A mailbox
// middleware sees every message the mailbox hands on, the dropped ones
// too: once the bucket has stopped, it sends each append it sees to the
// dead letters, which the manager answers UNAVAILABLE (Manager.deadLetter)
// as it answers an append sent to a bucket that is gone.
type lateAppends struct {
	// stopped is set by the bucket when it has stopped for good (not at
	// a restart); self and system are its own, set when it starts.
	stopped atomic.Bool
	self    atomic.Pointer[actor.PID]
	system  atomic.Pointer[actor.ActorSystem]
}

// started records the bucket's PID and system.
func (l *lateAppends) started(ctx actor.Context) {
	l.self.Store(ctx.Self())
	l.system.Store(ctx.ActorSystem())
}

func (l *lateAppends) MailboxStarted()   {}
func (l *lateAppends) MessagePosted(any) {}
func (l *lateAppends) MailboxEmpty()     {}
func (l *lateAppends) MessageReceived(msg any) {
	q, ok := msg.(appendReq)
	if !ok || !l.stopped.Load() {
		return // handled by the bucket, or not an append
	}
	if sys := l.system.Load(); sys != nil {
		sys.DeadLetter.SendUserMessage(l.self.Load(), q)
	}
}
