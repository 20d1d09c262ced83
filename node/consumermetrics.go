package node

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/braidmq/braid/actors"
	"github.com/braidmq/braid/api"
)

// consumerCollector exports, per consumer, what subscription.list shows:
// the lag of a stream consumer (the messages it has not acknowledged over
// the units it holds) and the messages a queue consumer holds. It asks
// the groups of this node at scrape time, running ones only: a scrape
// never starts a group.
type consumerCollector struct {
	n             *Node
	lag, inflight *prometheus.Desc
	timeout       time.Duration
}

func newConsumerCollector(n *Node) *consumerCollector {
	labels := []string{"tenant", "namespace", "topic", "subscription", "consumer"}
	return &consumerCollector{
		n: n,
		lag: prometheus.NewDesc("braid_consumer_lag_messages",
			"Messages a stream consumer has not acknowledged over the units it holds.", labels, nil),
		inflight: prometheus.NewDesc("braid_queue_consumer_inflight_messages",
			"Messages delivered to a queue consumer and not answered yet.", labels, nil),
		timeout: queueStatsTimeout,
	}
}

func (c *consumerCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.lag
	ch <- c.inflight
}

func (c *consumerCollector) Collect(ch chan<- prometheus.Metric) {
	if c.n.topics == nil || c.n.subs == nil || c.n.queues == nil {
		return
	}
	type group struct {
		topic *actors.Topic
		kind  string
		sub   string
	}
	var groups []group
	for _, t := range c.n.topics.All() {
		if c.n.subs.Running(t.Topic()) {
			for _, sub := range c.n.subs.Subscriptions(t.Topic()) {
				groups = append(groups, group{t, api.SubscriptionStream, sub})
			}
		}
		if c.n.queues.Running(t.Topic()) {
			for _, sub := range c.n.queues.Subscriptions(t.Topic()) {
				groups = append(groups, group{t, api.SubscriptionQueue, sub})
			}
		}
	}
	type answer struct {
		group
		info api.SubscriptionInfo
		err  error
	}
	// Room for every answer: a group answering after the scrape gave up
	// never blocks on the channel.
	answers := make(chan answer, len(groups))
	for _, g := range groups {
		reply := func(info api.SubscriptionInfo, err error) { answers <- answer{g, info, err} }
		if g.kind == api.SubscriptionQueue {
			c.n.queues.Info(g.topic, g.sub, reply)
		} else {
			c.n.subs.Info(g.topic, g.sub, reply)
		}
	}
	deadline := time.NewTimer(c.timeout)
	defer deadline.Stop()
	for range groups {
		var a answer
		select {
		case a = <-answers:
		case <-deadline.C:
			return
		}
		if a.err != nil {
			continue
		}
		name := a.topic.Name()
		for _, cons := range a.info.Consumers {
			d, v := c.lag, float64(cons.Lag)
			if a.kind == api.SubscriptionQueue {
				d, v = c.inflight, float64(cons.Inflight)
			}
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, name.Tenant, name.Namespace, name.Name, a.sub, cons.Name)
		}
	}
}
