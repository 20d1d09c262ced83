package specs

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// Plain clients: nothing of Braid's client code, only nats.go requests as
// any NATS client in any language makes them.

// plainProducer pipelines keyed single-message produce requests on its own
// connection: up to window in flight, no retries, no Braid-Epoch.
type plainProducer struct {
	id       int
	nc       *nats.Conn
	keys     int
	total    int
	window   int
	rate     int // messages per second, paced
	sent     atomic.Int64
	ok       atomic.Int64
	refused  atomic.Int64
	firstErr atomic.Pointer[string]
	done     chan struct{}
	quit     chan struct{} // closed at cleanup: stop sending
}

func (p *plainProducer) key(k int) string { return fmt.Sprintf("p%d-k%d", p.id, k) }

func (p *plainProducer) run(subject string) {
	defer GinkgoRecover()
	defer close(p.done)
	slots := make(chan struct{}, p.window)
	inbox := nats.NewInbox()
	sub, err := p.nc.Subscribe(inbox+".*", func(m *nats.Msg) {
		if code := m.Header.Get(micro.ErrorCodeHeader); code != "" {
			p.refused.Add(1)
			s := code + " " + m.Header.Get(micro.ErrorHeader)
			p.firstErr.CompareAndSwap(nil, &s)
		} else {
			p.ok.Add(1)
		}
		<-slots
	})
	Expect(err).NotTo(HaveOccurred())
	defer sub.Unsubscribe()
	Expect(sub.SetPendingLimits(-1, -1)).To(Succeed())
	seqs := make([]int, p.keys)
	headers := make([]nats.Header, p.keys)
	for k := range headers {
		headers[k] = nats.Header{api.HeaderKey: []string{p.key(k)}}
	}
	start := time.Now()
	for i := range p.total {
		if i%50 == 0 { // pace the load, so that the layout changes fall inside it
			if ahead := time.Until(start.Add(time.Duration(i) * time.Second / time.Duration(p.rate))); ahead > 0 {
				time.Sleep(ahead)
			}
		}
		select {
		case slots <- struct{}{}:
		case <-p.quit:
			return
		}
		k := i % p.keys
		m := &nats.Msg{Subject: subject, Reply: inbox + "." + strconv.Itoa(i), Header: headers[k],
			Data: fmt.Appendf(nil, "%d:%d:%d", p.id, k, seqs[k])}
		seqs[k]++
		Expect(p.nc.PublishMsg(m)).To(Succeed())
		p.sent.Add(1)
	}
	for range p.window { // every reply in
		select {
		case slots <- struct{}{}:
		case <-p.quit:
			return
		}
	}
}

// plainConsumer reads a stream subscription over the JSON fetch protocol
// and acknowledges each fetch cumulatively per unit.
type plainConsumer struct {
	s        *server
	topic    string
	sub      string
	name     string
	record   func(payload []byte)
	stop     chan struct{}
	done     chan struct{}
	fetchErr atomic.Pointer[string]
}

func (c *plainConsumer) request(verb string, body any) ([]byte, error) {
	b, err := json.Marshal(body)
	Expect(err).NotTo(HaveOccurred())
	return c.s.request(api.ConsumeSubject(verb, "public", "default", c.topic), b)
}

func (c *plainConsumer) run() {
	defer GinkgoRecover()
	defer close(c.done)
	_, err := c.request(api.ConsumeJoin, api.JoinRequest{Subscription: c.sub, Consumer: c.name})
	Expect(err).NotTo(HaveOccurred())
	for {
		select {
		case <-c.stop:
			_, _ = c.request(api.ConsumeLeave, api.LeaveRequest{Subscription: c.sub, Consumer: c.name})
			return
		default:
		}
		data, err := c.request(api.ConsumeFetch, api.FetchRequest{Subscription: c.sub, Consumer: c.name, Max: 1000, Wait: "200ms", Format: "json"})
		if err != nil {
			s := err.Error()
			c.fetchErr.CompareAndSwap(nil, &s)
			continue
		}
		var reply api.FetchReplyJSON
		Expect(json.Unmarshal(data, &reply)).To(Succeed())
		if len(reply.Messages) == 0 {
			continue
		}
		last := map[[2]uint64]uint64{}
		for _, m := range reply.Messages {
			c.record(m.Payload)
			last[[2]uint64{m.Segment, uint64(m.Bucket)}] = m.Offset
		}
		ack := api.AckRequest{Subscription: c.sub, Consumer: c.name}
		for u, off := range last {
			ack.Acks = append(ack.Acks, api.Position{Segment: u[0], Bucket: int(u[1]), Offset: off})
		}
		_, err = c.request(api.ConsumeAck, ack)
		Expect(err).NotTo(HaveOccurred())
	}
}

// keyOrder checks that every message is received once, each key's in the
// order it was sent.
type keyOrder struct {
	mu         sync.Mutex
	next       map[string]int // per producer:key, the sequence expected next
	received   int
	duplicates int
	reordered  int
	firstBad   string
}

func (o *keyOrder) record(payload []byte) {
	parts := strings.Split(string(payload), ":")
	Expect(parts).To(HaveLen(3), "payload %q", payload)
	seq, err := strconv.Atoi(parts[2])
	Expect(err).NotTo(HaveOccurred())
	key := parts[0] + ":" + parts[1]
	o.mu.Lock()
	defer o.mu.Unlock()
	want := o.next[key]
	switch {
	case seq == want:
		o.next[key] = seq + 1
		o.received++
	case seq < want:
		o.duplicates++
		if o.firstBad == "" {
			o.firstBad = fmt.Sprintf("key %s: seq %d again after %d", key, seq, want-1)
		}
	default:
		o.reordered++
		if o.firstBad == "" {
			o.firstBad = fmt.Sprintf("key %s: seq %d before %d", key, seq, want)
		}
		o.next[key] = seq + 1
	}
}

func (o *keyOrder) counts() (received, duplicates, reordered int, firstBad string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.received, o.duplicates, o.reordered, o.firstBad
}

var _ = Describe("Plain NATS clients", func() {
	It("produce pipelined keyed messages across two splits, a merge, a rebucket and an automatic split: none refused, every one read once, per key in send order", func() {
		s := startServer(GinkgoT().TempDir())
		DeferCleanup(s.stop)
		const (
			topic     = "plain"
			producers = 4
			perProd   = 50_000
			total     = producers * perProd
		)
		uri := "topic://public/default/" + topic
		// Scaling is off until the automatic split is wanted; merges never
		// come on their own (merge_window of an hour).
		s.createElastic(topic, `{"auto_scale":false,"split_msg_rate_in":1500,"evaluation_interval":"100ms","split_window":"300ms",
			"split_cooldown":"200ms","merge_window":"1h","merge_cooldown":"1h","rebucket_cooldown":"1h","max_segments":16}`, "")
		split := func(seg uint64) { s.admin(api.AdminTopicSplit, api.SplitRequest{Topic: uri, Segment: &seg}, nil) }
		split(0) // two segments to start with

		order := &keyOrder{next: map[string]int{}}
		var consumers []*plainConsumer
		for i := range 2 {
			c := &plainConsumer{s: s, topic: topic, sub: "plain-audit", name: fmt.Sprintf("c%d", i), record: order.record,
				stop: make(chan struct{}), done: make(chan struct{})}
			consumers = append(consumers, c)
			go c.run()
		}
		var prods []*plainProducer
		for i := range producers {
			nc := connect(s.node.ClientURL())
			DeferCleanup(nc.Close)
			// Few keys, so that a key has several requests in flight while a
			// layout change goes on: the case a plain client gets wrong
			// if the server re-routes a sealed segment's appends carelessly.
			p := &plainProducer{id: i, nc: nc, keys: 16, total: perProd, window: 256, rate: 5000, done: make(chan struct{}), quit: make(chan struct{})}
			DeferCleanup(func() { close(p.quit); <-p.done })
			prods = append(prods, p)
			go p.run(api.TopicSubject(api.ProducePrefix, "public", "default", topic))
		}
		sentPct := func() int {
			n := int64(0)
			for _, p := range prods {
				n += p.sent.Load()
			}
			return int(n * 100 / total)
		}
		at := func(pct int) {
			Eventually(sentPct).WithTimeout(60 * time.Second).WithPolling(5 * time.Millisecond).Should(BeNumerically(">=", pct))
		}

		at(10)
		split(widestActive(s.describe(topic)))
		at(25)
		split(widestActive(s.describe(topic)))
		at(40)
		a, b := middlePair(s.describe(topic))
		s.admin(api.AdminTopicMerge, api.MergeRequest{Topic: uri, Segments: []uint64{a, b}}, nil)
		at(55)
		wide := widestActive(s.describe(topic))
		s.admin(api.AdminTopicRebucket, api.RebucketRequest{Topic: uri, Segment: &wide, Buckets: 3}, nil)
		at(65)
		before := len(active(s.describe(topic)))
		on, most := true, before+1 // one automatic split, no more
		s.admin(api.AdminTopicPolicies, api.TopicPoliciesRequest{Topic: uri, Policies: &api.Policies{AutoScale: &on, MaxSegments: &most}}, nil)
		Eventually(s.activeCount(topic)).WithTimeout(30*time.Second).Should(Equal(before+1), "the automatic split")
		Expect(s.metric(`braid_scaling_operations_total\{namespace="default",op="split",reason="msg_rate_in",tenant="public",topic="plain"\}`)).To(Equal(1.0))
		Expect(sentPct()).To(BeNumerically("<", 100), "the automatic split came while the producers were sending")

		for _, p := range prods {
			Eventually(p.done).WithTimeout(120 * time.Second).Should(BeClosed())
			first := ""
			if e := p.firstErr.Load(); e != nil {
				first = *e
			}
			Expect(p.refused.Load()).To(BeZero(), "producer %d: refused requests, the first: %s", p.id, first)
			Expect(p.ok.Load()).To(BeEquivalentTo(perProd), "producer %d: answered requests", p.id)
		}
		Expect(s.metric(`braid_produce_errors_total\{code="SEGMENT_SEALED"\}`)).To(BeNumerically("<=", 0))

		Eventually(func() int { r, _, _, _ := order.counts(); return r }).WithTimeout(120*time.Second).Should(Equal(total), "every message read")
		Consistently(func() int { _, d, _, _ := order.counts(); return d }).WithTimeout(time.Second).Should(BeZero(), "read twice")
		for _, c := range consumers {
			close(c.stop)
			Eventually(c.done).WithTimeout(10 * time.Second).Should(BeClosed())
		}
		received, duplicates, reordered, firstBad := order.counts()
		Expect(duplicates+reordered).To(BeZero(), "%d read, %d duplicates, %d out of key order; first: %s", received, duplicates, reordered, firstBad)
		layout := s.describe(topic)
		Expect(layout.Epoch).To(BeNumerically(">=", 7), "1 + 5 changes + the automatic split")
		GinkgoWriter.Printf("%d messages, %d segments in the DAG, %v handed over by sealed segments\n", received, len(layout.Segments),
			s.metric(`braid_produce_handed_over_total`))
	})
})
