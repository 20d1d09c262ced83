package specs

import (
	"fmt"

	"github.com/braidmq/braid/api"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

func segmentsOf(msgs []api.Message) map[uint64]int {
	out := map[uint64]int{}
	for _, m := range msgs {
		out[m.Segment]++
	}
	return out
}

var _ = Describe("A new subscription after two splits", func() {
	var s *server
	const topic = "ledger"
	const uri = "topic://public/default/" + topic

	BeforeEach(func() {
		s = startServer(GinkgoT().TempDir())
		DeferCleanup(s.stop)
	})

	It("reads no descendant while an ancestor has backlog, even across an empty middle segment", func() {
		s.admin(api.AdminTopicCreate, api.TopicCreateRequest{Topic: uri, Segments: 1, Buckets: 1}, nil)
		keyed := func(prefix string, n int) []api.Record {
			recs := make([]api.Record, n)
			for i := range recs {
				recs[i] = api.Record{Key: []byte(fmt.Sprintf("key-%d", i%50)), Payload: []byte(fmt.Sprintf("%s-%d", prefix, i))}
			}
			return recs
		}
		s.produceBatch(topic, keyed("root", 200)) // segment 0 has backlog
		var d api.TopicDescription
		s.admin(api.AdminTopicSplit, map[string]any{"topic": uri, "segment": 0}, &d) // 0 -> 1, 2
		// Segment 1 gets nothing: it is the empty middle generation.
		s.admin(api.AdminTopicSplit, map[string]any{"topic": uri, "segment": 1}, &d) // 1 -> 3, 4
		Expect(d.Epoch).To(BeEquivalentTo(3))
		s.produceBatch(topic, keyed("leaf", 300)) // lands in 2, 3 and 4

		s.consume(api.ConsumeJoin, topic, api.JoinRequest{Subscription: "audit", Consumer: "c1", Start: api.StartEarliest})
		var delivered []api.Message
		for len(delivered) < 200 {
			batch := s.fetch(topic, "audit", "c1", 37)
			Expect(batch).NotTo(BeEmpty(), "segment 0 still has backlog to deliver")
			Expect(segmentsOf(batch)).To(HaveLen(1))
			Expect(segmentsOf(batch)).To(HaveKey(uint64(0)), "only the root may be read while it has backlog")
			delivered = append(delivered, batch...)
		}
		// Everything of segment 0 is delivered but not acknowledged: it is
		// not drained, so neither its children nor the grandchildren behind
		// the empty segment 1 may be read.
		Expect(s.fetch(topic, "audit", "c1", 100)).To(BeEmpty())

		s.ackAll(topic, "audit", "c1", delivered)
		var rest []api.Message
		Eventually(func() int {
			batch := s.fetch(topic, "audit", "c1", 1000)
			rest = append(rest, batch...)
			return len(rest)
		}).Should(Equal(300))
		Expect(segmentsOf(rest)).NotTo(HaveKey(uint64(0)))
		Expect(segmentsOf(rest)).NotTo(HaveKey(uint64(1)))
		// Per key, the root's messages all came before the leaves'.
		seen := map[string]bool{}
		for _, m := range rest {
			seen[string(m.Key)] = true
		}
		Expect(seen).To(HaveLen(50))
	})
})
