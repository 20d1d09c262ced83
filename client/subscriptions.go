package client

import (
	"context"
	"time"

	"github.com/braidmq/braid/api"
)

// Subscription management (api/subscriptions.go): what pulsar-admin's
// topics subscriptions, unsubscribe and reset-cursor, or `nats consumer`,
// do for Braid's stream and queue subscriptions.

// ListSubscriptions returns every subscription of the topic uri, stream
// and queue, with its backlog and its position in every unit and of every
// consumer. A subscription whose state could not be read is listed with
// its Error.
func (a *Admin) ListSubscriptions(ctx context.Context, uri string) ([]api.SubscriptionInfo, error) {
	var reply api.SubscriptionListReply
	err := a.call(ctx, api.AdminSubscriptionList, api.TopicRequest{Topic: uri}, &reply)
	return reply.Subscriptions, err
}

// DeleteSubscription deletes a subscription of the topic uri and its
// state; a join afterwards creates a new one. While consumers are attached
// it is refused (api.ErrInvalidArgument) unless force is set: they are then
// detached and told (NOT_FOUND to their requests, which a consumer returns
// from Next). It returns the consumers it detached.
func (a *Admin) DeleteSubscription(ctx context.Context, uri, subscription string, force bool) ([]string, error) {
	var reply api.SubscriptionDeleteReply
	err := a.call(ctx, api.AdminSubscriptionDelete,
		api.SubscriptionDeleteRequest{Topic: uri, Subscription: subscription, Force: force}, &reply)
	return reply.Detached, err
}

// SeekTarget is where SeekSubscription moves a subscription: SeekEarliest,
// SeekLatest, SeekTime or SeekMessage.
type SeekTarget struct {
	to      string
	time    *int64
	message *api.Position
}

// SeekEarliest moves every unit to its first retained offset.
func SeekEarliest() SeekTarget { return SeekTarget{to: api.SeekEarliest} }

// SeekLatest moves every unit to its end: only what is written afterwards
// is delivered.
func SeekLatest() SeekTarget { return SeekTarget{to: api.SeekLatest} }

// SeekTime moves every unit to its first message at or after t.
func SeekTime(t time.Time) SeekTarget {
	ms := t.UnixMilli()
	return SeekTarget{time: &ms}
}

// SeekMessage moves the message's unit to it (it is delivered next), the
// ancestors of its segment to drained and its descendants to their start
// (see api.SubscriptionSeekRequest).
func SeekMessage(id MessageID) SeekTarget {
	return SeekTarget{message: &api.Position{Segment: id.Segment, Bucket: id.Bucket, Offset: id.Offset}}
}

// SeekSubscription moves a subscription of the topic uri to target in
// every unit, and returns it as the seek left it. While consumers are
// attached it is refused (api.ErrInvalidArgument) unless force is set:
// the consumers of a stream subscription are then detached and told
// (NOT_OWNER, which a consumer returns from Next: make a new one to read
// from the new positions); those of a queue subscription stay and are
// delivered from the new positions.
func (a *Admin) SeekSubscription(ctx context.Context, uri, subscription string, target SeekTarget, force bool) (api.SubscriptionSeekReply, error) {
	req := api.SubscriptionSeekRequest{Topic: uri, Subscription: subscription, To: target.to, Time: target.time,
		Message: target.message, Force: force}
	var reply api.SubscriptionSeekReply
	err := a.call(ctx, api.AdminSubscriptionSeek, req, &reply)
	return reply, err
}
