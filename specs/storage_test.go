package specs

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/braidmq/braid/api"
	braidnode "github.com/braidmq/braid/node"
	"github.com/nats-io/nats.go/jetstream"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

var _ = Describe("The storage lifecycle", func() {
	It("adopts a legacy single-file topic in place when it is given a roll policy and removes its old file by retention, while a subscription reading it goes on with no offset changed", func() {
		dir := GinkgoT().TempDir()
		node, err := braidnode.Start(context.Background(), braidnode.Config{DataDir: dir, NATSListen: "127.0.0.1:-1", MetricsListen: "127.0.0.1:0",
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

	It("trims the head of an adopted legacy file in place as its records expire, and consumers skip what is gone with no offset changed", func() {
		s := startStorageServer()
		defer s.stop()
		const topic = "legacy-trim"
		uri := "topic://public/default/" + topic
		never, forever := int64(-1), "-1s"
		s.admin(api.AdminTopicCreate, api.TopicCreateRequest{Topic: uri, Segments: 1, Buckets: 1,
			Policies: &api.Policies{SegmentBytes: &never, SegmentMs: &never, Retention: &forever}}, nil)
		// 150 records two hours old, then 150 of now (their producer's
		// times), 200 bytes each: one file that never rolls.
		old, now := time.Now().Add(-2*time.Hour).UnixMilli(), time.Now().UnixMilli()
		for from := 0; from < 300; from += 50 {
			recs := make([]api.Record, 50)
			for i := range recs {
				at := old
				if from+i >= 150 {
					at = now
				}
				recs[i] = api.Record{Key: []byte("k"), Payload: fmt.Appendf(make([]byte, 0, 200), "%-200d", from+i), Time: at}
			}
			s.produceBatch(topic, recs)
		}
		s.consume(api.ConsumeJoin, topic, api.JoinRequest{Subscription: "reader", Consumer: "c1", Start: api.StartEarliest})
		msgs := s.fetch(topic, "reader", "c1", 100)
		Expect(msgs).To(HaveLen(100))
		s.ackAll(topic, "reader", "c1", msgs)

		// A roll policy (4 KiB files) and a retention of an hour: the
		// legacy file, oversized, is rolled as it is, then gives back the
		// expired half of its records in place; the recent half stays.
		segmentBytes, segmentMs, hour := int64(4096), int64(100), "1h"
		s.admin(api.AdminTopicPolicies, api.TopicPoliciesRequest{Topic: uri, Policies: &api.Policies{SegmentBytes: &segmentBytes, SegmentMs: &segmentMs, Retention: &hour}}, nil)
		first := func() uint64 {
			var st api.TopicStats
			s.admin(api.AdminTopicStats, api.TopicRequest{Topic: uri}, &st)
			return st.Buckets[0].FirstOffset
		}
		Eventually(first).WithTimeout(10 * time.Second).WithPolling(20 * time.Millisecond).Should(BeNumerically(">=", 140))
		Expect(first()).To(BeNumerically("<=", 150), "the records of now were trimmed")
		Expect(s.metric(`braid_storage_head_trims_total`)).To(BeNumerically(">", 0))
		Expect(s.metric(`braid_storage_files_removed_total`)).To(BeZero(), "the file went whole")

		// The subscription skips what is gone and reads the rest at the
		// offsets they were given.
		var got []string
		Eventually(func() int {
			for _, m := range s.fetch(topic, "reader", "c1", 100) {
				got = append(got, fmt.Sprintf("%d=%s", m.Offset, bytes.TrimSpace(m.Payload)))
				s.ackAll(topic, "reader", "c1", []api.Message{m})
			}
			return len(got)
		}).WithTimeout(10 * time.Second).WithPolling(20 * time.Millisecond).Should(BeNumerically(">=", 150))
		Expect(got[len(got)-1]).To(Equal("299=299"))
		for _, g := range got {
			off, payload, _ := strings.Cut(g, "=")
			Expect(off).To(Equal(payload))
		}
	})

	It("offloads closed files to the remote tier, drops their local copies, and a new subscription at earliest reads everything back from the tier", func() {
		s := startStorageServer()
		defer s.stop()
		const topic = "tiered"
		uri := "topic://public/default/" + topic
		yes, segmentMs, zero, hour := true, int64(50), int64(0), "1h"
		s.admin(api.AdminTopicCreate, api.TopicCreateRequest{Topic: uri, Segments: 1, Buckets: 1,
			Policies: &api.Policies{SegmentMs: &segmentMs, Retention: &hour, Offload: &yes, LocalRetentionMs: &zero}}, nil)
		const n = 600
		for from := 0; from < n; from += 100 {
			recs := make([]api.Record, 100)
			for i := range recs {
				recs[i] = api.Record{Key: []byte(fmt.Sprint("k", (from+i)%7)), Payload: []byte(fmt.Sprint(from + i))}
			}
			s.produceBatch(topic, recs)
			time.Sleep(60 * time.Millisecond) // spreads the records over files: not a wait for anything
		}
		var st api.TopicStats
		Eventually(func() uint64 {
			s.admin(api.AdminTopicStats, api.TopicRequest{Topic: uri}, &st)
			return st.Buckets[0].LocalFirstOffset
		}).WithTimeout(10 * time.Second).WithPolling(20 * time.Millisecond).Should(BeNumerically(">=", n-100))
		Expect(st.Buckets[0].FirstOffset).To(BeZero())
		Expect(st.TierBytes).To(BeNumerically(">", 0))
		Expect(s.metric(`braid_tier_files_offloaded_total`)).To(BeNumerically(">", 0))
		js, err := jetstream.New(s.nc)
		Expect(err).NotTo(HaveOccurred())
		store, err := js.ObjectStore(context.Background(), "braid-tier")
		Expect(err).NotTo(HaveOccurred())
		// The worker may offload one more file between two looks: the
		// store and the stats agree once it is between passes.
		Eventually(func(g Gomega) {
			objects, err := store.List(context.Background())
			g.Expect(err).NotTo(HaveOccurred())
			s.admin(api.AdminTopicStats, api.TopicRequest{Topic: uri}, &st)
			g.Expect(len(objects)).To(Equal(st.Buckets[0].TierFiles))
		}).WithTimeout(10 * time.Second).WithPolling(50 * time.Millisecond).Should(Succeed())

		// A new subscription from the earliest offset reads all of it, in
		// order, most of it from the tier.
		s.consume(api.ConsumeJoin, topic, api.JoinRequest{Subscription: "replay", Consumer: "c1", Start: api.StartEarliest})
		var got []uint64
		Eventually(func() int {
			for _, m := range s.fetch(topic, "replay", "c1", 200) {
				Expect(string(m.Payload)).To(Equal(fmt.Sprint(m.Offset)))
				got = append(got, m.Offset)
				s.ackAll(topic, "replay", "c1", []api.Message{m})
			}
			return len(got)
		}).WithTimeout(20 * time.Second).WithPolling(20 * time.Millisecond).Should(Equal(n))
		for i, off := range got {
			Expect(off).To(Equal(uint64(i)))
		}
		Expect(s.metric(`braid_tier_reads_total{result="ok"}`)).To(BeNumerically(">", 0))

		// Deleting the topic empties the tier of it.
		s.admin(api.AdminTopicDelete, api.TopicRequest{Topic: uri}, nil)
		_, err = store.List(context.Background())
		Expect(err).To(MatchError(jetstream.ErrNoObjectsFound))
	})
})

// startStorageServer starts a node whose storage worker ticks every 20 ms.
func startStorageServer() *server {
	dir := GinkgoT().TempDir()
	node, err := braidnode.Start(context.Background(), braidnode.Config{DataDir: dir, NATSListen: "127.0.0.1:-1", MetricsListen: "127.0.0.1:0",
		StorageTick: 20 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	Expect(err).NotTo(HaveOccurred())
	return &server{dir: dir, node: node, nc: connect(node.ClientURL())}
}
