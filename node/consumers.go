package node

import (
	"context"
	"errors"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/braidmq/braid/actors"
	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/cluster"
	"github.com/braidmq/braid/consumers"
	"github.com/braidmq/braid/topology"
	"github.com/braidmq/braid/wal"
	"github.com/prometheus/client_golang/prometheus"
)

// The node's consumer groups: the managers of stream and queue
// subscriptions, the dead-letter topics of queues, and what topic
// controllers see of the groups.

// startConsumers makes the managers of the stream and queue subscriptions
// and has the cluster member and the topics' controllers see them (step 7).
func (n *Node) startConsumers(context.Context) error {
	durability, _ := wal.ParseDurability(n.cfg.Durability)
	n.subs = consumers.NewManager(n.system, filepath.Join(n.cfg.DataDir, "subscriptions"), n.log,
		consumers.WithDurability(durability), n.groupCompactAfter(), consumers.WithPrepare(n.member.PrepareGroup(cluster.GroupStream)),
		consumers.WithLogs(n.member.GroupLogs(cluster.GroupStream)))
	n.startQueues()
	n.member.Attach(n.topics, n.subs, n.queues)
	n.subsView.subs.Store(n.subs)
	n.subsView.queues.Store(n.queues)
	n.subs.StartIdleSweeper(n.topics.IdleTimeout())
	n.queues.StartIdleSweeper(n.topics.IdleTimeout())
	n.registerConsumerMetrics()
	return nil
}

// startQueues starts the queue subscriptions' manager; their logs live under
// <data>/queues, apart from the stream subscriptions'.
func (n *Node) startQueues() {
	durability, _ := wal.ParseDurability(n.cfg.Durability)
	n.queues = consumers.NewQueueManager(n.system, filepath.Join(n.cfg.DataDir, "queues"), n.log,
		consumers.WithDurability(durability), n.groupCompactAfter(), consumers.WithDeadLetter(n.deadLetter), consumers.WithPrepare(n.member.PrepareGroup(cluster.GroupQueue)),
		consumers.WithLogs(n.member.GroupLogs(cluster.GroupQueue)))
}

// deadLetter appends a dead letter to its topic, creating the topic (one
// segment, namespace policies) on first use.
func (n *Node) deadLetter(uri string, rec api.Record, done func(error)) {
	t, err := n.topics.Topic(uri)
	if errors.Is(err, api.ErrTopicNotFound) {
		ctx, cancel := context.WithTimeout(context.Background(), deadLetterCreateTimeout)
		_, err = n.topics.CreateTopic(ctx, api.TopicCreateRequest{Topic: uri})
		cancel()
		if err == nil || errors.Is(err, api.ErrAlreadyExists) {
			n.log.Info("dead-letter topic created", "topic", uri)
			t, err = n.topics.Topic(uri)
		}
	}
	if err != nil {
		done(err)
		return
	}
	t.Produce([]api.Record{rec}, func(res []api.Result) { done(res[0].Err()) })
}

// subscriptionsView tells topic controllers about the consumer groups of
// this node: it implements actors.SubscriptionsView over consumers.Manager.
// The consumer manager starts after the topics (their controllers may ask
// before), hence the atomic pointer.
type subscriptionsView struct {
	subs   atomic.Pointer[consumers.Manager]
	queues atomic.Pointer[consumers.QueueManager]
}

// running reports whether a stream or queue group of topic is running,
// which keeps the topic active.
func (v *subscriptionsView) running(topic string) bool {
	if s := v.subs.Load(); s != nil && s.Running(topic) {
		return true
	}
	q := v.queues.Load()
	return q != nil && q.Running(topic)
}

// TopicSubscriptions asks every subscription of t on this node's disk for
// its stats. A subscription that does not answer fails the whole call: the
// controller must not delete a segment a silent subscription still needs.
func (v *subscriptionsView) TopicSubscriptions(ctx context.Context, t *actors.Topic) ([]actors.SubscriptionInfo, error) {
	subs := v.subs.Load()
	if subs == nil {
		return nil, api.Errorf(api.CodeUnavailable, "consumer groups are not started yet")
	}
	names := subs.Subscriptions(t.Topic())
	type answer struct {
		st  consumers.Stats
		err error
	}
	answers := make(chan answer, len(names))
	for _, name := range names {
		subs.Stats(t, name, func(st consumers.Stats, err error) { answers <- answer{st, err} })
	}
	out := make([]actors.SubscriptionInfo, 0, len(names))
	for range names {
		select {
		case a := <-answers:
			if a.err != nil {
				return nil, a.err
			}
			info := actors.SubscriptionInfo{Name: a.st.Subscription, Consumers: len(a.st.Consumers),
				Drained: make(map[topology.SegmentID]bool, len(a.st.Drained)), Backlog: a.st.Backlog, Withheld: len(a.st.Withheld)}
			for _, id := range a.st.Drained {
				info.Drained[id] = true
			}
			out = append(out, info)
		case <-ctx.Done():
			return nil, api.Errorf(api.CodeTimeout, "subscriptions of %s did not answer: %v", t.Topic(), ctx.Err())
		}
	}
	return out, nil
}

// registerConsumerMetrics exposes the consumer groups' counters.
func (n *Node) registerConsumerMetrics() {
	subs := n.subs
	n.registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "braid_bucket_reassignments_total",
		Help: "Units (segment, entry bucket) that left their consumer: handed over under the handoff rule, or released by a consumer that left or died."},
		func() float64 { return float64(subs.Reassignments()) }))
	n.registry.MustRegister(newQueueCollector(n))
	n.registry.MustRegister(newConsumerCollector(n))
}

// deadLetterCreateTimeout bounds the creation of a dead-letter topic.
const deadLetterCreateTimeout = 30 * time.Second

// groupCompactAfter is the groups' compaction option (--group-compact-after).
func (n *Node) groupCompactAfter() consumers.Option {
	if n.cfg.GroupCompactAfter <= 0 {
		return consumers.WithCompactAfter(DefaultGroupCompactAfter)
	}
	return consumers.WithCompactAfter(n.cfg.GroupCompactAfter)
}
