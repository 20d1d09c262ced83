package consumers

import (
	"sync/atomic"
	"time"
)

// Groups passivate when idle, as topics do: a group no request reached for
// the idle timeout, and longer than any session timeout its consumers
// asked for (so that no consumer it still counts as alive is forgotten),
// is stopped after the requests in its mailbox, its log closed. The next
// request spawns it again, after the old one stopped, and it replays its
// log: acknowledged positions, owners and queue state are all there. A
// request that meets the group while it stops waits for it and goes to the
// new one. While a group runs, its topic stays active (Running).

// groupUse is when a group was last sent a request, and the longest
// session timeout a join asked of it.
type groupUse struct {
	last    atomic.Int64 // unix ns
	session atomic.Int64 // ns
}

// newGroupUse is the use of a group spawned at now.
func newGroupUse(now time.Time) *groupUse {
	u := &groupUse{}
	u.last.Store(now.UnixNano())
	return u
}

// touch notes a request sent at now, from a consumer that asked for
// session (0: not a join).
func (u *groupUse) touch(now time.Time, session time.Duration) {
	u.last.Store(now.UnixNano())
	if s := int64(session); s > u.session.Load() {
		u.session.Store(s)
	}
}

// idleSince reports whether the group has been idle for idle and for the
// longest session timeout it was asked for, at now.
func (u *groupUse) idleSince(now time.Time, idle time.Duration) bool {
	quiet := now.Sub(time.Unix(0, u.last.Load()))
	return quiet >= idle && quiet >= time.Duration(u.session.Load())
}

// PassivateIdle stops the groups idle for idle (see groupUse) and returns
// how many it stopped, once they have.
func (m *Manager) PassivateIdle(idle time.Duration) int {
	now := m.clock.Now()
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return 0
	}
	var keys []groupKey
	for k, u := range m.use {
		if u.idleSince(now, idle) && m.parked[k] == nil {
			keys = append(keys, k)
		}
	}
	done := make(map[groupKey]chan struct{}, len(keys))
	for _, k := range keys {
		done[k] = make(chan struct{})
		m.parked[k] = done[k]
	}
	futures := m.poisonLocked(keys)
	m.mu.Unlock()
	if err := waitStopped(futures); err != nil {
		m.logger.Warn("idle consumer groups: stop", "err", err)
	}
	m.mu.Lock()
	for k, ch := range done {
		delete(m.parked, k)
		close(ch)
	}
	m.mu.Unlock()
	if len(keys) > 0 {
		m.logger.Debug("idle consumer groups passivated", "count", len(keys))
	}
	return len(keys)
}

// idleSweepEvery is how often the idle sweeper looks for groups idle for
// idle: a quarter of it, within [50ms, 30s].
func idleSweepEvery(idle time.Duration) time.Duration {
	return min(max(idle/4, 50*time.Millisecond), 30*time.Second)
}

// StartIdleSweeper passivates idle groups (PassivateIdle) until Close: a
// sweep every idleSweepEvery(idle) on the manager's clock, each armed when
// the one before has finished.
func (m *Manager) StartIdleSweeper(idle time.Duration) {
	if idle <= 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed || m.idleTimer != nil {
		return
	}
	every := idleSweepEvery(idle)
	var sweep func()
	sweep = func() {
		m.PassivateIdle(idle)
		m.mu.Lock()
		defer m.mu.Unlock()
		if !m.closed {
			m.idleTimer = m.clock.AfterFunc(every, sweep)
		}
	}
	m.idleTimer = m.clock.AfterFunc(every, sweep)
}

// StartIdleSweeper passivates idle queue groups until Close.
func (q *QueueManager) StartIdleSweeper(idle time.Duration) { q.m.StartIdleSweeper(idle) }

// PassivateIdle stops the queue groups idle for idle.
func (q *QueueManager) PassivateIdle(idle time.Duration) int { return q.m.PassivateIdle(idle) }
