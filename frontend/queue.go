package frontend

import (
	"slices"

	"github.com/braidmq/braid/actors"
	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/consumers"
	"github.com/nats-io/nats.go/micro"
)

// This file serves queue subscriptions (braid.v1.queue.*) and direct reads
// for checkpoint consumers (braid.v1.read.*, in read.go).

// addQueueServices registers braid-queue and braid-read.
func (n *Frontend) addQueueServices() error {
	queue, err := n.newService("braid-queue", "Braid queue subscriptions: join, fetch, ack, nack, leave")
	if err != nil {
		return err
	}
	n.services = append(n.services, queue)
	for _, verb := range []string{api.QueueJoin, api.QueueFetch, api.QueueAck, api.QueueNack, api.QueueLeave} {
		if err := queue.endpoint(verb, api.QueuePrefix+"."+verb+".*.*.*", n.queueHandler(verb)); err != nil {
			return err
		}
	}
	read, err := n.newService("braid-read", "Braid direct reads for checkpoint consumers: fetch, offsets")
	if err != nil {
		return err
	}
	n.services = append(n.services, read)
	if err := read.endpoint(api.ReadFetch, api.ReadPrefix+"."+api.ReadFetch+".*.*.*", n.topicHandler(api.ReadPrefix+"."+api.ReadFetch, n.readFetch)); err != nil {
		return err
	}
	return read.endpoint(api.ReadOffsets, api.ReadPrefix+"."+api.ReadOffsets+".*.*.*", n.topicHandler(api.ReadPrefix+"."+api.ReadOffsets, n.readOffsets))
}

// subscriptionKindTaken refuses a join of one kind to a subscription name
// the topic already has as the other kind.
func (n *Frontend) subscriptionKindTaken(t *actors.Topic, subscription string, queue bool) error {
	other, kind := n.queues.Subscriptions(t.Topic()), "queue"
	if queue {
		other, kind = n.subs.Subscriptions(t.Topic()), "stream"
	}
	if slices.Contains(other, subscription) {
		return api.Errorf(api.CodeAlreadyExists, "subscription %q of %s is a %s subscription", subscription, t.Topic(), kind)
	}
	return nil
}

// queueHandler serves braid.v1.queue.<verb>.<t>.<ns>.<topic>.
func (n *Frontend) queueHandler(verb string) micro.HandlerFunc {
	prefix := api.QueuePrefix + "." + verb
	return n.topicHandler(prefix, func(r replier, req micro.Request, t *actors.Topic) {
		switch verb {
		case api.QueueJoin:
			serveJSON(r, req.Data(), func(jr api.QueueJoinRequest) {
				if err := n.subscriptionKindTaken(t, jr.Subscription, true); err != nil {
					r.err(err)
					return
				}
				n.queues.Join(t, jr, joinReply(r))
			})
		case api.QueueFetch:
			serveJSON(r, req.Data(), func(fr api.FetchRequest) {
				fr.MaxBytes = min(fr.MaxBytes, maxFetchReplyBytes)
				n.queues.Fetch(t, fr, func(msgs []api.Message, _ int, err error) {
					if err != nil {
						r.err(err)
						return
					}
					r.data(fetchReply(fr.Format, msgs), nil)
				})
			})
		case api.QueueAck:
			serveJSON(r, req.Data(), func(ar api.AckRequest) { n.queues.Ack(t, ar, okReply(r)) })
		case api.QueueNack:
			serveJSON(r, req.Data(), func(nr api.NackRequest) { n.queues.Nack(t, nr, okReply(r)) })
		case api.QueueLeave:
			serveJSON(r, req.Data(), func(lr api.LeaveRequest) { n.queues.Leave(t, lr, okReply(r)) })
		}
	})
}

// serveJSON decodes body strictly into a T and serves it, or answers the
// decoding error.
func serveJSON[T any](r replier, body []byte, serve func(T)) {
	var req T
	if err := decodeJSON(body, &req); err != nil {
		r.err(err)
		return
	}
	serve(req)
}

// messagesSize estimates the encoded size of msgs.
func messagesSize(msgs []api.Message) int {
	size := 16
	for i := range msgs {
		size += 32 + len(msgs[i].Key) + len(msgs[i].Payload)
		for _, h := range msgs[i].Headers {
			size += 4 + len(h.Name) + len(h.Value)
		}
	}
	return size
}

// queueStats collects the stats of every queue subscription of a topic.
func (n *Frontend) queueStats(t *actors.Topic) []api.SubscriptionStats {
	var out []api.SubscriptionStats
	for _, sub := range n.queues.Subscriptions(t.Topic()) {
		ch := make(chan consumers.QueueStats, 1)
		n.queues.Stats(t, sub, func(s consumers.QueueStats, err error) { ch <- s })
		s := <-ch
		ss := api.SubscriptionStats{Name: sub, Kind: "queue", Consumers: []string{}, Backlog: s.Backlog, Drained: []uint64{}}
		for _, c := range s.Consumers {
			ss.Consumers = append(ss.Consumers, c.Name)
		}
		for _, d := range s.Drained {
			ss.Drained = append(ss.Drained, uint64(d))
		}
		out = append(out, ss)
	}
	return out
}

// deleteQueues stops and removes the queue subscriptions of a topic.
func (n *Frontend) deleteQueues(t *actors.Topic) error { return n.queues.DeleteTopic(t.Topic()) }
