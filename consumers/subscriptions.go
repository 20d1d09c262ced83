package consumers

import (
	"cmp"
	"errors"
	"io/fs"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/braidmq/braid/api"
)

// Subscription management, as an admin does it (api/subscriptions.go):
// the positions of a subscription per unit and per consumer (Info), moving
// them (Seek) and deleting the subscription (DeleteSubscription). Each is
// a message to the subscription's group, which does the work on its own
// goroutine; the position rule of a seek is planSeek (seek.go).
//
// A group refuses a seek or a delete while consumers are attached — its
// live consumers, and for a stream group the previous owners it awaits
// after a restart — unless forced. Forced, the consumers are detached and
// told (notice.go), except those of a queue subscription that a seek keeps.

// The admin messages of a group.
type (
	// getInfo asks for the subscription's positions.
	getInfo struct {
		Reply func(api.SubscriptionInfo, error)
	}
	// seekSub moves the subscription's positions.
	seekSub struct {
		Target seekTarget
		Force  bool
		Reply  func(api.SubscriptionSeekReply, error)
	}
	// deleteSub stops serving the subscription and moves its directory
	// aside (Dir + deletedSuffix); the manager then stops the group and
	// removes that. It is handled even by a group whose log does not load.
	deleteSub struct {
		Force bool
		Reply func(detached []string, err error)
	}
)

// deletedSuffix names the directory a deleted subscription's state is
// moved to before it is removed (not a valid subscription name, so never
// listed): a group started meanwhile finds no state.
const deletedSuffix = ".deleted"

// seekTarget is a validated seek target: exactly one of to, time and message.
type seekTarget struct {
	to      string // api.SeekEarliest or api.SeekLatest
	time    int64  // unix ms, when hasTime
	hasTime bool
	message *api.Position
}

// ValidateSeek checks a seek request without looking at the topic: a
// subscription name, exactly one target, a known "to", a time that is not
// negative, a bucket that is not negative.
func ValidateSeek(req api.SubscriptionSeekRequest) error {
	_, err := parseSeek(req)
	return err
}

func parseSeek(req api.SubscriptionSeekRequest) (seekTarget, error) {
	if req.Subscription == "" {
		return seekTarget{}, api.Errorf(api.CodeBadRequest, "subscription is required")
	}
	if err := validateName("subscription", req.Subscription); err != nil {
		return seekTarget{}, err
	}
	var named []string
	if req.To != "" {
		named = append(named, "to")
	}
	if req.Time != nil {
		named = append(named, "time")
	}
	if req.Message != nil {
		named = append(named, "message")
	}
	switch {
	case len(named) == 0:
		return seekTarget{}, api.Errorf(api.CodeBadRequest, `name where to seek: "to" (%q or %q), "time" (unix ms) or "message" (segment, bucket, offset)`, api.SeekEarliest, api.SeekLatest)
	case len(named) > 1:
		return seekTarget{}, api.Errorf(api.CodeInvalidArgument, "name one seek target, not %s", strings.Join(named, " and "))
	}
	t := seekTarget{to: req.To, message: req.Message}
	switch {
	case req.To != "" && req.To != api.SeekEarliest && req.To != api.SeekLatest:
		return seekTarget{}, api.Errorf(api.CodeInvalidArgument, "to %q: want %q or %q", req.To, api.SeekEarliest, api.SeekLatest)
	case req.Time != nil && *req.Time < 0:
		return seekTarget{}, api.Errorf(api.CodeInvalidArgument, "time %d: want unix milliseconds, 0 or more", *req.Time)
	case req.Time != nil:
		t.time, t.hasTime = *req.Time, true
	case req.Message != nil && req.Message.Bucket < 0:
		return seekTarget{}, api.Errorf(api.CodeInvalidArgument, "message of segment %d: bucket %d is negative", req.Message.Segment, req.Message.Bucket)
	}
	if t.message != nil {
		p := *t.message
		t.message = &p
	}
	return t, nil
}

// Info asks the group of a subscription for its positions.
func (m *Manager) Info(src Source, subscription string, reply func(api.SubscriptionInfo, error)) {
	fail := func(err error) { reply(api.SubscriptionInfo{}, err) }
	if err := validateName("subscription", subscription); err != nil {
		fail(err)
		return
	}
	m.send(src, subscription, &getInfo{Reply: reply}, fail)
}

// Seek validates req and moves the subscription's positions (see
// api.SubscriptionSeekRequest); the reply comes once they are durable.
func (m *Manager) Seek(src Source, req api.SubscriptionSeekRequest, reply func(api.SubscriptionSeekReply, error)) {
	fail := func(err error) { reply(api.SubscriptionSeekReply{}, err) }
	t, err := parseSeek(req)
	if err != nil {
		fail(err)
		return
	}
	m.send(src, req.Subscription, &seekSub{Target: t, Force: req.Force, Reply: reply}, fail)
}

// DeleteSubscription deletes a subscription of src's topic and its state,
// and returns the consumers it detached (force), sorted. It waits until
// the group has stopped and its directory is gone. NOT_FOUND: there is no
// such subscription; INVALID_ARGUMENT: consumers are attached and force is
// not set. Meanwhile requests to the subscription are refused (UNAVAILABLE);
// afterwards a join creates a new subscription.
func (m *Manager) DeleteSubscription(src Source, subscription string, force bool) ([]string, error) {
	if err := validateName("subscription", subscription); err != nil {
		return nil, err
	}
	key := groupKey{topic: src.Topic(), subscription: subscription}
	type outcome struct {
		detached []string
		err      error
	}
	done := make(chan outcome, 1)
	msg := &deleteSub{Force: force, Reply: func(d []string, err error) { done <- outcome{d, err} }}
	var pid *actor.PID
	for pid == nil {
		p, err := m.Group(src, subscription)
		if err != nil {
			return nil, err
		}
		m.mu.Lock()
		if m.closed {
			m.mu.Unlock()
			return nil, errClosed
		}
		if m.deletingSubs[key] {
			m.mu.Unlock()
			return nil, errSubscriptionDeleting(key)
		}
		if cur := m.groups[key]; cur == nil || !cur.Equal(p) {
			parked := m.parked[key]
			m.mu.Unlock()
			if parked == nil {
				return nil, api.Errorf(api.CodeUnavailable, "subscription %q of %s is stopping; retry", subscription, key.topic)
			}
			<-parked
			continue
		}
		if m.deletingSubs == nil {
			m.deletingSubs = make(map[groupKey]bool)
		}
		m.deletingSubs[key] = true
		m.use[key].touch(m.clock.Now(), 0)
		m.system.Root.Send(p, msg)
		m.mu.Unlock()
		pid = p
	}
	defer func() {
		m.mu.Lock()
		delete(m.deletingSubs, key)
		m.mu.Unlock()
	}()
	out := <-done
	if out.err != nil {
		return nil, out.err
	}
	// The group serves nothing any more: stop it, then remove its state.
	m.mu.Lock()
	var futures map[string]*actor.Future
	if cur := m.groups[key]; cur != nil && cur.Equal(pid) {
		futures = m.poisonLocked([]groupKey{key})
	}
	parked := m.parked[key]
	m.mu.Unlock()
	err := waitStopped(futures)
	if parked != nil {
		<-parked
	}
	if rmErr := os.RemoveAll(m.groupDir(key.topic, subscription) + deletedSuffix); rmErr != nil {
		err = errors.Join(err, rmErr)
	}
	m.logger.Info("subscription deleted", "topic", key.topic, "subscription", subscription, "detached", out.detached)
	return out.detached, err
}

func errSubscriptionDeleting(key groupKey) error {
	return api.Errorf(api.CodeUnavailable, "subscription %q of %s is being deleted; retry", key.subscription, key.topic)
}

// Info is Manager.Info for queue subscriptions.
func (q *QueueManager) Info(src Source, subscription string, reply func(api.SubscriptionInfo, error)) {
	q.m.Info(src, subscription, reply)
}

// Seek is Manager.Seek for queue subscriptions.
func (q *QueueManager) Seek(src Source, req api.SubscriptionSeekRequest, reply func(api.SubscriptionSeekReply, error)) {
	q.m.Seek(src, req, reply)
}

// DeleteSubscription is Manager.DeleteSubscription for queue subscriptions.
func (q *QueueManager) DeleteSubscription(src Source, subscription string, force bool) ([]string, error) {
	return q.m.DeleteSubscription(src, subscription, force)
}

// refuseAdmin answers an admin message with err; false for other messages.
func refuseAdmin(msg any, err error) bool {
	switch m := msg.(type) {
	case *getInfo:
		if m.Reply != nil {
			m.Reply(api.SubscriptionInfo{}, err)
		}
	case *seekSub:
		if m.Reply != nil {
			m.Reply(api.SubscriptionSeekReply{}, err)
		}
	case *deleteSub:
		if m.Reply != nil {
			m.Reply(nil, err)
		}
	default:
		return false
	}
	return true
}

// attachedConsumer is a consumer a seek or a delete would detach.
type attachedConsumer struct {
	name    string
	timeout time.Duration
}

func attachedNames(as []attachedConsumer) []string {
	names := make([]string, len(as))
	for i, a := range as {
		names[i] = a.name
	}
	return names
}

func sortAttached(as []attachedConsumer) []attachedConsumer {
	slices.SortFunc(as, func(a, b attachedConsumer) int { return cmp.Compare(a.name, b.name) })
	return as
}

// errAttached refuses a seek or a delete while consumers are attached.
func (b *groupBase) errAttached(what string, as []attachedConsumer) error {
	return api.Errorf(api.CodeInvalidArgument, "cannot %s subscription %q of %s: %d consumers attached (%s); stop them, or use force",
		what, b.cfg.Subscription, b.cfg.Source.Topic(), len(as), strings.Join(attachedNames(as), ", "))
}

func (b *groupBase) errNoSubscription() error {
	return api.Errorf(api.CodeNotFound, "topic %s has no subscription %q", b.cfg.Source.Topic(), b.cfg.Subscription)
}

// screen refuses what a group must not serve: every request once the
// subscription is deleted (a join: UNAVAILABLE, retry; it then creates a
// new subscription), and the requests of consumers with a notice. It
// reports whether it answered msg.
func (b *groupBase) screen(g groupActor, msg any) bool {
	if b.retired != nil {
		switch msg.(type) {
		case *Join, *queueJoin:
			g.refuse(msg, api.Errorf(api.CodeUnavailable, "subscription %q of %s is being deleted; retry", b.cfg.Subscription, b.cfg.Source.Topic()))
		default:
			g.refuse(msg, b.retired)
		}
		return true
	}
	return b.cfg.Notices.intercept(b.cfg.Source.Topic(), b.cfg.Subscription, msg)
}

// retire closes the group's log and moves its directory aside, so that
// nothing of the subscription is served or loaded again. On failure the
// group loads its state again at the next request.
func (b *groupBase) retire() error {
	if b.log != nil {
		if err := b.log.Close(); err != nil {
			b.logger.Warn("closing the log of a deleted subscription", "err", err)
		}
		b.log = nil
	}
	gone := b.cfg.Dir + deletedSuffix
	err := os.RemoveAll(gone)
	if err == nil {
		err = os.Rename(b.cfg.Dir, gone)
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		b.broken, b.brokenAt = err, time.Time{}
		return api.Errorf(api.CodeInternal, "subscription %q: removing its state: %v", b.cfg.Subscription, err)
	}
	return nil
}

// notify gives each consumer a notice of err.
func (b *groupBase) notify(as []attachedConsumer, err *api.Error) {
	for _, a := range as {
		b.cfg.Notices.add(b.cfg.Source.Topic(), b.cfg.Subscription, a.name, a.timeout, err)
	}
}

// deletedNotice is what the consumers of a subscription deleted with force
// are told.
func (b *groupBase) deletedNotice() *api.Error {
	return api.Errorf(api.CodeNotFound, "subscription %q of %s was deleted (by an admin, with force): make a new consumer to create it again",
		b.cfg.Subscription, b.cfg.Source.Topic())
}

// seekNotice is what the consumers of a stream subscription an admin moved
// with force are told.
func (b *groupBase) seekNotice() *api.Error {
	return api.Errorf(api.CodeNotOwner, "this consumer was detached from subscription %q of %s: an admin moved its positions (seek, with force); make a new consumer to read from there",
		b.cfg.Subscription, b.cfg.Source.Topic())
}
