package node

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/braidmq/braid/consumers"
)

// queueStatsTimeout bounds how long a scrape waits for one queue group.
const queueStatsTimeout = 2 * time.Second

// queueCollector exports the state of every queue subscription at scrape
// time, from the groups' own stats (consumers.QueueStats).
type queueCollector struct {
	n                                               *Node
	backlog, inflight, delayed, consumers, deadLets *prometheus.Desc
}

func newQueueCollector(n *Node) *queueCollector {
	labels := []string{"tenant", "namespace", "topic", "subscription"}
	return &queueCollector{
		n: n,
		backlog: prometheus.NewDesc("braid_queue_backlog_messages",
			"Messages a queue subscription has not acknowledged (nor dead-lettered).", labels, nil),
		inflight: prometheus.NewDesc("braid_queue_inflight_messages",
			"Messages a queue subscription's consumers hold, delivered and not acknowledged.", labels, nil),
		delayed: prometheus.NewDesc("braid_queue_delayed_messages",
			"Messages of a queue subscription waiting out a nack's redelivery delay.", labels, nil),
		consumers: prometheus.NewDesc("braid_queue_consumers",
			"Consumers of a queue subscription.", labels, nil),
		deadLets: prometheus.NewDesc("braid_queue_dead_lettered_total",
			"Messages a queue subscription sent to its dead-letter topic since its group started.", labels, nil),
	}
}

func (c *queueCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.backlog, c.inflight, c.delayed, c.consumers, c.deadLets} {
		ch <- d
	}
}

func (c *queueCollector) Collect(ch chan<- prometheus.Metric) {
	if c.n.topics == nil || c.n.queues == nil {
		return
	}
	for _, t := range c.n.topics.All() {
		for _, sub := range c.n.queues.Subscriptions(t.Topic()) {
			got := make(chan consumers.QueueStats, 1)
			c.n.queues.Stats(t, sub, func(s consumers.QueueStats, err error) {
				if err == nil {
					got <- s
				}
				close(got)
			})
			var s consumers.QueueStats
			var ok bool
			select {
			case s, ok = <-got:
			case <-time.After(queueStatsTimeout):
			}
			if !ok || !s.Created {
				continue
			}
			name := t.Name()
			gauge := func(d *prometheus.Desc, v float64) {
				ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, name.Tenant, name.Namespace, name.Name, sub)
			}
			gauge(c.backlog, float64(s.Backlog))
			gauge(c.inflight, float64(s.Inflight))
			gauge(c.delayed, float64(s.Delayed))
			gauge(c.consumers, float64(len(s.Consumers)))
			ch <- prometheus.MustNewConstMetric(c.deadLets, prometheus.CounterValue, float64(s.DeadLettered), name.Tenant, name.Namespace, name.Name, sub)
		}
	}
}
