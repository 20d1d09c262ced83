package specs

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/client"
	"github.com/nats-io/nats.go"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// queueLedger records what the consumers of a queue subscription did.
type queueLedger struct {
	mu         sync.Mutex
	acked      map[int]int      // seq -> acks
	deliveries map[int][]uint32 // seq -> the Deliveries of each time it was seen
	nacked     map[int]int
}

func newQueueLedger() *queueLedger {
	return &queueLedger{acked: map[int]int{}, deliveries: map[int][]uint32{}, nacked: map[int]int{}}
}

func (l *queueLedger) ackedCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acked)
}

// work reads with c until ctx ends: it nacks with probability nackRate
// (and always the "poison" messages, seq%50 == 0), acks the rest.
func (l *queueLedger) work(ctx context.Context, c *client.QueueConsumer, rng *rand.Rand, nackRate float64) {
	for {
		m, err := c.Next(ctx)
		if err != nil {
			return
		}
		seq, _ := strconv.Atoi(string(m.Payload))
		l.mu.Lock()
		l.deliveries[seq] = append(l.deliveries[seq], m.Deliveries)
		nack := seq%50 == 0 || rng.Float64() < nackRate
		if nack {
			l.nacked[seq]++
		} else {
			l.acked[seq]++
		}
		l.mu.Unlock()
		if nack {
			m.Nack()
		} else {
			m.Ack()
		}
	}
}

func queueConsumer(nc *nats.Conn, uri, name string, opts ...client.QueueOption) *client.QueueConsumer {
	GinkgoHelper()
	base := []client.QueueOption{client.WithConsumerName(name), client.WithFetch(32, 1<<20, 100*time.Millisecond),
		client.WithAckInterval(5 * time.Millisecond), client.WithSessionTimeout(500 * time.Millisecond)}
	c, err := client.NewQueueConsumer(nc, uri, "workers", append(base, opts...)...)
	Expect(err).NotTo(HaveOccurred())
	return c
}

// deadLetters reads the dead-letter topic to its end and returns the
// messages by origin sequence number, checking their headers.
func deadLetters(s *server, uri string, maxDeliveries int) map[int]bool {
	GinkgoHelper()
	c, err := client.NewCheckpointConsumer(s.nc, uri+"-dlq", client.WithFetch(256, 1<<20, 50*time.Millisecond))
	Expect(err).NotTo(HaveOccurred())
	defer c.Close()
	out := map[int]bool{}
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		m, err := c.Next(ctx)
		cancel()
		if err != nil {
			return out
		}
		seq, _ := strconv.Atoi(string(m.Payload))
		hs := map[string]string{}
		for _, h := range m.Headers {
			hs[h.Name] = string(h.Value)
		}
		Expect(hs).To(HaveKeyWithValue(api.HeaderDLQOrigin, uri))
		Expect(hs).To(HaveKeyWithValue(api.HeaderDLQSubscription, "workers"))
		Expect(hs).To(HaveKeyWithValue(api.HeaderDLQReason, api.DLQReasonMaxDeliveries))
		Expect(hs).To(HaveKeyWithValue(api.HeaderDLQDeliveries, strconv.Itoa(maxDeliveries)))
		Expect(hs).To(HaveKey(api.HeaderDLQPosition))
		Expect(out).NotTo(HaveKey(seq), "dead-lettered twice")
		out[seq] = true
	}
}

var _ = Describe("Queue consumers", func() {
	var s *server
	var log *keyedLog
	const topic = "jobs"
	const uri = "topic://public/default/" + topic
	const maxDeliveries = 3

	BeforeEach(func() {
		s = startServer(GinkgoT().TempDir())
		DeferCleanup(func() { s.stop() })
		s.admin(api.AdminTopicCreate, api.TopicCreateRequest{Topic: uri, Segments: 2, Buckets: 4}, nil)
		log = newKeyedLog(s, uri, 32)
	})

	It("ack or dead-letter every message, with random nacks and a consumer killed mid-way", func() {
		const total = 1500
		log.produce(total)
		ledger := newQueueLedger()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		policy := []client.QueueOption{client.WithMaxDeliveries(maxDeliveries), client.WithNackDelay(5 * time.Millisecond),
			client.WithNackBackoff(2, 50*time.Millisecond), client.WithAckTimeout(10 * time.Second)}
		// The victim has a connection of its own: it takes messages and
		// answers none, then its connection is cut, which kills it without a
		// leave, holding what it fetched.
		victimConn, err := nats.Connect(s.node.ClientURL())
		Expect(err).NotTo(HaveOccurred())
		victim := queueConsumer(victimConn, uri, "victim", policy...)
		held := 0
		for held < 40 {
			_, err := victim.Next(ctx)
			Expect(err).NotTo(HaveOccurred())
			held++
		}
		var wg sync.WaitGroup
		for i := range 2 {
			c := queueConsumer(s.nc, uri, "steady-"+strconv.Itoa(i), policy...)
			DeferCleanup(func() { _ = c.Close(context.Background()) })
			wg.Add(1)
			go func() {
				defer wg.Done()
				ledger.work(ctx, c, rand.New(rand.NewPCG(uint64(i), 7)), 0.2)
			}()
		}
		Eventually(ledger.ackedCount).WithTimeout(30 * time.Second).Should(BeNumerically(">=", total/4))
		victimConn.Close()

		expectDead := map[int]bool{}
		for seq := 0; seq < total; seq += 50 {
			expectDead[seq] = true
		}
		var st api.TopicStats
		Eventually(func() uint64 {
			s.admin(api.AdminTopicStats, api.TopicRequest{Topic: uri}, &st)
			return st.Subscriptions[0].Backlog
		}).WithTimeout(30 * time.Second).Should(BeZero())
		cancel()
		wg.Wait()

		dead := deadLetters(s, uri, maxDeliveries)
		ledger.mu.Lock()
		defer ledger.mu.Unlock()
		for seq := range total {
			Expect(ledger.acked[seq] > 0 || dead[seq]).To(BeTrue(), "message %d neither acked nor dead-lettered", seq)
		}
		for seq := range dead {
			Expect(ledger.acked).NotTo(HaveKey(seq), "message %d acked and dead-lettered", seq)
		}
		for seq := range expectDead {
			Expect(dead).To(HaveKey(seq), "a message nacked at every delivery")
		}
		for seq := range dead {
			// Dead letters are the poison messages and the unlucky ones
			// nacked at each of their deliveries (the victim's deliveries,
			// never answered, count too).
			Expect(len(ledger.deliveries[seq])).To(BeNumerically("<=", maxDeliveries))
			Expect(ledger.nacked[seq]).To(Equal(len(ledger.deliveries[seq])), "message %d was dead-lettered though acked", seq)
		}
		// Delivery counts: each delivery of a message seen by the
		// application counts one more than the one before it (a delivery
		// lost with the victim leaves a gap, never a repeat), and none goes
		// past the max.
		for seq, ds := range ledger.deliveries {
			for i, d := range ds {
				Expect(d).To(BeNumerically("<=", maxDeliveries), "message %d", seq)
				if i > 0 {
					Expect(d).To(BeNumerically(">", ds[i-1]), "message %d deliveries %v", seq, ds)
				}
			}
		}
	})

	It("keeps acks, nacks and delivery counts across a server restart", func() {
		const total = 400
		log.produce(total)
		// One message per fetch: what the consumer fetched is what Next returned.
		c := queueConsumer(s.nc, uri, "before", client.WithAckTimeout(0), client.WithFetch(1, 1<<20, 100*time.Millisecond))
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		acked, delayed, held := map[int]bool{}, map[int]bool{}, map[int]bool{}
		for range 300 {
			m, err := c.Next(ctx)
			Expect(err).NotTo(HaveOccurred())
			seq, _ := strconv.Atoi(string(m.Payload))
			switch seq % 3 {
			case 0:
				m.Ack()
				acked[seq] = true
			case 1:
				m.NackAfter(time.Hour) // not due again within this spec
				delayed[seq] = true
			default:
				held[seq] = true // delivered, never answered
			}
		}
		Expect(c.FlushAcks(ctx)).To(Succeed())
		s.nc.Close()
		Expect(s.node.Close()).To(Succeed())
		s = startServer(s.dir)

		after := queueConsumer(s.nc, uri, "after")
		DeferCleanup(func() { _ = after.Close(context.Background()) })
		seen := map[int]bool{}
		for len(seen) < total-len(acked)-len(delayed) {
			m, err := after.Next(ctx)
			Expect(err).NotTo(HaveOccurred())
			seq, _ := strconv.Atoi(string(m.Payload))
			Expect(acked).NotTo(HaveKey(seq), "an acknowledged message came back")
			Expect(delayed).NotTo(HaveKey(seq), "a message nacked for an hour came back")
			Expect(seen).NotTo(HaveKey(seq))
			seen[seq] = true
			if held[seq] {
				Expect(m.Deliveries).To(BeEquivalentTo(2), "message %d was delivered once before the restart", seq)
			} else {
				Expect(m.Deliveries).To(BeEquivalentTo(1), "message %d was never delivered", seq)
			}
			m.Ack()
		}
		Expect(after.FlushAcks(ctx)).To(Succeed())
		var st api.TopicStats
		s.admin(api.AdminTopicStats, api.TopicRequest{Topic: uri}, &st)
		Expect(st.Subscriptions[0].Backlog).To(BeEquivalentTo(len(delayed)))
	})
})
