package consumers

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/clock"
	"github.com/braidmq/braid/routing"
	"github.com/braidmq/braid/topology"
	"github.com/braidmq/braid/wal"
)

// Request limits and defaults (see api/consume.go).
const (
	DefaultFetchMax      = 256
	MaxFetchMax          = 10000
	DefaultFetchMaxBytes = 1 << 20
	MaxFetchMaxBytes     = 64 << 20
	DefaultFetchWait     = time.Second
	MaxFetchWait         = 30 * time.Second

	DefaultSessionTimeout = 10 * time.Second
	MinSessionTimeout     = 100 * time.Millisecond
	MaxSessionTimeout     = time.Hour

	// MaxAckPositions bounds the positions of one ack request.
	MaxAckPositions = 10000

	// DefaultCompactAfter is the number of records a group's log may hold
	// before it is rewritten as one snapshot.
	DefaultCompactAfter = 4096
)

// Fetch reply formats.
const (
	FormatBinary = "binary"
	FormatJSON   = "json"
)

// Option configures a Manager.
type Option func(*managerOptions)

type managerOptions struct {
	compactAfter   int
	sessionTimeout time.Duration
	durability     wal.Durability
	queue          queueOptions // queue subscriptions only (NewQueueManager)
	// clock tells the time and runs the timers of the manager and its
	// groups; nil is clock.Real.
	clock clock.Clock
	// prepare, when set, runs before a group is spawned (move.go).
	prepare func(topic, subscription, dir string) error
	// logs opens the groups' state logs (statelog.go); nil: LocalLogs.
	logs LogOpener
}

// WithCompactAfter sets how many records a group's log holds before it is
// compacted into one snapshot (default DefaultCompactAfter; at least 1).
func WithCompactAfter(n int) Option {
	return func(o *managerOptions) { o.compactAfter = max(n, 1) }
}

// WithDefaultSessionTimeout sets the session timeout of consumers that join
// without one (default DefaultSessionTimeout).
func WithDefaultSessionTimeout(d time.Duration) Option {
	return func(o *managerOptions) {
		if d > 0 {
			o.sessionTimeout = d
		}
	}
}

// WithDurability sets the durability of the groups' logs (default
// wal.DurabilityAlways: an ack is answered once it is on disk).
func WithDurability(d wal.Durability) Option {
	return func(o *managerOptions) { o.durability = d }
}

// WithClock sets the clock the manager and its groups read the time from
// and arm their timers with: sessions, hand-over grace, redelivery, ack
// timeouts, parked fetches, idle sweeping and retries of a broken log
// (default clock.Real). Tests pass a clock.Fake and advance it.
func WithClock(c clock.Clock) Option {
	return func(o *managerOptions) { o.clock = c }
}

// Manager owns the consumer-group actors of one node: one per (topic,
// subscription), spawned on first use, each with its log under
// dataDir/<escaped topic>/<subscription>. It is safe for concurrent use;
// its request methods never block on a group: they validate, hand the
// request to the group's mailbox and return, and the group calls the
// callback later, from its own goroutine.
type Manager struct {
	system  *actor.ActorSystem
	dataDir string
	logger  *slog.Logger
	opts    managerOptions
	clock   clock.Clock // opts.clock, or clock.Real

	// mu guards the fields below. Requests are sent to a group under the
	// read lock, so once Close holds the write lock no request is in flight
	// and every one sent is ahead of the poison pill in the mailbox.
	mu     sync.RWMutex
	closed bool
	groups map[groupKey]*actor.PID
	// deleting holds the topics DeleteTopic is removing: no group of theirs
	// may start meanwhile (it would write a log being removed).
	deleting map[string]bool
	// deletingSubs holds the subscriptions DeleteSubscription is removing
	// (subscriptions.go), likewise.
	deletingSubs map[groupKey]bool
	// notices are the consumers told that an admin deleted or moved their
	// subscription (notice.go).
	notices *noticeBoard
	// use holds when each group was last sent a request, and the longest
	// session timeout its consumers asked for; parked holds the groups
	// being passivated for idleness, with a channel closed once they
	// stopped (see idle.go); idleTimer is the idle sweeper's next sweep,
	// nil until StartIdleSweeper.
	use       map[groupKey]*groupUse
	parked    map[groupKey]chan struct{}
	idleTimer clock.Timer

	// reassigned counts units that left their owner, in every group.
	reassigned atomic.Uint64
}

type groupKey struct{ topic, subscription string }

// NewManager returns a Manager spawning its groups in system, with their
// logs under dataDir. A nil logger discards.
func NewManager(system *actor.ActorSystem, dataDir string, logger *slog.Logger, opts ...Option) *Manager {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	o := managerOptions{compactAfter: DefaultCompactAfter, sessionTimeout: DefaultSessionTimeout}
	for _, opt := range opts {
		opt(&o)
	}
	clk := clock.Or(o.clock)
	return &Manager{
		system:   system,
		dataDir:  dataDir,
		logger:   logger.With("component", "consumers"),
		opts:     o,
		clock:    clk,
		groups:   make(map[groupKey]*actor.PID),
		deleting: make(map[string]bool),
		notices:  &noticeBoard{clock: clk},
		use:      make(map[groupKey]*groupUse),
		parked:   make(map[groupKey]chan struct{}),
	}
}

// Group returns the group actor of src's topic and subscription, spawning
// it on first use. A group reads through the Source it was spawned with.
// The subscription itself is created by its first Join.
func (m *Manager) Group(src Source, subscription string) (*actor.PID, error) {
	if err := validateName("subscription", subscription); err != nil {
		return nil, err
	}
	key := groupKey{topic: src.Topic(), subscription: subscription}
	for {
		m.mu.RLock()
		pid, closed, parked := m.groups[key], m.closed, m.parked[key]
		m.mu.RUnlock()
		if closed {
			return nil, errClosed
		}
		if pid != nil {
			return pid, nil
		}
		if parked == nil {
			break
		}
		<-parked // the group is stopping for idleness: spawn it after
	}

	if m.opts.prepare != nil {
		// Outside the lock: it may fetch the group's state from another
		// node. Concurrent first requests each call it (it is idempotent).
		if err := m.opts.prepare(key.topic, subscription, m.groupDir(key.topic, subscription)); err != nil {
			return nil, err
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, errClosed
	}
	if pid := m.groups[key]; pid != nil {
		return pid, nil
	}
	if m.parked[key] != nil {
		return nil, api.Errorf(api.CodeUnavailable, "subscription %q of %s is stopping; retry", subscription, key.topic)
	}
	if m.deleting[key.topic] {
		return nil, api.Errorf(api.CodeTopicDeleted, "topic %s is being deleted", key.topic)
	}
	if m.deletingSubs[key] {
		return nil, errSubscriptionDeleting(key)
	}
	cfg := groupConfig{
		Subscription:          subscription,
		Dir:                   m.groupDir(key.topic, subscription),
		Source:                src,
		Logger:                m.logger.With("topic", key.topic),
		Durability:            m.opts.durability,
		Logs:                  m.opts.logs,
		CompactAfter:          m.opts.compactAfter,
		DefaultSessionTimeout: m.opts.sessionTimeout,
		OnStopped:             func(pid *actor.PID) { m.forget(key, pid) },
		Reassigned:            &m.reassigned,
		Queue:                 m.opts.queue,
		Notices:               m.notices,
		Clock:                 m.clock,
	}
	pid := m.system.Root.SpawnPrefix(m.opts.queue.props(cfg), "consumer-group-"+subscription+"-")
	m.logger.Debug("consumer group spawned", "topic", key.topic, "subscription", subscription, "pid", pid.Id)
	m.groups[key] = pid
	m.use[key] = newGroupUse(m.clock.Now())
	return pid, nil
}

// Reassignments counts the units that left their owner in every group of
// this manager: handed over to another consumer, or released by one that
// left or died.
func (m *Manager) Reassignments() uint64 { return m.reassigned.Load() }

var errClosed = api.Errorf(api.CodeUnavailable, "consumer groups are shutting down")

// forget drops a group that stopped for good, so that the next request
// spawns it again (after too many restarts protoactor stops an actor).
func (m *Manager) forget(key groupKey, pid *actor.PID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if cur := m.groups[key]; cur != nil && cur.Equal(pid) {
		delete(m.groups, key)
		delete(m.use, key)
	}
}

// send hands msg to the group, or calls fail. The group is looked up
// again under the read lock: a group that Close or DeleteTopic is stopping
// has left the map before its poison pill was sent, so a request either is
// queued ahead of the pill or is refused, never dropped unanswered.
func (m *Manager) send(src Source, subscription string, msg any, fail func(error)) {
	m.sendAs(src, subscription, msg, fail, 0)
}

// sendAs is send for a request whose consumer asked for session (0: not
// a join).
func (m *Manager) sendAs(src Source, subscription string, msg any, fail func(error), session time.Duration) {
	key := groupKey{topic: src.Topic(), subscription: subscription}
	if m.notices.intercept(key.topic, subscription, msg) {
		return
	}
	for {
		pid, err := m.Group(src, subscription)
		if err != nil {
			fail(err)
			return
		}
		m.mu.RLock()
		if m.closed {
			m.mu.RUnlock()
			fail(errClosed)
			return
		}
		if cur := m.groups[key]; cur != nil && cur.Equal(pid) {
			m.use[key].touch(m.clock.Now(), session)
			m.system.Root.Send(pid, msg)
			m.mu.RUnlock()
			return
		}
		parked := m.parked[key]
		m.mu.RUnlock()
		if parked == nil {
			fail(api.Errorf(api.CodeUnavailable, "subscription %q of %s is stopping; retry", subscription, src.Topic()))
			return
		}
		<-parked // stopped for idleness: send to it anew
	}
}

// Join validates req and adds its consumer to the subscription, creating
// the subscription on first join.
func (m *Manager) Join(src Source, req api.JoinRequest, reply func(api.JoinReply, error)) {
	fail := func(err error) { reply(api.JoinReply{}, err) }
	if err := validateMember(req.Subscription, req.Consumer); err != nil {
		fail(err)
		return
	}
	if req.Start != "" && req.Start != api.StartEarliest && req.Start != api.StartLatest {
		fail(api.Errorf(api.CodeInvalidArgument, "start %q: want %q or %q", req.Start, api.StartEarliest, api.StartLatest))
		return
	}
	timeout := m.opts.sessionTimeout
	if req.SessionTimeout != "" {
		d, err := time.ParseDuration(req.SessionTimeout)
		if err != nil || d < MinSessionTimeout || d > MaxSessionTimeout {
			fail(api.Errorf(api.CodeInvalidArgument, "session_timeout %q: want a duration in [%s, %s]", req.SessionTimeout, MinSessionTimeout, MaxSessionTimeout))
			return
		}
		timeout = d
	}
	m.sendAs(src, req.Subscription, &Join{Consumer: req.Consumer, Start: req.Start, ReadCompacted: req.ReadCompacted, SessionTimeout: timeout, Reply: reply}, fail, timeout)
}

// Fetch validates req and asks the group for messages. The cluster layer
// encodes the reply in req.Format (FormatBinary when empty) and sets the
// api.FetchReplyHeaderAssigned header from assigned.
func (m *Manager) Fetch(src Source, req api.FetchRequest, reply func(msgs []api.Message, assigned int, err error)) {
	fail := func(err error) { reply(nil, 0, err) }
	f, err := ParseFetch(req)
	if err != nil {
		fail(err)
		return
	}
	f.Reply = reply
	m.send(src, req.Subscription, f, fail)
}

// ParseFetch validates a fetch request and returns the group message for
// it, defaults applied (without Reply).
func ParseFetch(req api.FetchRequest) (*Fetch, error) {
	if err := validateMember(req.Subscription, req.Consumer); err != nil {
		return nil, err
	}
	if req.Format != "" && req.Format != FormatBinary && req.Format != FormatJSON {
		return nil, api.Errorf(api.CodeBadRequest, "format %q: want %q or %q", req.Format, FormatBinary, FormatJSON)
	}
	f := &Fetch{Consumer: req.Consumer, Max: req.Max, MaxBytes: req.MaxBytes, Wait: DefaultFetchWait}
	switch {
	case req.Max < 0 || req.Max > MaxFetchMax:
		return nil, api.Errorf(api.CodeInvalidArgument, "max %d: want 1 to %d (0 for the default %d)", req.Max, MaxFetchMax, DefaultFetchMax)
	case req.Max == 0:
		f.Max = DefaultFetchMax
	}
	switch {
	case req.MaxBytes < 0 || req.MaxBytes > MaxFetchMaxBytes:
		return nil, api.Errorf(api.CodeInvalidArgument, "max_bytes %d: want 1 to %d (0 for the default %d)", req.MaxBytes, MaxFetchMaxBytes, DefaultFetchMaxBytes)
	case req.MaxBytes == 0:
		f.MaxBytes = DefaultFetchMaxBytes
	}
	if req.Wait != "" {
		d, err := time.ParseDuration(req.Wait)
		if err != nil || d < 0 || d > MaxFetchWait {
			return nil, api.Errorf(api.CodeInvalidArgument, "wait %q: want a duration from 0s to %s", req.Wait, MaxFetchWait)
		}
		f.Wait = d
	}
	if len(req.Received) > 0 && !req.Resync {
		return nil, api.Errorf(api.CodeInvalidArgument, "received positions come only with resync")
	}
	if len(req.Received) > MaxAckPositions {
		return nil, api.Errorf(api.CodeInvalidArgument, "received: at most %d positions, got %d", MaxAckPositions, len(req.Received))
	}
	f.Resync = req.Resync
	if req.Resync {
		f.Received = make(map[topology.Unit]uint64, len(req.Received))
		for _, p := range req.Received {
			if p.Bucket < 0 {
				return nil, api.Errorf(api.CodeInvalidArgument, "received of segment %d: bucket %d is negative", p.Segment, p.Bucket)
			}
			u := topology.Unit{Segment: topology.SegmentID(p.Segment), Bucket: p.Bucket}
			f.Received[u] = max(f.Received[u], p.Offset)
		}
	}
	return f, nil
}

// Ack validates req and acknowledges its positions; reply comes once they
// are durable.
func (m *Manager) Ack(src Source, req api.AckRequest, reply func(error)) {
	if err := validateMember(req.Subscription, req.Consumer); err != nil {
		reply(err)
		return
	}
	if len(req.Acks) == 0 || len(req.Acks) > MaxAckPositions {
		reply(api.Errorf(api.CodeInvalidArgument, "acks: want 1 to %d positions, got %d", MaxAckPositions, len(req.Acks)))
		return
	}
	for _, p := range req.Acks {
		if p.Bucket < 0 {
			reply(api.Errorf(api.CodeInvalidArgument, "ack of segment %d: bucket %d is negative", p.Segment, p.Bucket))
			return
		}
	}
	m.send(src, req.Subscription, &Ack{Consumer: req.Consumer, Acks: slices.Clone(req.Acks), Reply: reply}, reply)
}

// Leave validates req and removes its consumer from the subscription.
func (m *Manager) Leave(src Source, req api.LeaveRequest, reply func(error)) {
	if err := validateMember(req.Subscription, req.Consumer); err != nil {
		reply(err)
		return
	}
	m.send(src, req.Subscription, &Leave{Consumer: req.Consumer, Reply: reply}, reply)
}

// Stats asks the group of a subscription for its Stats.
func (m *Manager) Stats(src Source, subscription string, reply func(Stats, error)) {
	fail := func(err error) { reply(Stats{}, err) }
	if err := validateName("subscription", subscription); err != nil {
		fail(err)
		return
	}
	m.send(src, subscription, &GetStats{Reply: reply}, fail)
}

// Subscriptions lists, sorted, the subscriptions of a topic that exist on
// this node's disk, whether or not their group is running.
func (m *Manager) Subscriptions(topic string) []string {
	entries, err := os.ReadDir(filepath.Join(m.dataDir, escapeTopic(topic)))
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() && routing.ValidateName(e.Name()) == nil {
			out = append(out, e.Name())
		}
	}
	return out
}

// Close stops every group after it has handled the requests already sent to
// it, flushing pending acks. Requests made after Close are refused with
// UNAVAILABLE.
func (m *Manager) Close() error {
	m.mu.Lock()
	m.closed = true
	if m.idleTimer != nil {
		m.idleTimer.Stop()
	}
	keys := slices.Collect(maps.Keys(m.groups))
	futures := m.poisonLocked(keys)
	m.mu.Unlock()
	return waitStopped(futures)
}

// poisonLocked removes the groups of keys from the map and sends each its
// poison pill: it stops after the requests already in its mailbox. Callers
// hold mu and wait on the futures after releasing it.
func (m *Manager) poisonLocked(keys []groupKey) map[string]*actor.Future {
	futures := make(map[string]*actor.Future, len(keys))
	for _, key := range keys {
		pid := m.groups[key]
		delete(m.groups, key)
		delete(m.use, key)
		futures[pid.Id] = m.system.Root.PoisonFuture(pid)
	}
	return futures
}

func waitStopped(futures map[string]*actor.Future) error {
	var errs []error
	for id, f := range futures {
		if err := f.Wait(); err != nil {
			errs = append(errs, fmt.Errorf("stopping consumer group %s: %w", id, err))
		}
	}
	return errors.Join(errs...)
}

func (m *Manager) groupDir(topic, subscription string) string {
	return filepath.Join(m.dataDir, escapeTopic(topic), subscription)
}

// escapeTopic turns a topic URI into one directory name, reversibly: bytes
// of the name alphabet and '.' stay, every other byte becomes %XX.
// "topic://acme/orders/pay" becomes "topic%3A%2F%2Facme%2Forders%2Fpay".
func escapeTopic(topic string) string {
	var b strings.Builder
	for i := 0; i < len(topic); i++ {
		c := topic[i]
		if isNameByte(c) || (c == '.' && i > 0) {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	if b.Len() == 0 {
		return "%"
	}
	return b.String()
}

func isNameByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-'
}

func validateMember(subscription, consumer string) error {
	if err := validateName("subscription", subscription); err != nil {
		return err
	}
	return validateName("consumer", consumer)
}

// validateName applies the name rule [A-Za-z0-9_-]{1,128}.
func validateName(kind, name string) error {
	if err := routing.ValidateName(name); err != nil {
		return api.Errorf(api.CodeInvalidName, "%s name: %v", kind, strings.TrimPrefix(err.Error(), routing.ErrInvalidName.Error()+": "))
	}
	return nil
}

// Running reports whether a group of topic is running here: while one
// is, the topic must stay active (its groups read through it).
func (m *Manager) Running(topic string) bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	for k := range m.groups {
		if k.topic == topic {
			return true
		}
	}
	return false
}
