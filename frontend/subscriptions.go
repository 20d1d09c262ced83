package frontend

import (
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/braidmq/braid/cluster"

	"github.com/braidmq/braid/actors"
	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/consumers"
	"github.com/braidmq/braid/routing"
)

// Subscription management (api/subscriptions.go): subscription.list,
// subscription.delete and subscription.seek, admin operations on one topic
// that its owner serves (topicAdminOps), where the topic's consumer groups
// run. The work is the groups' (consumers/subscriptions.go); this file
// finds the subscription and its kind, and waits for the answer.

// subscriptionNames returns a topic's stream and queue subscriptions,
// sorted: those on this node's disk and, in a cluster, those whose record
// names another home (their state comes here when they are first used).
// The error says the records could not be read; the names on disk are
// returned all the same.
func (n *Frontend) subscriptionNames(ctx context.Context, t *actors.Topic) (stream, queue []string, err error) {
	stream, queue = n.subs.Subscriptions(t.Topic()), n.queues.Subscriptions(t.Topic())
	if n.member.Clustered() {
		var keys []string
		name, perr := routing.ParseTopic(t.Topic())
		if perr == nil {
			keys, err = n.meta.Subscriptions(ctx, name)
		}
		s, q := groupRecordNames(keys)
		stream, queue = append(stream, s...), append(queue, q...)
	}
	slices.Sort(stream)
	slices.Sort(queue)
	return slices.Compact(stream), slices.Compact(queue), err
}

// groupRecordNames returns the stream and queue subscriptions named by the
// last tokens of the keys of a topic's group records ("stream-<name>",
// "queue-<name>"; meta.Store.GroupHome).
func groupRecordNames(keys []string) (stream, queue []string) {
	for _, k := range keys {
		if sub, ok := strings.CutPrefix(k, cluster.GroupStream+"-"); ok && routing.ValidateName(sub) == nil {
			stream = append(stream, sub)
		} else if sub, ok := strings.CutPrefix(k, cluster.GroupQueue+"-"); ok && routing.ValidateName(sub) == nil {
			queue = append(queue, sub)
		}
	}
	return stream, queue
}

// subscriptionKind says whether sub is a stream or a queue subscription of
// t: NOT_FOUND when it is neither. The groups on this node's disk are
// asked first: a group record is made by any request for a subscription,
// one that was never created (a join creates it) too.
func (n *Frontend) subscriptionKind(ctx context.Context, t *actors.Topic, sub string) (string, error) {
	switch {
	case slices.Contains(n.subs.Subscriptions(t.Topic()), sub):
		return api.SubscriptionStream, nil
	case slices.Contains(n.queues.Subscriptions(t.Topic()), sub):
		return api.SubscriptionQueue, nil
	}
	stream, queue, err := n.subscriptionNames(ctx, t)
	switch {
	case slices.Contains(stream, sub):
		return api.SubscriptionStream, nil
	case slices.Contains(queue, sub):
		return api.SubscriptionQueue, nil
	case err != nil:
		return "", api.Errorf(api.CodeUnavailable, "the subscriptions of %s could not be listed: %v", t.Topic(), err)
	}
	return "", api.Errorf(api.CodeNotFound, "topic %s has no subscription %q", t.Topic(), sub)
}

// subscriptionName checks the subscription of a request.
func subscriptionName(sub string) error {
	if sub == "" {
		return api.Errorf(api.CodeBadRequest, "subscription is required")
	}
	return validName("subscription", sub)
}

func (n *Frontend) subscriptionList(ctx context.Context, body []byte) (any, error) {
	var req api.TopicRequest
	if err := decodeJSON(body, &req); err != nil {
		return nil, err
	}
	t, err := n.topics.Topic(req.Topic)
	if err != nil {
		return nil, err
	}
	stream, queue, err := n.subscriptionNames(ctx, t)
	if err != nil {
		n.log.Warn("subscription.list: the subscription records could not be read; listing those on this node", "topic", t.Topic(), "err", err)
	}
	reply := api.SubscriptionListReply{Topic: t.Topic(), Epoch: t.Layout().Epoch, Subscriptions: []api.SubscriptionInfo{}}
	for _, sub := range stream {
		if info, ok := awaitInfo(ctx, api.SubscriptionStream, sub, func(cb func(api.SubscriptionInfo, error)) { n.subs.Info(t, sub, cb) }); ok {
			reply.Subscriptions = append(reply.Subscriptions, info)
		}
	}
	for _, sub := range queue {
		if info, ok := awaitInfo(ctx, api.SubscriptionQueue, sub, func(cb func(api.SubscriptionInfo, error)) { n.queues.Info(t, sub, cb) }); ok {
			reply.Subscriptions = append(reply.Subscriptions, info)
		}
	}
	return reply, nil
}

// awaitInfo asks for the positions of one subscription; one that cannot
// be read is listed with its error. ok is false for a name that is no
// subscription (only a group record, see subscriptionKind).
func awaitInfo(ctx context.Context, kind, sub string, ask func(func(api.SubscriptionInfo, error))) (_ api.SubscriptionInfo, ok bool) {
	type result struct {
		info api.SubscriptionInfo
		err  error
	}
	ch := make(chan result, 1)
	ask(func(info api.SubscriptionInfo, err error) { ch <- result{info, err} })
	var r result
	select {
	case r = <-ch:
	case <-ctx.Done():
		r.err = api.Errorf(api.CodeTimeout, "subscription %q did not answer in time", sub)
	}
	switch {
	case r.err == nil:
		return r.info, true
	case errors.Is(r.err, &api.Error{Code: api.CodeNotFound}):
		return api.SubscriptionInfo{}, false
	}
	return api.SubscriptionInfo{Name: sub, Kind: kind, Consumers: []api.SubscriptionConsumer{}, Units: []api.SubscriptionUnit{},
		Drained: []uint64{}, Error: api.AsError(r.err).Error()}, true
}

// subscriptionOf finds the topic and the kind of one of its
// subscriptions, named by a request.
func (n *Frontend) subscriptionOf(ctx context.Context, topic, sub string) (*actors.Topic, string, error) {
	if err := subscriptionName(sub); err != nil {
		return nil, "", err
	}
	t, err := n.topics.Topic(topic)
	if err != nil {
		return nil, "", err
	}
	kind, err := n.subscriptionKind(ctx, t, sub)
	return t, kind, err
}

func (n *Frontend) subscriptionDelete(ctx context.Context, body []byte) (any, error) {
	var req api.SubscriptionDeleteRequest
	if err := decodeJSON(body, &req); err != nil {
		return nil, err
	}
	t, kind, err := n.subscriptionOf(ctx, req.Topic, req.Subscription)
	if err != nil {
		return nil, err
	}
	var detached []string
	if kind == api.SubscriptionQueue {
		detached, err = n.queues.DeleteSubscription(t, req.Subscription, req.Force)
	} else {
		detached, err = n.subs.DeleteSubscription(t, req.Subscription, req.Force)
	}
	if err != nil {
		return nil, err
	}
	if n.member.Clustered() {
		// A stale record would send a subscription made again under this
		// name looking for its state on the old home.
		if name, perr := routing.ParseTopic(t.Topic()); perr == nil {
			if err := n.meta.DeleteGroupHome(ctx, name, kind, req.Subscription); err != nil {
				n.log.Warn("subscription deleted; its record was not", "topic", t.Topic(), "subscription", req.Subscription, "err", err)
			}
		}
	}
	return api.SubscriptionDeleteReply{OK: true, Topic: t.Topic(), Subscription: req.Subscription, Kind: kind, Detached: nonNil(detached)}, nil
}

func (n *Frontend) subscriptionSeek(ctx context.Context, body []byte) (any, error) {
	var req api.SubscriptionSeekRequest
	if err := decodeJSON(body, &req); err != nil {
		return nil, err
	}
	if err := consumers.ValidateSeek(req); err != nil {
		return nil, err
	}
	t, kind, err := n.subscriptionOf(ctx, req.Topic, req.Subscription)
	if err != nil {
		return nil, err
	}
	type result struct {
		reply api.SubscriptionSeekReply
		err   error
	}
	ch := make(chan result, 1)
	cb := func(r api.SubscriptionSeekReply, err error) { ch <- result{r, err} }
	if kind == api.SubscriptionQueue {
		n.queues.Seek(t, req, cb)
	} else {
		n.subs.Seek(t, req, cb)
	}
	select {
	case r := <-ch:
		if r.err != nil {
			return nil, r.err
		}
		r.reply.Detached = nonNil(r.reply.Detached)
		return r.reply, nil
	case <-ctx.Done():
		return nil, api.Errorf(api.CodeTimeout, "subscription %q did not answer in time; the seek may yet be made", req.Subscription)
	}
}
