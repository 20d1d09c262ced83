package specs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/client"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// Subscription management, as pulsar-admin's topics subscriptions /
// unsubscribe / reset-cursor and `nats consumer` offer it: list with the
// lag of every unit and consumer, seek, delete (api/subscriptions.go).
var _ = Describe("Subscription management", func() {
	const topic = "subscribed"
	const uri = "topic://public/default/" + topic
	const n = 20
	const base = int64(1_700_000_000_000) // record i has time base+i
	var s *server
	var adm *client.Admin
	var produced []api.Result // record i's position
	var count map[api.UnitID]uint64

	unitOf := func(r api.Result) api.UnitID { return api.UnitID{Segment: r.Segment, Bucket: r.Bucket} }

	BeforeEach(func() {
		s = startServer(GinkgoT().TempDir())
		DeferCleanup(func() { s.stop() })
		adm = client.NewAdmin(s.nc)
		s.admin(api.AdminTopicCreate, api.TopicCreateRequest{Topic: uri, Segments: 1, Buckets: 2}, nil)
		recs := make([]api.Record, n)
		for i := range recs {
			recs[i] = api.Record{Key: fmt.Appendf(nil, "k%d", i), Time: base + int64(i), Payload: fmt.Appendf(nil, "m%d", i)}
		}
		produced = s.produceBatch(topic, recs)
		count = map[api.UnitID]uint64{}
		for _, r := range produced {
			count[unitOf(r)]++
		}
		Expect(count).To(HaveLen(2), "the keys land in both buckets")
	})

	// request sends an admin request and returns its error.
	request := func(op string, req any) ([]byte, error) {
		b, err := json.Marshal(req)
		Expect(err).NotTo(HaveOccurred())
		return s.request(api.AdminSubject(op), b)
	}
	codeOf := func(err error) string {
		var e *api.Error
		if errors.As(err, &e) {
			return e.Code.Symbol
		}
		return fmt.Sprint(err)
	}
	seek := func(req api.SubscriptionSeekRequest) api.SubscriptionSeekReply {
		GinkgoHelper()
		req.Topic = uri
		var r api.SubscriptionSeekReply
		s.admin(api.AdminSubscriptionSeek, req, &r)
		return r
	}
	subscription := func(name string) api.SubscriptionInfo {
		GinkgoHelper()
		subs, err := adm.ListSubscriptions(context.Background(), uri)
		Expect(err).NotTo(HaveOccurred())
		for _, sub := range subs {
			if sub.Name == name {
				return sub
			}
		}
		Fail("no subscription " + name)
		return api.SubscriptionInfo{}
	}
	unitIn := func(units []api.SubscriptionUnit, u api.UnitID) api.SubscriptionUnit {
		GinkgoHelper()
		i := slices.IndexFunc(units, func(x api.SubscriptionUnit) bool { return x.Segment == u.Segment && x.Bucket == u.Bucket })
		Expect(i).To(BeNumerically(">=", 0), "unit %v", u)
		return units[i]
	}
	join := func(sub, consumer string) {
		s.consume(api.ConsumeJoin, topic, api.JoinRequest{Subscription: sub, Consumer: consumer})
	}
	leave := func(sub, consumer string) {
		s.consume(api.ConsumeLeave, topic, api.LeaveRequest{Subscription: sub, Consumer: consumer})
	}
	// consumeAll joins, reads and acknowledges everything, and leaves.
	consumeAll := func(sub string) {
		GinkgoHelper()
		join(sub, "reader")
		msgs := s.fetch(topic, sub, "reader", 1000)
		Expect(msgs).To(HaveLen(n))
		s.ackAll(topic, sub, "reader", msgs)
		leave(sub, "reader")
	}
	ids := func(msgs []api.Message) []string {
		out := make([]string, len(msgs))
		for i, m := range msgs {
			out[i] = fmt.Sprintf("%d/%d/%d", m.Segment, m.Bucket, m.Offset)
		}
		slices.Sort(out)
		return out
	}
	// producedIDs are the positions of the records for which keep holds.
	producedIDs := func(keep func(i int, r api.Result) bool) []string {
		var out []string
		for i, r := range produced {
			if keep(i, r) {
				out = append(out, fmt.Sprintf("%d/%d/%d", r.Segment, r.Bucket, r.Offset))
			}
		}
		slices.Sort(out)
		return out
	}

	It("lists the backlog and the lag of every unit and consumer after producing N and acking M", func() {
		first := unitOf(produced[0])
		Expect(count[first]).To(BeNumerically(">=", 5))
		join("audit", "c1")
		Expect(s.fetch(topic, "audit", "c1", 1000)).To(HaveLen(n))
		s.consume(api.ConsumeAck, topic, api.AckRequest{Subscription: "audit", Consumer: "c1",
			Acks: []api.Position{{Segment: first.Segment, Bucket: first.Bucket, Offset: 4}}}) // M = 5

		_, err := s.request(api.QueueSubject(api.QueueJoin, "public", "default", topic), []byte(`{"subscription":"work","consumer":"w1"}`))
		Expect(err).NotTo(HaveOccurred())
		data, err := s.request(api.QueueSubject(api.QueueFetch, "public", "default", topic), []byte(`{"subscription":"work","consumer":"w1","max":6,"wait":"0s"}`))
		Expect(err).NotTo(HaveOccurred())
		held, err := api.DecodeMessages(data)
		Expect(err).NotTo(HaveOccurred())
		Expect(held).To(HaveLen(6))
		ack, _ := json.Marshal(api.AckRequest{Subscription: "work", Consumer: "w1", Acks: []api.Position{
			{Segment: held[0].Segment, Bucket: held[0].Bucket, Offset: held[0].Offset},
			{Segment: held[5].Segment, Bucket: held[5].Bucket, Offset: held[5].Offset}}})
		_, err = s.request(api.QueueSubject(api.QueueAck, "public", "default", topic), ack)
		Expect(err).NotTo(HaveOccurred())

		audit := subscription("audit")
		Expect(audit.Kind).To(Equal(api.SubscriptionStream))
		Expect(audit.Backlog).To(Equal(uint64(n - 5)))
		Expect(audit.Units).To(HaveLen(2))
		for u, c := range count {
			acked := uint64(0)
			if u == first {
				acked = 5
			}
			Expect(unitIn(audit.Units, u)).To(Equal(api.SubscriptionUnit{Segment: u.Segment, Bucket: u.Bucket, Acked: acked, Next: c, Lag: c - acked, Owner: "c1"}))
		}
		Expect(audit.Consumers).To(HaveLen(1))
		Expect(audit.Consumers[0].Name).To(Equal("c1"))
		Expect(audit.Consumers[0].Units).To(HaveLen(2))
		Expect(audit.Consumers[0].Lag).To(Equal(uint64(n - 5)))

		work := subscription("work")
		Expect(work.Kind).To(Equal(api.SubscriptionQueue))
		Expect(work.Backlog).To(Equal(uint64(n - 2)))
		Expect(work.Consumers).To(ConsistOf(HaveField("Inflight", 4)))
		inflight := 0
		for _, u := range work.Units {
			inflight += u.Inflight
			Expect(u.Lag).To(Equal(u.Next - u.Acked))
		}
		Expect(inflight).To(Equal(4))

		var st api.TopicStats
		s.admin(api.AdminTopicStats, api.TopicRequest{Topic: uri}, &st)
		Expect(st.Subscriptions).To(ContainElements(
			And(HaveField("Name", "audit"), HaveField("Backlog", audit.Backlog)),
			And(HaveField("Name", "work"), HaveField("Backlog", work.Backlog))))
	})

	It("seeks to earliest: a new fetch gets everything again", func() {
		consumeAll("audit")
		Expect(subscription("audit").Backlog).To(BeZero())
		r := seek(api.SubscriptionSeekRequest{Subscription: "audit", To: api.SeekEarliest})
		Expect(r.Backlog).To(Equal(uint64(n)))
		join("audit", "c2")
		Expect(ids(s.fetch(topic, "audit", "c2", 1000))).To(Equal(producedIDs(func(int, api.Result) bool { return true })))
	})

	It("seeks to latest: nothing is left but what comes next", func() {
		join("audit", "c1")
		leave("audit", "c1")
		r := seek(api.SubscriptionSeekRequest{Subscription: "audit", To: api.SeekLatest})
		Expect(r.Backlog).To(BeZero())
		for u, c := range count {
			Expect(unitIn(r.Units, u).Acked).To(Equal(c))
		}
		join("audit", "c2")
		Expect(s.fetch(topic, "audit", "c2", 1000)).To(BeEmpty())
		last := s.produceBatch(topic, []api.Record{{Key: []byte("k0"), Payload: []byte("new")}})
		Eventually(func() []string { return ids(s.fetch(topic, "audit", "c2", 1000)) }).
			Should(Equal([]string{fmt.Sprintf("%d/%d/%d", last[0].Segment, last[0].Bucket, last[0].Offset)}))
	})

	It("seeks by time: every unit at its first message at or after it", func() {
		consumeAll("audit")
		at := base + 12
		r := seek(api.SubscriptionSeekRequest{Subscription: "audit", Time: &at})
		Expect(r.Backlog).To(Equal(uint64(n - 12)))
		for u := range count {
			before := uint64(0)
			for i, p := range produced {
				if i < 12 && unitOf(p) == u {
					before++
				}
			}
			Expect(unitIn(r.Units, u).Acked).To(Equal(before), "unit %v", u)
		}
		join("audit", "c2")
		Expect(ids(s.fetch(topic, "audit", "c2", 1000))).To(Equal(producedIDs(func(i int, _ api.Result) bool { return i >= 12 })))
	})

	It("seeks to a message id: its unit from there, the other where it was", func() {
		consumeAll("audit")
		m := produced[7]
		r := seek(api.SubscriptionSeekRequest{Subscription: "audit", Message: &api.Position{Segment: m.Segment, Bucket: m.Bucket, Offset: m.Offset}})
		Expect(unitIn(r.Units, unitOf(m)).Acked).To(Equal(m.Offset))
		Expect(r.Backlog).To(Equal(count[unitOf(m)] - m.Offset))
		join("audit", "c2")
		Expect(ids(s.fetch(topic, "audit", "c2", 1000))).To(Equal(producedIDs(func(_ int, p api.Result) bool {
			return unitOf(p) == unitOf(m) && p.Offset >= m.Offset
		})))
	})

	It("refuses to delete a subscription with a consumer attached, then deletes it with force, telling the consumer", func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c, err := client.NewStreamConsumer(s.nc, uri, "audit", client.WithConsumerName("c1"), client.WithFetch(100, 1<<20, time.Second))
		Expect(err).NotTo(HaveOccurred())
		for range n {
			m, err := c.Next(ctx)
			Expect(err).NotTo(HaveOccurred())
			m.Ack()
		}
		Expect(c.FlushAcks(ctx)).To(Succeed())

		_, err = adm.DeleteSubscription(ctx, uri, "audit", false)
		Expect(codeOf(err)).To(Equal("INVALID_ARGUMENT"))
		Expect(err.Error()).To(ContainSubstring("c1"))
		Expect(subscription("audit").Consumers).To(HaveLen(1))

		detached, err := adm.DeleteSubscription(ctx, uri, "audit", true)
		Expect(err).NotTo(HaveOccurred())
		Expect(detached).To(Equal([]string{"c1"}))
		_, err = c.Next(ctx)
		Expect(codeOf(err)).To(Equal("NOT_FOUND"))
		Expect(err.Error()).To(ContainSubstring("was deleted"))
		subs, err := adm.ListSubscriptions(ctx, uri)
		Expect(err).NotTo(HaveOccurred())
		Expect(subs).To(BeEmpty())
		_ = c.Close(ctx) // it leaves: the notice is over

		// A new consumer makes a new subscription, from the start.
		c2, err := client.NewStreamConsumer(s.nc, uri, "audit", client.WithConsumerName("c1"))
		Expect(err).NotTo(HaveOccurred())
		defer c2.Close(ctx)
		m, err := c2.Next(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(m.Deliveries).To(Equal(uint32(1)))
	})

	It("detaches a stream consumer on a forced seek; a new one reads from the new position", func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c, err := client.NewStreamConsumer(s.nc, uri, "audit", client.WithConsumerName("c1"), client.WithFetch(100, 1<<20, time.Second))
		Expect(err).NotTo(HaveOccurred())
		for range n {
			m, err := c.Next(ctx)
			Expect(err).NotTo(HaveOccurred())
			m.Ack()
		}
		Expect(c.FlushAcks(ctx)).To(Succeed())
		_, err = adm.SeekSubscription(ctx, uri, "audit", client.SeekEarliest(), false)
		Expect(codeOf(err)).To(Equal("INVALID_ARGUMENT"))
		Expect(subscription("audit").Backlog).To(BeZero())

		r, err := adm.SeekSubscription(ctx, uri, "audit", client.SeekEarliest(), true)
		Expect(err).NotTo(HaveOccurred())
		Expect(r.Detached).To(Equal([]string{"c1"}))
		_, err = c.Next(ctx)
		Expect(codeOf(err)).To(Equal("NOT_OWNER"))
		_ = c.Close(ctx)

		c2, err := client.NewStreamConsumer(s.nc, uri, "audit", client.WithConsumerName("c2"))
		Expect(err).NotTo(HaveOccurred())
		defer c2.Close(ctx)
		for range n {
			_, err := c2.Next(ctx)
			Expect(err).NotTo(HaveOccurred())
		}
	})

	It("answers NOT_FOUND to the delete of an unknown subscription", func() {
		_, err := request(api.AdminSubscriptionDelete, api.SubscriptionDeleteRequest{Topic: uri, Subscription: "nobody"})
		Expect(codeOf(err)).To(Equal("NOT_FOUND"))
		_, err = request(api.AdminSubscriptionSeek, api.SubscriptionSeekRequest{Topic: uri, Subscription: "nobody", To: api.SeekEarliest})
		Expect(codeOf(err)).To(Equal("NOT_FOUND"))
	})

	It("refuses bad inputs with their codes, and changes nothing", func() {
		join("audit", "c1")
		Expect(s.fetch(topic, "audit", "c1", 1000)).To(HaveLen(n))
		s.consume(api.ConsumeAck, topic, api.AckRequest{Subscription: "audit", Consumer: "c1",
			Acks: []api.Position{{Segment: produced[0].Segment, Bucket: produced[0].Bucket, Offset: 1}}})
		leave("audit", "c1")
		before := subscription("audit")

		neg, ms := int64(-1), base
		b := produced[0]
		for _, tc := range []struct {
			what string
			op   string
			req  any
			code string
		}{
			{"list of an unknown topic", api.AdminSubscriptionList, api.TopicRequest{Topic: "topic://public/default/nope"}, "TOPIC_NOT_FOUND"},
			{"delete on an unknown topic", api.AdminSubscriptionDelete, api.SubscriptionDeleteRequest{Topic: "topic://public/default/nope", Subscription: "audit"}, "TOPIC_NOT_FOUND"},
			{"seek on an unknown topic", api.AdminSubscriptionSeek, api.SubscriptionSeekRequest{Topic: "topic://public/default/nope", Subscription: "audit", To: api.SeekEarliest}, "TOPIC_NOT_FOUND"},
			{"two targets", api.AdminSubscriptionSeek, api.SubscriptionSeekRequest{Topic: uri, Subscription: "audit", To: api.SeekEarliest, Time: &ms}, "INVALID_ARGUMENT"},
			{"no target", api.AdminSubscriptionSeek, api.SubscriptionSeekRequest{Topic: uri, Subscription: "audit"}, "BAD_REQUEST"},
			{"an unknown to", api.AdminSubscriptionSeek, api.SubscriptionSeekRequest{Topic: uri, Subscription: "audit", To: "middle"}, "INVALID_ARGUMENT"},
			{"a negative time", api.AdminSubscriptionSeek, api.SubscriptionSeekRequest{Topic: uri, Subscription: "audit", Time: &neg}, "INVALID_ARGUMENT"},
			{"a message of no segment", api.AdminSubscriptionSeek, api.SubscriptionSeekRequest{Topic: uri, Subscription: "audit",
				Message: &api.Position{Segment: 9, Bucket: 0, Offset: 0}}, "SEGMENT_NOT_FOUND"},
			{"a message of no bucket", api.AdminSubscriptionSeek, api.SubscriptionSeekRequest{Topic: uri, Subscription: "audit",
				Message: &api.Position{Segment: b.Segment, Bucket: 7, Offset: 0}}, "INVALID_ARGUMENT"},
			{"a message past its unit's end", api.AdminSubscriptionSeek, api.SubscriptionSeekRequest{Topic: uri, Subscription: "audit",
				Message: &api.Position{Segment: b.Segment, Bucket: b.Bucket, Offset: count[unitOf(b)] + 1}}, "INVALID_ARGUMENT"},
			{"no subscription", api.AdminSubscriptionSeek, api.SubscriptionSeekRequest{Topic: uri, To: api.SeekEarliest}, "BAD_REQUEST"},
			{"a bad subscription name", api.AdminSubscriptionDelete, api.SubscriptionDeleteRequest{Topic: uri, Subscription: "a.b"}, "INVALID_NAME"},
			{"an unknown field", api.AdminSubscriptionSeek, map[string]any{"topic": uri, "subscription": "audit", "to": "earliest", "cursor": 3}, "BAD_REQUEST"},
		} {
			_, err := request(tc.op, tc.req)
			Expect(codeOf(err)).To(Equal(tc.code), tc.what)
		}
		Expect(subscription("audit")).To(Equal(before))
	})
})
