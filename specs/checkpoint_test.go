package specs

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/client"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// keyedLog produces keyed messages whose payload is a sequence number, and
// checks what consumers read against it: per-key order and completeness.
type keyedLog struct {
	s    *server
	uri  string
	keys int
	p    *client.Producer
	sent int
}

// newKeyedLog returns the log of a topic; its producer starts on the first
// produce, once the topic exists.
func newKeyedLog(s *server, uri string, keys int) *keyedLog {
	return &keyedLog{s: s, uri: uri, keys: keys}
}

func (k *keyedLog) key(seq int) string { return fmt.Sprintf("key-%d", seq%k.keys) }

// produce sends n more messages and waits until they are all appended.
func (k *keyedLog) produce(n int) {
	GinkgoHelper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if k.p == nil {
		p, err := client.NewProducer(k.s.nc, k.uri)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() { _ = p.Close(context.Background()) })
		k.p = p
	}
	for range n {
		seq := k.sent
		k.sent++
		Expect(k.p.Send(ctx, api.Record{Key: []byte(k.key(seq)), Payload: []byte(strconv.Itoa(seq))},
			func(_ client.MessageID, err error) { Expect(err).NotTo(HaveOccurred()) })).To(Succeed())
	}
	Expect(k.p.Flush(ctx)).To(Succeed())
}

// orderCheck follows what one logical reader has read.
type orderCheck struct {
	last map[string]int
	seen map[int]bool
}

func newOrderCheck() *orderCheck { return &orderCheck{last: map[string]int{}, seen: map[int]bool{}} }

// read reads n messages with c and checks that every key's sequence
// numbers only grow and nothing comes twice.
func (o *orderCheck) read(c *client.CheckpointConsumer, n int) {
	GinkgoHelper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for range n {
		m, err := c.Next(ctx)
		Expect(err).NotTo(HaveOccurred(), "after %d messages", len(o.seen))
		seq, err := strconv.Atoi(string(m.Payload))
		Expect(err).NotTo(HaveOccurred())
		Expect(o.seen).NotTo(HaveKey(seq), "message %d read twice", seq)
		if prev, ok := o.last[string(m.Key)]; ok {
			Expect(seq).To(BeNumerically(">", prev), "key %s: %d read after %d (id %v)", m.Key, seq, prev, m.ID)
		}
		o.last[string(m.Key)] = seq
		o.seen[seq] = true
	}
}

// nothingMore checks that c has nothing left to read now.
func nothingMore(c *client.CheckpointConsumer) {
	GinkgoHelper()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	m, err := c.Next(ctx)
	Expect(err).To(MatchError(context.DeadlineExceeded), "unexpected message %+v", m)
}

func newCheckpointConsumer(s *server, uri string, opts ...client.CheckpointOption) *client.CheckpointConsumer {
	GinkgoHelper()
	c, err := client.NewCheckpointConsumer(s.nc, uri, append([]client.CheckpointOption{client.WithFetch(64, 1<<20, 100*time.Millisecond)}, opts...)...)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(c.Close)
	return c
}

// Scenarios after apache/pulsar V5CheckpointConsumerOrderingTest.
var _ = Describe("A checkpoint consumer", func() {
	var s *server
	var log *keyedLog
	const topic = "stream"
	const uri = "topic://public/default/" + topic

	BeforeEach(func() {
		s = startServer(GinkgoT().TempDir())
		DeferCleanup(s.stop)
		log = newKeyedLog(s, uri, 16)
	})
	create := func(segments int) {
		s.admin(api.AdminTopicCreate, api.TopicCreateRequest{Topic: uri, Segments: segments, Buckets: 2 * segments}, nil)
	}
	split := func(seg uint64) {
		s.admin(api.AdminTopicSplit, map[string]any{"topic": uri, "segment": seg}, nil)
	}
	merge := func(a, b uint64) {
		s.admin(api.AdminTopicMerge, api.MergeRequest{Topic: uri, Segments: []uint64{a, b}}, nil)
	}

	It("keeps per-key order when a segment splits while it reads behind", func() {
		create(1)
		log.produce(300)
		c, order := newCheckpointConsumer(s, uri), newOrderCheck()
		order.read(c, 100)
		split(0)
		log.produce(300)
		order.read(c, 500)
		nothingMore(c)
	})

	It("keeps per-key order when two segments merge while it reads behind", func() {
		create(2)
		log.produce(300)
		c, order := newCheckpointConsumer(s, uri), newOrderCheck()
		order.read(c, 100)
		merge(0, 1)
		log.produce(300)
		order.read(c, 500)
		nothingMore(c)
	})

	It("follows a split that happens while it is caught up", func() {
		create(1)
		log.produce(200)
		c, order := newCheckpointConsumer(s, uri), newOrderCheck()
		order.read(c, 200)
		nothingMore(c)
		split(0)
		log.produce(200)
		order.read(c, 200)
		nothingMore(c)
		Expect(c.Checkpoint().Drained).To(ContainElement(uint64(0)))
	})

	It("reads every message in per-key order when it starts after two splits", func() {
		create(1)
		log.produce(200)
		split(0) // 0 -> 1, 2
		log.produce(200)
		split(1) // 1 -> 3, 4
		log.produce(200)
		c, order := newCheckpointConsumer(s, uri), newOrderCheck()
		order.read(c, 600)
		nothingMore(c)
	})

	It("resumes from a checkpoint across a split and a merge: before and after add up to every message", func() {
		create(2)
		log.produce(300)
		c, order := newCheckpointConsumer(s, uri), newOrderCheck()
		order.read(c, 120)
		saved := c.Checkpoint().String()
		Expect(c.Close()).To(Succeed())

		split(0) // 0 -> 2, 3
		log.produce(200)
		merge(3, 1) // 3 + 1 -> 4
		log.produce(200)

		cp, err := client.ParseCheckpoint(saved)
		Expect(err).NotTo(HaveOccurred())
		resumed := newCheckpointConsumer(s, uri)
		Expect(resumed.Restore(context.Background(), cp)).To(Succeed())
		order.read(resumed, 580)
		nothingMore(resumed)
		Expect(order.seen).To(HaveLen(700))
	})
})
