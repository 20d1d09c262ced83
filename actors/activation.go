package actors

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/meta"
	"github.com/braidmq/braid/routing"
)

// Topics are active only while they are used. A start loads no topic; the
// first request naming one reads its record from the store and starts its
// controller, segments and buckets (activate), and a topic nobody used
// for Config.IdleTimeout, with no consumer group running, is stopped
// again and its logs closed (passivate). An idle topic costs no memory
// beyond its record in the store, no goroutine, no open file and no CPU.
//
// Passivation is invisible to clients but for the next request's latency:
// the controller publishes a passivated snapshot under the topic's routing
// lock, so that no append is being routed to its buckets afterwards (a
// produce that finds the snapshot passivated asks the manager for the
// topic again, which waits for the passivation to end and activates it
// anew); it waits for every bucket to make what it holds durable and
// answer it, then stops. Only then are the logs closed and the topic
// forgotten, so a new activation never opens a log the old one still
// writes.

// DefaultIdleTimeout is how long a topic stays active without use.
const DefaultIdleTimeout = 5 * time.Minute

// activationTimeout bounds reading a topic's record and starting it.
const activationTimeout = 10 * time.Second

// touch records a use of the topic (see passivation).
func (t *Topic) touch() { t.lastUse.Store(time.Now().UnixNano()) }

// Live reports whether the topic serves requests: not deleted, not
// passivated. A handle that is not live is looked up again.
func (t *Topic) Live() bool {
	st := t.state.Load()
	return !st.deleted && !st.passivated
}

// again returns the live topic of t's name (activating it), for a call
// that found t passivated.
func (t *Topic) again() (*Topic, error) { return t.mgr.TopicByName(t.name) }

// againForAppend is again for an append: a topic that moved to another
// node meanwhile (a drain) refuses it with SEGMENT_SEALED naming the
// layout epoch of the move, so that the producer refreshes the layout and
// resends it there (nothing was stored).
func (t *Topic) againForAppend() (*Topic, error) {
	nt, err := t.again()
	var moved *NotOwnerError
	if errors.As(err, &moved) && moved.Epoch > 0 {
		return nil, api.SealedError(0, moved.Epoch)
	}
	return nt, err
}

// activate loads a topic that is not active from the store and starts it;
// the caller found it neither active nor being activated or passivated.
// It returns (nil, nil) when another call got there first: look again.
func (m *Manager) activate(name routing.TopicName) (*Topic, error) {
	uri := name.String()
	m.mu.Lock()
	if err := m.movingError(uri); err != nil {
		m.mu.Unlock()
		return nil, err
	}
	if m.closed || m.topics[uri] != nil || m.activating[uri] != nil || m.passivating[uri] != nil {
		m.mu.Unlock()
		return nil, nil
	}
	if _, q := m.quarantined[uri]; q {
		m.mu.Unlock()
		return nil, nil
	}
	done := make(chan struct{})
	m.activating[uri] = done
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.activating, uri)
		m.mu.Unlock()
		close(done)
	}()

	begin := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), activationTimeout)
	defer cancel()
	rec, rev, err := m.meta.Topic(ctx, name)
	switch {
	case errors.Is(err, meta.ErrNotFound):
		return nil, api.Errorf(api.CodeTopicNotFound, "topic %s does not exist", name)
	case errors.Is(err, meta.ErrCorrupt):
		m.quarantine(uri, err)
		return nil, quarantinedError(uri, err.Error())
	case err != nil:
		m.m.activations.WithLabelValues("failed").Inc()
		m.log.Error("topic activation: its record could not be read", "topic", uri, "err", err)
		return nil, api.Errorf(api.CodeUnavailable, "topic %s: its record could not be read: %v", name, err)
	}
	if owner := LayoutOwner(rec.Layout); m.cfg.Owns != nil && !m.cfg.Owns(owner) {
		return nil, &NotOwnerError{Topic: uri, Owner: owner, Epoch: rec.Layout.Epoch}
	}
	if other, replaced := m.replacedHome(rec.Layout); replaced {
		// This node is the home by name only: its data directory was
		// replaced since (a new incarnation), and it holds none of the
		// home segment's copies. A node that holds one takes the topic
		// over (cluster: takeover.go); requests go there meanwhile.
		m.log.Warn("a replicated topic homed here, whose copies this data directory does not hold: left to its replicas", "topic", uri, "replica", other)
		return nil, &NotOwnerError{Topic: uri, Owner: other, Epoch: rec.Layout.Epoch}
	}
	ns, err := m.namespace(ctx, name.NamespaceName())
	if err != nil {
		m.m.activations.WithLabelValues("failed").Inc()
		return nil, err
	}
	if err := m.admitActivation(rec); err != nil {
		m.m.activations.WithLabelValues("refused").Inc()
		return nil, err
	}
	t, err := m.spawnTopic(name, rec, rev, ns.Policies)
	if err != nil {
		m.quarantine(uri, fmt.Errorf("start: %w", err))
		return nil, err
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		_ = m.system.Root.StopFuture(t.pid).Wait()
		return nil, api.Errorf(api.CodeUnavailable, "the server is shutting down")
	}
	m.topics[uri] = t
	m.m.activeTopics.Set(float64(len(m.topics)))
	m.mu.Unlock()
	m.m.activations.WithLabelValues("ok").Inc()
	m.m.activationSeconds.Observe(time.Since(begin).Seconds())
	return t, nil
}

// passivateReq asks a controller to stop routing to its buckets and to
// have them answer everything they hold.
type passivateReq struct{}

type passivateResp struct{ err error }

// passivate stops an idle topic and closes its logs. It reports whether
// it did: a topic used since it was picked, or with a consumer group
// running, stays.
func (m *Manager) passivate(t *Topic, idle time.Duration) bool {
	return m.stopTopic(t, idle, false)
}

// stopTopic stops an active topic as passivate does; forced, whether or
// not it is in use.
func (m *Manager) stopTopic(t *Topic, idle time.Duration, force bool) bool {
	m.mu.Lock()
	if m.closed || m.topics[t.uri] != t || !force && (time.Since(time.Unix(0, t.lastUse.Load())) < idle || m.inUse(t.uri)) {
		m.mu.Unlock()
		return false
	}
	delete(m.topics, t.uri)
	done := make(chan struct{})
	m.passivating[t.uri] = done
	m.m.activeTopics.Set(float64(len(m.topics)))
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.passivating, t.uri)
		m.mu.Unlock()
		close(done)
	}()
	res, err := m.system.Root.RequestFuture(t.pid, passivateReq{}, sealTimeout+time.Second).Result()
	if err == nil {
		if r, ok := res.(*passivateResp); ok {
			err = r.err
		}
	}
	if err != nil {
		// The buckets answer what they hold when they stop, all the same
		// (UNAVAILABLE for what they could not write).
		m.log.Error("topic passivation: the buckets did not drain in time; stopping them anyway", "topic", t.uri, "err", err)
	}
	if err := m.system.Root.StopFuture(t.pid).Wait(); err != nil {
		m.log.Warn("topic passivation: stop controller", "topic", t.uri, "err", err)
	}
	m.stopGroups(t.name, -1)
	if err := m.store.CloseTopic(t.name); err != nil {
		m.log.Warn("topic passivation: close logs", "topic", t.uri, "err", err)
	}
	t.closeCompactedReaders() // the next activation makes a Topic of its own
	m.forgetSeries(t.uri)
	m.m.passivations.Inc()
	return true
}

// forgetStopped forgets topic t if it is still known as active once its
// controller stopped: its supervisor gave up restarting it (a controller
// that could not read its record for too long). Its last snapshot says
// passivated, so that every handle looks the topic up again, and the next
// request activates it anew. A topic stopped on purpose (passivated,
// deleted, the manager closing) was forgotten before.
func (m *Manager) forgetStopped(t *Topic) {
	m.mu.Lock()
	known := m.topics[t.uri] == t
	if known {
		delete(m.topics, t.uri)
		m.m.activeTopics.Set(float64(len(m.topics)))
	}
	m.mu.Unlock()
	if !known {
		return
	}
	if st := t.state.Load(); st != nil && !st.passivated && !st.deleted {
		next := *st
		next.passivated = true
		next.changed = make(chan struct{})
		t.publish(&next)
	}
	m.log.Error("a topic controller stopped for good (its restarts failed); the topic activates again on its next request", "topic", t.uri)
}

// inUse reports whether something outside the topic's actors holds it
// (Config.InUse: its consumer groups). The caller holds mu.
func (m *Manager) inUse(uri string) bool {
	return m.cfg.InUse != nil && m.cfg.InUse(uri)
}

// forgetSeries drops the per-topic series of a topic that is no longer
// active here (passivated or deleted): they come back when it does.
func (m *Manager) forgetSeries(uri string) {
	match := topicMatch(uri)
	for _, v := range []*prometheus.CounterVec{m.m.appendedMsgs, m.m.appendedBytes, m.m.scalingOps, m.m.suppressed} {
		v.DeletePartialMatch(match)
	}
	for _, v := range []*prometheus.GaugeVec{m.m.activeSegs, m.m.hotKey, m.m.segMsgRate, m.m.segByteRate, m.m.backlog, m.m.withheld} {
		v.DeletePartialMatch(match)
	}
}

// sweep passivates every topic idle for longer than idle.
func (m *Manager) sweep(idle time.Duration) int {
	m.mu.RLock()
	var candidates []*Topic
	cutoff := time.Now().Add(-idle).UnixNano()
	for _, t := range m.topics {
		if t.lastUse.Load() < cutoff {
			candidates = append(candidates, t)
		}
	}
	m.mu.RUnlock()
	n := 0
	for _, t := range candidates {
		if m.passivate(t, idle) {
			n++
		}
	}
	return n
}

// runSweeper passivates idle topics until stop is closed.
func (m *Manager) runSweeper(idle time.Duration, stop <-chan struct{}) {
	every := min(max(idle/4, 50*time.Millisecond), 30*time.Second)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
			if n := m.sweep(idle); n > 0 {
				m.log.Debug("idle topics passivated", "count", n)
			}
			m.sweepHosted(idle)
			m.sweepServed(idle)
		}
	}
}

// drainBuckets has every bucket of st answer what it holds (written and
// durable, or refused) and waits for them, within sealTimeout.
func drainBuckets(root *actor.RootContext, st *topicState) error {
	var pids []*actor.PID
	for _, seg := range st.buckets {
		pids = append(pids, seg...)
	}
	return drain(root, pids)
}

// drain has the buckets pids answer what they hold and waits for them,
// within sealTimeout.
func drain(root *actor.RootContext, pids []*actor.PID) error {
	futures := make([]*actor.Future, len(pids))
	for i, pid := range pids {
		futures[i] = root.RequestFuture(pid, drainReq{}, sealTimeout)
	}
	var first error
	for _, f := range futures {
		if _, err := f.Result(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// drainReq asks a bucket to write and acknowledge what it holds; it
// answers drainResp once every append it took is answered.
type drainReq struct{}

type drainResp struct{}
