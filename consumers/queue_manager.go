package consumers

import (
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/routing"
)

// Queue subscription limits and defaults (see api/queue.go).
const (
	// DefaultQueueWindow is how many offsets past its cumulative point a
	// unit of a queue subscription keeps in memory: at most that many of
	// its messages are delivered and not acknowledged at once. The rest of
	// a backlog stays in the bucket log until the window moves.
	DefaultQueueWindow = 2048

	DefaultAckTimeout   = 30 * time.Second
	DefaultNackDelay    = time.Second
	DefaultMaxNackDelay = time.Minute
	MaxQueueDelay       = 24 * time.Hour
	MaxNackBackoff      = 1000
	// deadLetterRetry is how long a message whose dead-letter append failed
	// waits before the next try.
	deadLetterRetry = time.Second
)

// DeadLetterFunc appends rec to the topic uri, creating the topic when it
// does not exist, and calls done once with the outcome, after the append is
// durable. It must not block for long: the group calls it on a goroutine of
// its own, but one at a time per message.
type DeadLetterFunc func(uri string, rec api.Record, done func(error))

// queueOptions configure the groups of a QueueManager; the zero value is a
// stream Manager's.
type queueOptions struct {
	enabled    bool
	window     int
	deadLetter DeadLetterFunc
}

// props returns the actor of a group: a queue group for a QueueManager, a
// stream group otherwise.
func (o queueOptions) props(cfg groupConfig) *actor.Props {
	if o.enabled {
		return newQueueProps(cfg)
	}
	return newGroupProps(cfg)
}

// WithQueueWindow sets DefaultQueueWindow for a QueueManager (at least 1).
func WithQueueWindow(n int) Option {
	return func(o *managerOptions) { o.queue.window = max(n, 1) }
}

// WithDeadLetter sets how a QueueManager appends to dead-letter topics.
// Without it a message past its max deliveries is acknowledged and dropped
// (and logged).
func WithDeadLetter(f DeadLetterFunc) Option {
	return func(o *managerOptions) { o.queue.deadLetter = f }
}

// QueueManager owns the queue subscriptions of one node: one group actor per
// (topic, subscription), with its WAL under dataDir/<escaped topic>/<name>.
// It is a Manager whose groups are queue groups; every method validates its
// request, hands it to the group and returns, and the group calls the
// callback later from its own goroutine.
type QueueManager struct{ m *Manager }

// NewQueueManager returns a QueueManager spawning its groups in system with
// their logs under dataDir (which must not be a stream Manager's).
func NewQueueManager(system *actor.ActorSystem, dataDir string, logger *slog.Logger, opts ...Option) *QueueManager {
	m := NewManager(system, dataDir, logger, opts...)
	m.opts.queue.enabled = true
	if m.opts.queue.window == 0 {
		m.opts.queue.window = DefaultQueueWindow
	}
	m.logger = m.logger.With("kind", "queue")
	return &QueueManager{m: m}
}

// Join validates req and adds its consumer to the queue subscription,
// creating it on first join and applying the policy fields it sets.
func (q *QueueManager) Join(src Source, req api.QueueJoinRequest, reply func(api.JoinReply, error)) {
	fail := func(err error) { reply(api.JoinReply{}, err) }
	j, err := parseQueueJoin(req)
	if err == nil && j.Policy.DeadLetterTopic != nil {
		err = sameTenant(src.Topic(), *j.Policy.DeadLetterTopic)
	}
	if err != nil {
		fail(err)
		return
	}
	j.Reply = reply
	session := j.SessionTimeout
	if session == 0 {
		session = q.m.opts.sessionTimeout
	}
	q.m.sendAs(src, req.Subscription, j, fail, session)
}

func parseQueueJoin(req api.QueueJoinRequest) (*queueJoin, error) {
	if err := validateMember(req.Subscription, req.Consumer); err != nil {
		return nil, err
	}
	if req.Start != "" && req.Start != api.StartEarliest && req.Start != api.StartLatest {
		return nil, api.Errorf(api.CodeInvalidArgument, "start %q: want %q or %q", req.Start, api.StartEarliest, api.StartLatest)
	}
	j := &queueJoin{Consumer: req.Consumer, Start: req.Start}
	duration := func(field, s string, lo, hi time.Duration) (*time.Duration, error) {
		if s == "" {
			return nil, nil
		}
		d, err := time.ParseDuration(s)
		if err != nil || d < lo || d > hi {
			return nil, api.Errorf(api.CodeInvalidArgument, "%s %q: want a duration in [%s, %s]", field, s, lo, hi)
		}
		return &d, nil
	}
	var err error
	if d, err := duration("session_timeout", req.SessionTimeout, MinSessionTimeout, MaxSessionTimeout); err != nil {
		return nil, err
	} else if d != nil {
		j.SessionTimeout = *d
	}
	if j.Policy.AckTimeout, err = duration("ack_timeout", req.AckTimeout, 0, MaxQueueDelay); err != nil {
		return nil, err
	}
	if j.Policy.AckTimeout != nil && *j.Policy.AckTimeout > 0 && *j.Policy.AckTimeout < MinSessionTimeout {
		return nil, api.Errorf(api.CodeInvalidArgument, "ack_timeout %q: want 0s (none) or at least %s", req.AckTimeout, MinSessionTimeout)
	}
	if j.Policy.NackDelay, err = duration("nack_delay", req.NackDelay, 0, MaxQueueDelay); err != nil {
		return nil, err
	}
	if j.Policy.MaxNackDelay, err = duration("max_nack_delay", req.MaxNackDelay, 0, MaxQueueDelay); err != nil {
		return nil, err
	}
	if b := req.NackBackoff; b != nil {
		if *b < 1 || *b > MaxNackBackoff || *b != *b {
			return nil, api.Errorf(api.CodeInvalidArgument, "nack_backoff %v: want 1 (a fixed delay) to %d", *b, MaxNackBackoff)
		}
		j.Policy.NackBackoff = b
	}
	if n := req.MaxDeliveries; n != nil {
		if *n < 0 || *n > 1_000_000 {
			return nil, api.Errorf(api.CodeInvalidArgument, "max_deliveries %d: want 0 (unlimited) to 1000000", *n)
		}
		v := uint32(*n)
		j.Policy.MaxDeliveries = &v
	}
	if t := req.DeadLetterTopic; t != "" {
		name, err := routing.ParseTopic(t)
		if err != nil || name.Scheme != routing.SchemeScalable {
			return nil, api.Errorf(api.CodeInvalidName, "dead_letter_topic %q: want a topic://tenant/namespace/name URI", t)
		}
		j.Policy.DeadLetterTopic = &t
	}
	return j, nil
}

// sameTenant refuses a dead-letter topic of another tenant than the
// subscription's topic: FORBIDDEN (a tenant's consumers would write into
// another tenant's topic).
func sameTenant(topic, dlq string) error {
	a, errA := routing.ParseTopic(topic)
	b, errB := routing.ParseTopic(dlq)
	if errA != nil || errB != nil || a.Tenant != b.Tenant {
		return api.Errorf(api.CodeForbidden, "dead_letter_topic %s: a dead-letter topic is of the subscription's tenant (%s)", dlq, a.Tenant)
	}
	return nil
}

// DefaultDeadLetterTopic is the dead-letter topic of a topic's queue
// subscriptions that name none: topic://<tenant>/<namespace>/<name>-dlq.
func DefaultDeadLetterTopic(topic string) (string, error) {
	name, err := routing.ParseTopic(topic)
	if err != nil {
		return "", err
	}
	dlq := routing.TopicName{Scheme: routing.SchemeScalable, Tenant: name.Tenant, Namespace: name.Namespace, Name: name.Name + "-dlq"}
	if err := routing.ValidateName(dlq.Name); err != nil {
		return "", fmt.Errorf("dead-letter topic of %s: %w", topic, err)
	}
	return dlq.String(), nil
}

// Fetch validates req and asks the group for messages: redeliveries that
// are due first, then messages never delivered, from every unit. The reply
// comes once the deliveries are durable.
func (q *QueueManager) Fetch(src Source, req api.FetchRequest, reply func(msgs []api.Message, assigned int, err error)) {
	f, err := ParseFetch(req)
	if err != nil {
		reply(nil, 0, err)
		return
	}
	f.Reply = reply
	q.m.send(src, req.Subscription, f, func(err error) { reply(nil, 0, err) })
}

// Ack validates req and acknowledges each position, alone. The reply comes
// once the acks are durable.
func (q *QueueManager) Ack(src Source, req api.AckRequest, reply func(error)) {
	if err := validatePositions(req.Subscription, req.Consumer, "acks", req.Acks); err != nil {
		reply(err)
		return
	}
	q.m.send(src, req.Subscription, &Ack{Consumer: req.Consumer, Acks: slices.Clone(req.Acks), Reply: reply}, reply)
}

// Nack validates req and schedules the redelivery of each position the
// consumer holds.
func (q *QueueManager) Nack(src Source, req api.NackRequest, reply func(error)) {
	if err := validatePositions(req.Subscription, req.Consumer, "nacks", req.Nacks); err != nil {
		reply(err)
		return
	}
	n := &queueNack{Consumer: req.Consumer, Nacks: slices.Clone(req.Nacks), Delay: -1, Reply: reply}
	if req.Delay != "" {
		d, err := time.ParseDuration(req.Delay)
		if err != nil || d < 0 || d > MaxQueueDelay {
			reply(api.Errorf(api.CodeInvalidArgument, "delay %q: want a duration in [0s, %s]", req.Delay, MaxQueueDelay))
			return
		}
		n.Delay = d
	}
	q.m.send(src, req.Subscription, n, reply)
}

func validatePositions(subscription, consumer, field string, ps []api.Position) error {
	if err := validateMember(subscription, consumer); err != nil {
		return err
	}
	if len(ps) == 0 || len(ps) > MaxAckPositions {
		return api.Errorf(api.CodeInvalidArgument, "%s: want 1 to %d positions, got %d", field, MaxAckPositions, len(ps))
	}
	for _, p := range ps {
		if p.Bucket < 0 {
			return api.Errorf(api.CodeInvalidArgument, "%s of segment %d: bucket %d is negative", field, p.Segment, p.Bucket)
		}
	}
	return nil
}

// Leave validates req and removes its consumer: what it held is delivered
// again at once.
func (q *QueueManager) Leave(src Source, req api.LeaveRequest, reply func(error)) {
	q.m.Leave(src, req, reply)
}

// Stats asks the group of a queue subscription for its QueueStats.
func (q *QueueManager) Stats(src Source, subscription string, reply func(QueueStats, error)) {
	fail := func(err error) { reply(QueueStats{}, err) }
	if err := validateName("subscription", subscription); err != nil {
		fail(err)
		return
	}
	q.m.send(src, subscription, &getQueueStats{Reply: reply}, fail)
}

// Subscriptions lists, sorted, the queue subscriptions of a topic on disk.
func (q *QueueManager) Subscriptions(topic string) []string { return q.m.Subscriptions(topic) }

// DeleteTopic stops every queue group of a topic and removes their logs.
func (q *QueueManager) DeleteTopic(topic string) error { return q.m.DeleteTopic(topic) }

// Close stops every group after the requests already sent to it, flushing
// what is pending.
func (q *QueueManager) Close() error { return q.m.Close() }

// Running reports whether a queue group of topic is running here.
func (q *QueueManager) Running(topic string) bool { return q.m.Running(topic) }
