package specs

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/cluster"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

var _ = Describe("The storage lifecycle", func() {
	It("adopts a legacy single-file topic in place when it is given a roll policy and removes its old file by retention, while a subscription reading it goes on with no offset changed", func() {
		dir := GinkgoT().TempDir()
		node, err := cluster.Start(context.Background(), cluster.Config{DataDir: dir, NATSListen: "127.0.0.1:-1", MetricsListen: "127.0.0.1:0",
			StorageTick: 20 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		Expect(err).NotTo(HaveOccurred())
		s := &server{dir: dir, node: node, nc: connect(node.ClientURL())}
		defer s.stop()
		const topic = "legacy"
		uri := "topic://public/default/" + topic
		never := int64(-1)
		forever := "-1s"
		s.admin(api.AdminTopicCreate, api.TopicCreateRequest{Topic: uri, Segments: 1, Buckets: 1,
			Policies: &api.Policies{SegmentBytes: &never, SegmentMs: &never, Retention: &forever}}, nil)
		// Records an hour old (their producer's time).
		old := time.Now().Add(-time.Hour).UnixMilli()
		batch := func(from, n int) {
			recs := make([]api.Record, n)
			for i := range recs {
				recs[i] = api.Record{Key: []byte("k"), Payload: []byte(fmt.Sprint(from + i)), Time: old}
			}
			s.produceBatch(topic, recs)
		}
		for i := 0; i < 300; i += 50 {
			batch(i, 50)
		}
		// A subscription reads the first hundred.
		s.consume(api.ConsumeJoin, topic, api.JoinRequest{Subscription: "reader", Consumer: "c1", Start: api.StartEarliest})
		msgs := s.fetch(topic, "reader", "c1", 100)
		Expect(msgs).To(HaveLen(100))
		Expect(msgs[99].Offset).To(Equal(uint64(99)))
		s.ackAll(topic, "reader", "c1", msgs)

		// Given a roll policy and a retention of a minute, the legacy file
		// (the log is open: the topic is in use) is closed by age at the
		// worker's next pass, as it is, and removed: its newest record is
		// an hour old. Offsets go on from 300.
		var reply api.PoliciesReply
		segmentMs := int64(100)
		minute := "1m"
		s.admin(api.AdminTopicPolicies, api.TopicPoliciesRequest{Topic: uri, Policies: &api.Policies{SegmentMs: &segmentMs, Retention: &minute}}, &reply)
		Eventually(func() float64 { return s.metric(`braid_storage_files_rolled_total`) }).
			WithTimeout(10 * time.Second).WithPolling(20 * time.Millisecond).Should(BeNumerically(">", 0))
		res := s.produceBatch(topic, []api.Record{{Key: []byte("k"), Payload: []byte("300")}})
		Expect(res[0].Offset).To(Equal(uint64(300)))
		Eventually(func() uint64 {
			var st api.TopicStats
			s.admin(api.AdminTopicStats, api.TopicRequest{Topic: uri}, &st)
			for _, b := range st.Buckets {
				if b.State == "active" {
					return b.FirstOffset
				}
			}
			return 0
		}).WithTimeout(10 * time.Second).WithPolling(50 * time.Millisecond).Should(BeNumerically(">=", 300))
		Expect(s.metric(`braid_storage_files_removed_total`)).To(BeNumerically(">", 0))
		Expect(s.metric(`braid_storage_files_rolled_total`)).To(BeNumerically(">", 0))

		// The subscription goes on past what is gone: the record made after
		// the policy, at its offset.
		Eventually(func() []api.Message { return s.fetch(topic, "reader", "c1", 10) }).
			WithTimeout(10 * time.Second).WithPolling(50 * time.Millisecond).Should(ContainElement(
			WithTransform(func(m api.Message) string { return fmt.Sprintf("%d:%s", m.Offset, m.Payload) }, Equal("300:300"))))
	})
})
