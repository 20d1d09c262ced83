package consumers

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/clock"
	"github.com/braidmq/braid/internal/poll"
)

// maintainedLogs opens LocalLogs wrapped in a log that wants maintenance
// every 10 s of the clock, counting the calls.
type maintainedLogs struct {
	clock clock.Clock
	calls *atomic.Int32
}

type maintainedLog struct {
	StateLog
	clock clock.Clock
	calls *atomic.Int32
	last  time.Time
}

func (o *maintainedLogs) Open(req LogRequest, apply func([]byte) error) (StateLog, int, error) {
	l, n, err := LocalLogs{}.Open(req, apply)
	if l == nil {
		return nil, n, err
	}
	return &maintainedLog{StateLog: l, clock: o.clock, calls: o.calls, last: o.clock.Now()}, n, err
}

func (l *maintainedLog) MaintainAt() time.Time { return l.last.Add(10 * time.Second) }

func (l *maintainedLog) Maintain(now time.Time) error {
	l.last = now
	l.calls.Add(1)
	return nil
}

// TestGroupMaintainsItsLog: a group whose state log wants maintenance
// (a replicated log following its replicas) gives it at the time the log
// asks, from the group's timer, with no request coming in.
func TestGroupMaintainsItsLog(t *testing.T) {
	src := newTestSource(t, 1, 1)
	var calls atomic.Int32
	logs := &maintainedLogs{calls: &calls}
	h := newHarness(t, src, WithLogs(logs))
	logs.clock = h.clock // the groups' clock; no log opens before the join
	if _, err := h.joinReq(api.JoinRequest{Consumer: "c1", SessionTimeout: "1h"}); err != nil {
		t.Fatal(err)
	}
	h.clock.advance(t, 10*time.Second-time.Millisecond)
	h.fetch("c1", 1) // the group has handled whatever the move made due
	if n := calls.Load(); n != 0 {
		t.Fatalf("maintained %d times before the log asked", n)
	}
	h.clock.advance(t, time.Millisecond)
	poll.Eventually(t, replyTimeout, "the log maintained when it asked", func() bool { return calls.Load() == 1 })
	h.clock.advance(t, 10*time.Second)
	poll.Eventually(t, replyTimeout, "the log maintained again 10 s later", func() bool { return calls.Load() == 2 })
}
