package specs

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/client"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// Compaction, after Pulsar's CompactionTest and Kafka's cleaner
// guarantees, end to end over NATS: topic.compact, topic.compaction and
// read.fetch with "compacted":true.

// compact runs a compaction of topic and waits for it to end.
func (s *server) compact(topic string) api.CompactionStatus {
	GinkgoHelper()
	uri := "topic://public/default/" + topic
	var st api.CompactionStatus
	s.admin(api.AdminTopicCompact, api.TopicRequest{Topic: uri}, &st)
	Eventually(func() bool {
		s.admin(api.AdminTopicCompaction, api.TopicRequest{Topic: uri}, &st)
		return st.Running
	}).WithTimeout(20 * time.Second).WithPolling(10 * time.Millisecond).Should(BeFalse())
	Expect(st.Error).To(BeEmpty())
	return st
}

// readView reads every unit of topic from offset 0 with read.fetch, the
// compacted view or the whole log, and returns its messages.
func (s *server) readView(topic string, compacted bool) []api.Message {
	GinkgoHelper()
	var out []api.Message
	for _, seg := range s.describe(topic).Segments {
		if seg.State == "deleted" {
			continue
		}
		for b := 0; b < seg.Buckets; b++ {
			for off := uint64(0); ; {
				req, _ := json.Marshal(api.ReadRequest{Units: []api.ReadUnit{{Segment: seg.ID, Bucket: b, Offset: off}}, Max: 1000, Compacted: compacted})
				data, err := s.request(api.ReadSubject(api.ReadFetch, "public", "default", topic), req)
				Expect(err).NotTo(HaveOccurred())
				reply, err := api.DecodeReadReply(data)
				Expect(err).NotTo(HaveOccurred())
				Expect(reply.Units[0].Code).To(BeZero(), reply.Units[0].Message)
				next := off
				if n := len(reply.Messages); n > 0 {
					next = reply.Messages[n-1].Offset + 1
				}
				if compacted {
					// Resume says where to go on from: past the last
					// message, and past what compaction removed after it.
					Expect(reply.Units[0].Resume).To(BeNumerically(">=", next))
					next = reply.Units[0].Resume
				}
				if next == off {
					break
				}
				out = append(out, reply.Messages...)
				off = next
			}
		}
	}
	return out
}

// latest returns "key=payload" of msgs, sorted.
func latest(msgs []api.Message) []string {
	var out []string
	for _, m := range msgs {
		out = append(out, fmt.Sprintf("%s=%s", m.Key, m.Payload))
	}
	slices.Sort(out)
	return out
}

func keyed(pairs ...string) []api.Record {
	var recs []api.Record
	for i := 0; i+1 < len(pairs); i += 2 {
		r := api.Record{Payload: []byte(pairs[i+1])}
		if pairs[i] != "" {
			r.Key = []byte(pairs[i])
		}
		recs = append(recs, r)
	}
	return recs
}

var _ = Describe("Topic compaction", func() {
	var s *server
	BeforeEach(func() {
		s = startServer(GinkgoT().TempDir())
		DeferCleanup(s.stop)
	})
	create := func(topic, policies string) {
		var p api.Policies
		Expect(json.Unmarshal([]byte(`{"auto_scale":false}`), &p)).To(Succeed())
		if policies != "" {
			Expect(json.Unmarshal([]byte(policies), &p)).To(Succeed())
		}
		s.admin(api.AdminTopicCreate, api.TopicCreateRequest{Topic: "topic://public/default/" + topic, Segments: 1, Buckets: 1, Policies: &p}, nil)
	}

	It("reads everything read-compacted before any compaction, then the latest value of each key at the offset it was written at", func() {
		create("ticker", "")
		res := s.produceBatch("ticker", keyed("AAPL", "1", "GOOG", "1", "AAPL", "2", "MSFT", "1", "AAPL", "3", "GOOG", "2"))
		Expect(latest(s.readView("ticker", true))).To(HaveLen(6), "before any compaction the compacted view is the log")
		st := s.compact("ticker")
		Expect(st.Generation).To(Equal(uint64(1)))
		Expect(st.Keys).To(Equal(3))
		Expect(st.Read).To(Equal(uint64(6)))
		Expect(st.Kept).To(Equal(uint64(3)))
		view := s.readView("ticker", true)
		Expect(latest(view)).To(Equal([]string{"AAPL=3", "GOOG=2", "MSFT=1"}), "MSFT's first message is kept: it is its only one")
		// Message ids do not change.
		ids := map[string]uint64{}
		for _, m := range view {
			ids[string(m.Key)] = m.Offset
		}
		Expect(ids).To(Equal(map[string]uint64{"AAPL": res[4].Offset, "GOOG": res[5].Offset, "MSFT": res[3].Offset}))
		// A caught-up reader of the whole log still sees every message.
		Expect(s.readView("ticker", false)).To(HaveLen(6))
		// Messages after the horizon follow the compacted view.
		s.produceBatch("ticker", keyed("AAPL", "4"))
		Expect(latest(s.readView("ticker", true))).To(Equal([]string{"AAPL=3", "AAPL=4", "GOOG=2", "MSFT=1"}))
		// A second compaction reads the first's output and the rest.
		st = s.compact("ticker")
		Expect(st.Generation).To(Equal(uint64(2)))
		Expect(st.Read).To(Equal(uint64(4)), "the first compaction's 3 kept records and the 1 after its horizon")
		Expect(latest(s.readView("ticker", true))).To(Equal([]string{"AAPL=4", "GOOG=2", "MSFT=1"}))
		// And after a restart.
		s.restart()
		Expect(latest(s.readView("ticker", true))).To(Equal([]string{"AAPL=4", "GOOG=2", "MSFT=1"}))
	})

	It("compacts an empty topic", func() {
		create("empty", "")
		st := s.compact("empty")
		Expect(st.Generation).To(Equal(uint64(1)))
		Expect(st.Kept).To(BeZero())
		Expect(s.readView("empty", true)).To(BeEmpty())
	})

	It("drops unkeyed messages unless asked to keep them, and deletes keys by empty payloads", func() {
		create("deletes", "")
		// Add and delete in one batch; delete across batches; delete then
		// re-add.
		s.produceBatch("deletes", keyed("a", "1", "a", "", "", "unkeyed", "b", "1", "c", "1", "c", ""))
		s.produceBatch("deletes", keyed("b", "", "c", "2", "d", "1"))
		s.compact("deletes")
		// Tombstones younger than delete_retention (24 h) stay, so that a
		// reader that saw a value learns it is gone.
		Expect(latest(s.readView("deletes", true))).To(Equal([]string{"a=", "b=", "c=2", "d=1"}))
		s.admin(api.AdminTopicPolicies, api.TopicPoliciesRequest{Topic: "topic://public/default/deletes",
			Policies: &api.Policies{DeleteRetentionMs: new(int64), CompactionRetainNullKey: ptrTo(true)}}, nil)
		s.produceBatch("deletes", keyed("", "unkeyed-2"))
		s.compact("deletes")
		Expect(latest(s.readView("deletes", true))).To(Equal([]string{"=unkeyed-2", "c=2", "d=1"}),
			"past delete_retention tombstones go; unkeyed messages stay once retained (the first went with the first compaction)")
	})

	It("keeps, across a split and a merge between two compactions, only a key's latest value, wherever in the DAG it is", func() {
		create("dag", "")
		s.produceBatch("dag", keyed("k", "root", "gone", "root", "stay", "root"))
		s.compact("dag")
		zero := uint64(0)
		s.admin(api.AdminTopicSplit, api.SplitRequest{Topic: "topic://public/default/dag", Segment: &zero}, nil)
		s.produceBatch("dag", keyed("k", "child", "gone", ""))
		d := s.describe("dag")
		var children []uint64
		for _, seg := range active(d) {
			children = append(children, seg.ID)
		}
		Expect(children).To(HaveLen(2))
		s.admin(api.AdminTopicMerge, api.MergeRequest{Topic: "topic://public/default/dag", Segments: children}, nil)
		s.produceBatch("dag", keyed("k", "grandchild"))
		s.compact("dag")
		Expect(latest(s.readView("dag", true))).To(Equal([]string{"gone=", "k=grandchild", "stay=root"}),
			"k's values in the root and a child are obscured by the grandchild's; the child's tombstone deletes the root's value")
	})

	It("gives a read_compacted stream subscription and a compacted checkpoint consumer the final value of every key across the DAG, then the live tail", func() {
		create("feed", "")
		s.produceBatch("feed", keyed("k", "v1", "j", "v1", "x", "v1", "k", "v2"))
		zero := uint64(0)
		s.admin(api.AdminTopicSplit, api.SplitRequest{Topic: "topic://public/default/feed", Segment: &zero}, nil)
		s.produceBatch("feed", keyed("k", "v3", "x", "", "j", "v2", "k", "v4"))
		s.compact("feed")
		want := []string{"j=v2", "k=v4", "x="}
		// Records after the compaction, in the children's live tails.
		s.produceBatch("feed", keyed("k", "v5"))
		wantAll := append(slices.Clone(want), "k=v5")
		slices.Sort(wantAll)

		// A stream subscription that asks for the compacted view.
		s.consume(api.ConsumeJoin, "feed", api.JoinRequest{Subscription: "view", Consumer: "c", ReadCompacted: true})
		var got []api.Message
		Eventually(func() []string {
			msgs := s.fetch("feed", "view", "c", 100)
			got = append(got, msgs...)
			s.ackAll("feed", "view", "c", msgs)
			return latest(got)
		}).WithTimeout(10 * time.Second).WithPolling(10 * time.Millisecond).Should(Equal(wantAll))
		// Per key in order: k's v4 (compacted) before v5 (the tail).
		var ks []string
		for _, m := range got {
			if string(m.Key) == "k" {
				ks = append(ks, string(m.Payload))
			}
		}
		Expect(ks).To(Equal([]string{"v4", "v5"}))
		var stats api.TopicStats
		s.admin(api.AdminTopicStats, api.TopicRequest{Topic: "topic://public/default/feed"}, &stats)
		Expect(stats.Subscriptions).To(ContainElement(SatisfyAll(
			HaveField("Name", "view"), HaveField("ReadCompacted", true), HaveField("Backlog", uint64(0)),
			HaveField("Drained", []uint64{0}))), "the root drained past what compaction removed")
		// Joining it without asking for the compacted view is refused.
		b, _ := json.Marshal(api.JoinRequest{Subscription: "view", Consumer: "d"})
		_, err := s.request(api.ConsumeSubject(api.ConsumeJoin, "public", "default", "feed"), b)
		Expect(api.AsError(err)).To(HaveField("Code", api.CodeInvalidArgument))
		// A subscription that does not ask reads every message.
		s.consume(api.ConsumeJoin, "feed", api.JoinRequest{Subscription: "all", Consumer: "c"})
		var every []api.Message
		Eventually(func() int {
			msgs := s.fetch("feed", "all", "c", 100)
			every = append(every, msgs...)
			s.ackAll("feed", "all", "c", msgs)
			return len(every)
		}).WithTimeout(10 * time.Second).WithPolling(10 * time.Millisecond).Should(Equal(9))

		// A checkpoint consumer reading the compacted view.
		c, err := client.NewCheckpointConsumer(s.nc, "topic://public/default/feed", client.WithReadCompacted(),
			client.WithFetch(100, 1<<20, 50*time.Millisecond))
		Expect(err).NotTo(HaveOccurred())
		defer c.Close()
		var seen []api.Message
		for len(seen) < len(wantAll) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			m, err := c.Next(ctx)
			cancel()
			Expect(err).NotTo(HaveOccurred())
			seen = append(seen, api.Message{Segment: m.ID.Segment, Offset: m.ID.Offset, Key: m.Key, Payload: m.Payload})
		}
		Expect(latest(seen)).To(Equal(wantAll))
		// Its checkpoint is past the root, which it drained though its
		// last offsets were removed by compaction.
		Expect(c.Checkpoint().Drained).To(ContainElement(uint64(0)))
	})
})

func ptrTo[T any](v T) *T { return &v }
