package specs

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"sync"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/routing"
	"github.com/braidmq/braid/topology"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// fastPolicies shrink every window so that the specs run in seconds: hot
// above 400 msg/s in, cold at or below 40, measured every 100 ms.
const fastPolicies = `{"split_msg_rate_in":400,"merge_msg_rate_in":40,"evaluation_interval":"100ms",
	"split_window":"500ms","merge_window":"1s","split_cooldown":"500ms","merge_cooldown":"1s",
	"rebucket_cooldown":"500ms","max_segments":8,"split_vs_rebucket_msg_rate":300}`

func (s *server) createElastic(topic, policies string, overrides string) {
	GinkgoHelper()
	var p api.Policies
	Expect(json.Unmarshal([]byte(policies), &p)).To(Succeed())
	if overrides != "" {
		Expect(json.Unmarshal([]byte(overrides), &p)).To(Succeed())
	}
	s.admin(api.AdminTopicCreate, api.TopicCreateRequest{Topic: "topic://public/default/" + topic, Policies: &p}, nil)
}

func (s *server) describe(topic string) api.TopicDescription {
	GinkgoHelper()
	var d api.TopicDescription
	s.admin(api.AdminTopicDescribe, api.TopicRequest{Topic: "topic://public/default/" + topic}, &d)
	return d
}

func active(d api.TopicDescription) []api.SegmentInfo {
	var out []api.SegmentInfo
	for _, s := range d.Segments {
		if s.State == "active" {
			out = append(out, s)
		}
	}
	return out
}

func (s *server) activeCount(topic string) func() int {
	return func() int { return len(active(s.describe(topic))) }
}

func (s *server) epoch(topic string) func() uint64 {
	return func() uint64 { return s.describe(topic).Epoch }
}

// metric returns the value of the first series of /metrics matching
// pattern (a regular expression over the series line), or -1.
func (s *server) metric(pattern string) float64 {
	GinkgoHelper()
	resp, err := http.Get("http://" + s.node.MetricsAddr() + "/metrics")
	Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	Expect(err).NotTo(HaveOccurred())
	m := regexp.MustCompile(`(?m)^` + pattern + ` (\S+)$`).FindSubmatch(body)
	if m == nil {
		return -1
	}
	v, err := strconv.ParseFloat(string(m[1]), 64)
	Expect(err).NotTo(HaveOccurred())
	return v
}

var _ = Describe("An elastic topic", func() {
	var s *server

	BeforeEach(func() {
		s = startServer(GinkgoT().TempDir())
		DeferCleanup(s.stop)
	})

	It("splits the hot range on a load step, and merges back to min segments when the load stops", func() {
		const topic = "step"
		s.createElastic(topic, fastPolicies, "")
		g := s.startGroup(topic, "audit", "c1", "c2")
		Consistently(s.epoch(topic)).WithTimeout(500*time.Millisecond).Should(BeEquivalentTo(1), "idle: nothing changes")

		load := s.startLoad(topic, keys(200), 2000) // 5x the split threshold
		Eventually(s.activeCount(topic)).WithTimeout(20*time.Second).Should(BeNumerically(">=", 4), "split for the load")
		// Counted when the change is announced, a moment after the new
		// layout routes appends.
		Eventually(func() float64 {
			return s.metric(`braid_scaling_operations_total\{namespace="default",op="split",reason="msg_rate_in",tenant="public",topic="step"\}`)
		}).WithTimeout(5 * time.Second).Should(BeNumerically(">=", 1))
		Expect(s.activeCount(topic)()).To(BeNumerically("<=", 8), "max segments")

		load.setRate(0)
		Eventually(s.activeCount(topic)).WithTimeout(30*time.Second).Should(Equal(1), "merged back to min segments")
		Expect(s.metric(`braid_scaling_operations_total\{namespace="default",op="merge",reason="idle",tenant="public",topic="step"\}`)).
			To(BeNumerically(">=", 1))
		drainAndCheck(load, g)
	})

	It("does not flap while the load oscillates around the split threshold", func() {
		const topic = "wobble"
		s.createElastic(topic, fastPolicies, "")
		g := s.startGroup(topic, "audit", "c1")
		load := s.startLoad(topic, keys(100), 600)
		var wg sync.WaitGroup
		quit := make(chan struct{})
		wg.Add(1)
		go func() { // 1.5x and 0.25x the threshold, 200 ms each: never hot for a split window
			defer wg.Done()
			for high := false; ; high = !high {
				select {
				case <-quit:
					return
				case <-time.After(200 * time.Millisecond):
				}
				load.setRate(map[bool]int{true: 600, false: 100}[high])
			}
		}()
		Consistently(s.epoch(topic)).WithTimeout(4 * time.Second).WithPolling(100 * time.Millisecond).Should(BeEquivalentTo(1))
		close(quit)
		wg.Wait()
		drainAndCheck(load, g)
	})

	It("splits a skewed key distribution where the load is", func() {
		const topic = "skew"
		const hotEnd = uint64(1) << 60 // the load lives in the first sixteenth of the space
		var hot []string
		for i := 0; len(hot) < 100; i++ {
			if k := fmt.Sprintf("key-%d", i); routing.KeyHash([]byte(k)) < hotEnd {
				hot = append(hot, k)
			}
		}
		s.createElastic(topic, fastPolicies, "")
		g := s.startGroup(topic, "audit", "c1")
		load := s.startLoad(topic, hot, 1000)
		Eventually(s.epoch(topic)).WithTimeout(20 * time.Second).Should(BeNumerically(">=", 2))
		d := s.describe(topic)
		root := d.Segments[0]
		Expect(root.State).To(Equal("sealed"))
		inside := 0
		for _, child := range root.Children {
			hi, err := strconv.ParseUint(d.Segments[child].Range[1][2:], 16, 64)
			Expect(err).NotTo(HaveOccurred())
			if hi < hotEnd {
				inside++
			}
		}
		Expect(inside).To(BeNumerically(">=", 2), "split points inside the hot range, not at the midpoint: %+v", d.Segments)
		drainAndCheck(load, g)
	})

	It("does not split for a single hot key, and reports it", func() {
		const topic = "hotkey"
		s.createElastic(topic, fastPolicies, "")
		g := s.startGroup(topic, "audit", "c1")
		weighted := keys(10)
		for range 140 {
			weighted = append(weighted, "the-hot-key") // 14 of 15 records
		}
		load := s.startLoad(topic, weighted, 750)
		Eventually(func() float64 {
			return s.metric(`braid_segment_hot_key_ratio\{namespace="default",segment="0",tenant="public",topic="hotkey"\}`)
		}).WithTimeout(10 * time.Second).Should(BeNumerically(">", 0.5))
		Consistently(s.epoch(topic)).WithTimeout(2 * time.Second).Should(BeEquivalentTo(1))
		Expect(s.metric(`braid_scaling_suppressed_total\{namespace="default",op="split",reason="hot_key",tenant="public",topic="hotkey"\}`)).
			To(BeNumerically(">", 0))
		// topic.stats names the key itself, with its share of the appends.
		var st api.TopicStats
		s.admin(api.AdminTopicStats, api.TopicRequest{Topic: "topic://public/default/" + topic}, &st)
		Expect(st.Load).To(HaveLen(1))
		Expect(st.Load[0].Segment).To(BeEquivalentTo(0))
		Expect(st.Load[0].HotKey).To(Equal("the-hot-key"))
		Expect(st.Load[0].HotKeyHash).To(Equal(topology.FormatHash(routing.KeyHash([]byte("the-hot-key")))))
		Expect(st.Load[0].HotKeyShare).To(BeNumerically(">", 0.5))
		Expect(st.Load[0].MsgInRate).To(BeNumerically(">", 100))
		drainAndCheck(load, g)
	})

	It("rebuckets a quiet one-segment topic when consumers outnumber its buckets", func() {
		const topic = "quiet"
		s.createElastic(topic, fastPolicies, "")
		load := s.startLoad(topic, keys(50), 50) // under the split-vs-rebucket rate
		g := s.startGroup(topic, "audit", "c1", "c2", "c3", "c4", "c5", "c6")
		Eventually(func() []int {
			var buckets []int
			for _, seg := range active(s.describe(topic)) {
				buckets = append(buckets, seg.Buckets)
			}
			return buckets
		}).WithTimeout(15*time.Second).Should(Equal([]int{6}), "one segment of 6 buckets")
		Expect(s.metric(`braid_scaling_operations_total\{namespace="default",op="rebucket",reason="consumers",tenant="public",topic="quiet"\}`)).To(Equal(1.0))
		Eventually(g.idle).WithTimeout(15*time.Second).Should(BeEmpty(), "every consumer has a unit once the predecessor drained")
		drainAndCheck(load, g)
	})

	It("splits a busy one-segment topic when consumers outnumber its buckets", func() {
		const topic = "busy"
		s.createElastic(topic, fastPolicies, `{"split_msg_rate_in":100000}`) // no split for load alone
		load := s.startLoad(topic, keys(100), 800)                           // over the split-vs-rebucket rate
		g := s.startGroup(topic, "audit", "c1", "c2", "c3", "c4", "c5", "c6")
		Eventually(s.activeCount(topic)).WithTimeout(15*time.Second).Should(Equal(2), "split for the consumers")
		Expect(s.metric(`braid_scaling_operations_total\{namespace="default",op="split",reason="consumers",tenant="public",topic="busy"\}`)).To(Equal(1.0))
		Eventually(g.idle).WithTimeout(15 * time.Second).Should(BeEmpty())
		drainAndCheck(load, g)
	})
})
