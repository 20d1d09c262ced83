package frontend

import (
	"encoding/json"

	"github.com/braidmq/braid/actors"
	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/consumers"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// maxFetchReplyBytes keeps a fetch reply under the NATS max payload.
const maxFetchReplyBytes = 4 << 20

// consumeHandler serves braid.v1.consume.<verb>.<t>.<ns>.<topic>.
func (n *Frontend) consumeHandler(verb string) micro.HandlerFunc {
	prefix := api.ConsumePrefix + "." + verb
	return n.topicHandler(prefix, func(r replier, req micro.Request, t *actors.Topic) {
		switch verb {
		case api.ConsumeJoin:
			serveJSON(r, req.Data(), func(jr api.JoinRequest) {
				if err := n.subscriptionKindTaken(t, jr.Subscription, false); err != nil {
					r.err(err)
					return
				}
				n.subs.Join(t, jr, joinReply(r))
			})
		case api.ConsumeFetch:
			serveJSON(r, req.Data(), func(fr api.FetchRequest) {
				fr.MaxBytes = min(fr.MaxBytes, maxFetchReplyBytes)
				n.subs.Fetch(t, fr, func(msgs []api.Message, assigned int, err error) {
					if err != nil {
						r.err(err)
						return
					}
					hdr := nats.Header{}
					hdr.Set(api.FetchReplyHeaderAssigned, itoa(assigned))
					r.data(fetchReply(fr.Format, msgs), hdr)
				})
			})
		case api.ConsumeAck:
			serveJSON(r, req.Data(), func(ar api.AckRequest) { n.subs.Ack(t, ar, okReply(r)) })
		case api.ConsumeLeave:
			serveJSON(r, req.Data(), func(lr api.LeaveRequest) { n.subs.Leave(t, lr, okReply(r)) })
		}
	})
}

// joinReply answers a join with its reply or its error.
func joinReply(r replier) func(api.JoinReply, error) {
	return func(rep api.JoinReply, err error) {
		if err != nil {
			r.err(err)
			return
		}
		r.json(rep)
	}
}

// fetchReply encodes the messages of a fetch reply in the requested format.
func fetchReply(format string, msgs []api.Message) []byte {
	if format == consumers.FormatJSON {
		b, _ := json.Marshal(fetchJSON(msgs))
		return b
	}
	return api.AppendMessages(make([]byte, 0, messagesSize(msgs)), msgs)
}

func okReply(r replier) func(error) {
	return func(err error) {
		if err != nil {
			r.err(err)
			return
		}
		r.json(api.OKReply{OK: true})
	}
}

func fetchJSON(msgs []api.Message) api.FetchReplyJSON {
	out := api.FetchReplyJSON{Messages: make([]api.JSONMessage, len(msgs))}
	for i, m := range msgs {
		jm := api.JSONMessage{Segment: m.Segment, Bucket: m.Bucket, Offset: m.Offset, Deliveries: m.Deliveries,
			Time: m.Time, Key: string(m.Key), Payload: m.Payload}
		if len(m.Headers) > 0 {
			// A name given several values shows them joined by ", ", as
			// HTTP combines repeated fields; the binary format keeps each.
			jm.Headers = make(map[string]string, len(m.Headers))
			for _, h := range m.Headers {
				if v, ok := jm.Headers[h.Name]; ok {
					jm.Headers[h.Name] = v + ", " + string(h.Value)
				} else {
					jm.Headers[h.Name] = string(h.Value)
				}
			}
		}
		out.Messages[i] = jm
	}
	return out
}

// subscriptionStats collects the stats of every subscription of a topic.
func (n *Frontend) subscriptionStats(t *actors.Topic) []api.SubscriptionStats {
	out := []api.SubscriptionStats{}
	for _, sub := range n.subs.Subscriptions(t.Topic()) {
		ch := make(chan consumers.Stats, 1)
		n.subs.Stats(t, sub, func(s consumers.Stats, err error) { ch <- s })
		s := <-ch
		ss := api.SubscriptionStats{Name: sub, Consumers: []string{}, Backlog: s.Backlog, Drained: []uint64{}, ReadCompacted: s.ReadCompacted}
		for _, c := range s.Consumers {
			ss.Consumers = append(ss.Consumers, c.Name)
		}
		for _, d := range s.Drained {
			ss.Drained = append(ss.Drained, uint64(d))
		}
		out = append(out, ss)
	}
	return append(out, n.queueStats(t)...)
}

// deleteSubscriptions stops and removes the subscriptions of a topic that
// is being deleted.
func (n *Frontend) deleteSubscriptions(uri string) error {
	t, err := n.topics.Topic(uri)
	if err != nil {
		return err
	}
	if err := n.deleteQueues(t); err != nil {
		return err
	}
	return n.subs.DeleteTopic(t.Topic())
}
