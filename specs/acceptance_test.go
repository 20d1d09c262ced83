package specs

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/client"
	"github.com/braidmq/braid/topology"
	"github.com/nats-io/nats.go"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// The acceptance test of the issue: "4 producers write 200,000 keyed
// messages over 1,000 keys while the topic is split twice and merged once by
// hand; one subscription with 3 stream consumers receives every acknowledged
// message exactly once, per-key in production order", and a second run that
// restarts the server in the middle.
//
// Each key has exactly one writer, so "production order" of a key is the
// order its producer called Send: producer p owns keys
// [p*250, p*250+250) and sends its share round robin over them; message i
// of producer p is key p*250 + i%250 with per-key sequence number i/250,
// both encoded in the payload.

const (
	elasticProducers       = 4
	elasticKeysPerProducer = 250
	elasticKeys            = elasticProducers * elasticKeysPerProducer
	elasticConsumers       = 3
	elasticSubscription    = "acceptance"
	// elasticMessages is the count, with and without -race: on 2
	// shared cores the first spec takes 1-2s (4-11s with -race), the
	// restart run 1-6s (6-19s with -race).
	elasticMessages    = 200_000
	elasticPerProducer = elasticMessages / elasticProducers
	elasticPerKey      = elasticPerProducer / elasticKeysPerProducer
)

// The layout changes happen once these percentages of all sends are
// queued; the restart run pauses each producer at restartAt percent of its
// own share.
const (
	firstSplitAt  = 20
	secondSplitAt = 45
	restartAt     = 50
	mergeAt       = 70
)

func elasticKey(k int) []byte { return fmt.Appendf(nil, "key-%04d", k) }

func elasticPayload(k, seq int) []byte {
	return binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(nil, uint32(k)), uint32(seq))
}

func decodeElastic(m *client.Message) (k, seq int, err error) {
	if len(m.Payload) != 8 {
		return 0, 0, fmt.Errorf("message %v: payload of %d bytes, want 8", m.ID, len(m.Payload))
	}
	k, seq = int(binary.BigEndian.Uint32(m.Payload)), int(binary.BigEndian.Uint32(m.Payload[4:]))
	if k >= elasticKeys || seq >= elasticPerKey {
		return 0, 0, fmt.Errorf("message %v: key %d seq %d out of the workload", m.ID, k, seq)
	}
	if string(m.Key) != string(elasticKey(k)) {
		return 0, 0, fmt.Errorf("message %v: key %q carries the payload of key %d", m.ID, m.Key, k)
	}
	return k, seq, nil
}

// sendOutcome is how the server answered one send.
type sendOutcome uint8

const (
	outcomeUnknown sendOutcome = iota // the callback has not run yet
	outcomeAcked                      // the callback got a message id
	outcomeFailed                     // the callback got an error: not acknowledged
)

// keySeq is one message as the workload names it.
type keySeq struct{ key, seq uint32 }

// ledger is the spec's account of the workload: how the server answered
// each send, and what the consumers delivered to the application, checked
// as it is delivered.
type ledger struct {
	// strict: every send must be acknowledged, so a delivery that skips a
	// sequence number is reported at once. Otherwise a skipped number is
	// judged at the end (it must be a failed send), because a failed send's
	// callback may run after the next message of its key is delivered.
	strict bool

	mu sync.Mutex
	// Guarded by mu:
	outcome   [][]sendOutcome // [key][seq]
	delivered [][]bool        // [key][seq]: returned by some consumer's Next
	// firstID[k][seq] is where the first delivery came from, and firstBy
	// which consumer it went to: a violation names both deliveries.
	firstID [][]client.MessageID
	firstBy [][]int8
	// next[k] is one past the highest sequence number of key k delivered.
	// Deliveries of one key are serialized by the server (a key's unit moves
	// only after its owner acknowledged everything, and we ack after
	// recording), so checking against it at delivery time checks the order
	// across consumers and handoffs.
	next     []int
	arrivals [][]keySeq // per consumer, in delivery order
	// pending counts acknowledged sends not delivered yet.
	pending                 int
	acked, failed, delivers int
	failedDelivered         int // failed sends that were appended after all
	deliveredAfterRestart   int
	restarted               bool
	// violations lists the first broken promises; the counts are by kind.
	violations                            []string
	violationCount                        int
	duplicates, reorders, gaps, malformed int
	sendErrors                            []error // first few producer errors
	consumerErrs                          []int   // per consumer: Next errors, retried
	lastConsumerErr                       []error
}

func newLedger(strict bool) *ledger {
	l := &ledger{
		strict:          strict,
		outcome:         make([][]sendOutcome, elasticKeys),
		delivered:       make([][]bool, elasticKeys),
		firstID:         make([][]client.MessageID, elasticKeys),
		firstBy:         make([][]int8, elasticKeys),
		next:            make([]int, elasticKeys),
		arrivals:        make([][]keySeq, elasticConsumers),
		consumerErrs:    make([]int, elasticConsumers),
		lastConsumerErr: make([]error, elasticConsumers),
	}
	for k := range elasticKeys {
		l.outcome[k] = make([]sendOutcome, elasticPerKey)
		l.delivered[k] = make([]bool, elasticPerKey)
		l.firstID[k] = make([]client.MessageID, elasticPerKey)
		l.firstBy[k] = make([]int8, elasticPerKey)
	}
	return l
}

// violate records a broken promise; mu must be held.
func (l *ledger) violate(format string, args ...any) {
	l.violationCount++
	if len(l.violations) < 20 {
		l.violations = append(l.violations, fmt.Sprintf(format, args...))
	}
}

// sent records the outcome of a send (its callback).
func (l *ledger) sent(k, seq int, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.outcome[k][seq] = outcomeFailed
		l.failed++
		if len(l.sendErrors) < 10 {
			l.sendErrors = append(l.sendErrors, fmt.Errorf("key %d seq %d: %w", k, seq, err))
		}
		if l.delivered[k][seq] {
			l.failedDelivered++
		}
		return
	}
	l.outcome[k][seq] = outcomeAcked
	l.acked++
	if !l.delivered[k][seq] {
		l.pending++
	}
}

// sendError records an error of Send itself (the record was not queued).
func (l *ledger) sendError(producer int, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sendErrors = append(l.sendErrors, fmt.Errorf("producer %d: %w", producer, err))
}

// deliver records that consumer c's Next returned message (k, seq) and
// checks it against what the key's earlier deliveries allow.
func (l *ledger) deliver(c, k, seq int, m *client.Message) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.delivers++
	l.arrivals[c] = append(l.arrivals[c], keySeq{uint32(k), uint32(seq)})
	if l.restarted {
		l.deliveredAfterRestart++
	}
	switch {
	case l.delivered[k][seq]:
		l.duplicates++
		l.violate("duplicate: key %d seq %d delivered again, to consumer %d as %v (delivery %d), first to consumer %d as %v",
			k, seq, c+1, m.ID, m.Deliveries, l.firstBy[k][seq]+1, l.firstID[k][seq])
		return
	case seq < l.next[k]:
		l.reorders++
		l.violate("reorder: key %d seq %d delivered after seq %d, to consumer %d as %v", k, seq, l.next[k]-1, c+1, m.ID)
	case seq > l.next[k] && l.strict:
		l.gaps++
		l.violate("gap: key %d seq %d delivered while seq %d was expected, to consumer %d as %v", k, seq, l.next[k], c+1, m.ID)
	}
	l.delivered[k][seq] = true
	l.firstID[k][seq], l.firstBy[k][seq] = m.ID, int8(c)
	l.next[k] = max(l.next[k], seq+1)
	switch l.outcome[k][seq] {
	case outcomeAcked:
		l.pending--
	case outcomeFailed:
		l.failedDelivered++
	}
}

func (l *ledger) malformedMessage(c int, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.malformed++
	l.violate("consumer %d: %v", c+1, err)
}

func (l *ledger) consumerError(c int, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.consumerErrs[c]++
	l.lastConsumerErr[c] = err
}

func (l *ledger) markRestart() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.restarted = true
}

// undelivered is the number of acknowledged sends not delivered yet.
func (l *ledger) undelivered() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pending
}

// lost lists (up to max) acknowledged sends never delivered, and counts
// sends whose callback never ran.
func (l *ledger) lost(max int) (lost []string, unanswered int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k := range elasticKeys {
		for seq, o := range l.outcome[k] {
			switch {
			case o == outcomeUnknown:
				unanswered++
			case o == outcomeAcked && !l.delivered[k][seq] && len(lost) < max:
				lost = append(lost, fmt.Sprintf("key %d seq %d", k, seq))
			}
		}
	}
	return lost, unanswered
}

func (l *ledger) summary() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	per := make([]int, len(l.arrivals))
	for c, a := range l.arrivals {
		per[c] = len(a)
	}
	return fmt.Sprintf("sends acked %d, failed %d (of which delivered %d); deliveries %d (after restart %d), per consumer %v; "+
		"consumer Next errors %v (last %v); violations %d: %d duplicates, %d reorders, %d gaps, %d malformed",
		l.acked, l.failed, l.failedDelivered, l.delivers, l.deliveredAfterRestart, per,
		l.consumerErrs, l.lastConsumerErr, l.violationCount, l.duplicates, l.reorders, l.gaps, l.malformed)
}

// activeByRange returns the active segments sorted by the start of their range.
func activeByRange(d api.TopicDescription) []api.SegmentInfo {
	var active []api.SegmentInfo
	for _, s := range d.Segments {
		if s.State == "active" {
			active = append(active, s)
		}
	}
	slices.SortFunc(active, func(a, b api.SegmentInfo) int {
		lo := func(s api.SegmentInfo) uint64 { h, _ := topology.ParseHash(s.Range[0]); return h }
		switch la, lb := lo(a), lo(b); {
		case la < lb:
			return -1
		case la > lb:
			return 1
		}
		return 0
	})
	return active
}

// widestActive is the active segment covering the most key hashes (the
// first of them in hash order).
func widestActive(d api.TopicDescription) uint64 {
	GinkgoHelper()
	var best api.SegmentInfo
	var bestWidth uint64
	for _, s := range activeByRange(d) {
		lo, err := topology.ParseHash(s.Range[0])
		Expect(err).NotTo(HaveOccurred())
		hi, err := topology.ParseHash(s.Range[1])
		Expect(err).NotTo(HaveOccurred())
		if w := hi - lo; w > bestWidth || bestWidth == 0 {
			best, bestWidth = s, w
		}
	}
	return best.ID
}

// middlePair is the pair of adjacent active segments in the middle of the
// key space.
func middlePair(d api.TopicDescription) (uint64, uint64) {
	GinkgoHelper()
	active := activeByRange(d)
	Expect(len(active)).To(BeNumerically(">=", 2))
	i := len(active)/2 - 1
	return active[i].ID, active[i+1].ID
}

// elasticRun is one run of the workload against a server.
type elasticRun struct {
	s       *server
	uri     string
	restart bool
	// producerOpts are added to every producer's options.
	producerOpts []client.ProducerOption
	ledger       *ledger
	admin        *client.Admin
	conns        []*nats.Conn // every client connection, to wait for reconnects
	sent         atomic.Int64 // sends queued, over all producers
	// pausedAt is the index of the send each producer pauses before, in
	// the restart run; paused receives a producer's number once it has
	// flushed; resume is closed when the new node serves.
	pausedAt int
	paused   chan int
	resume   chan struct{}
	done     chan struct{} // closed when every producer has flushed its last send
}

func (r *elasticRun) connect() *nats.Conn {
	GinkgoHelper()
	nc := connect(r.s.node.ClientURL())
	r.conns = append(r.conns, nc)
	DeferCleanup(nc.Close)
	return nc
}

// startConsumers joins the subscription with elasticConsumers stream
// consumers, each on its own connection, and reads until the spec ends,
// acknowledging each message after the ledger has checked it.
func (r *elasticRun) startConsumers(ctx context.Context) {
	GinkgoHelper()
	readCtx, stopReading := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var consumers []*client.StreamConsumer
	for c := range elasticConsumers {
		sc, err := client.NewStreamConsumer(r.connect(), r.uri, elasticSubscription,
			client.WithConsumerName(fmt.Sprintf("reader-%d", c+1)),
			client.WithStart(api.StartEarliest),
			client.WithFetch(1000, 1<<20, 200*time.Millisecond))
		Expect(err).NotTo(HaveOccurred())
		consumers = append(consumers, sc)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				m, err := sc.Next(readCtx)
				if readCtx.Err() != nil {
					return
				}
				if err != nil {
					// The server is restarting, or slow: Next retries.
					r.ledger.consumerError(c, err)
					select {
					case <-readCtx.Done():
						return
					case <-time.After(20 * time.Millisecond):
					}
					continue
				}
				k, seq, err := decodeElastic(m)
				if err != nil {
					r.ledger.malformedMessage(c, err)
					continue
				}
				r.ledger.deliver(c, k, seq, m)
				m.Ack()
			}
		}()
	}
	DeferCleanup(func(ctx SpecContext) {
		stopReading()
		wg.Wait()
		for _, sc := range consumers {
			if err := sc.Close(ctx); err != nil {
				GinkgoWriter.Printf("closing consumer %s: %v\n", sc.Name(), err)
			}
		}
	}, NodeTimeout(30*time.Second))
}

// startProducers starts the producers, each on its own connection.
func (r *elasticRun) startProducers(ctx context.Context) {
	GinkgoHelper()
	var wg sync.WaitGroup
	for p := range elasticProducers {
		opts := append([]client.ProducerOption{client.WithRequestTimeout(30 * time.Second)}, r.producerOpts...)
		prod, err := client.NewProducer(r.connect(), r.uri, opts...)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func(ctx SpecContext) { _ = prod.Close(ctx) }, NodeTimeout(30*time.Second))
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.produce(ctx, p, prod)
		}()
	}
	go func() {
		wg.Wait()
		close(r.done)
	}()
}

// produce sends producer p's share of the workload, pausing half way in the
// restart run, then flushes.
func (r *elasticRun) produce(ctx context.Context, p int, prod *client.Producer) {
	for i := range elasticPerProducer {
		if r.restart && i == r.pausedAt {
			if err := prod.Flush(ctx); err != nil {
				r.ledger.sendError(p, fmt.Errorf("flush before the restart: %w", err))
				return
			}
			r.paused <- p
			select {
			case <-r.resume:
			case <-ctx.Done():
				return
			}
		}
		k, seq := p*elasticKeysPerProducer+i%elasticKeysPerProducer, i/elasticKeysPerProducer
		rec := api.Record{Key: elasticKey(k), Payload: elasticPayload(k, seq)}
		if err := prod.Send(ctx, rec, func(_ client.MessageID, err error) { r.ledger.sent(k, seq, err) }); err != nil {
			r.ledger.sendError(p, err)
			return
		}
		r.sent.Add(1)
	}
	if err := prod.Flush(ctx); err != nil {
		r.ledger.sendError(p, fmt.Errorf("final flush: %w", err))
	}
}

// awaitSent waits until pct percent of all sends are queued.
func (r *elasticRun) awaitSent(ctx context.Context, pct int) {
	GinkgoHelper()
	Eventually(ctx, r.sent.Load).WithTimeout(90*time.Second).WithPolling(2*time.Millisecond).
		Should(BeNumerically(">=", int64(elasticMessages*pct/100)), r.ledger.summary)
}

func (r *elasticRun) describe(ctx context.Context) api.TopicDescription {
	GinkgoHelper()
	d, err := r.admin.DescribeTopic(ctx, r.uri)
	Expect(err).NotTo(HaveOccurred())
	return d
}

// restartServer stops the node while the producers are paused and the
// consumers keep reading, starts a new one on the same data directory and
// NATS port, and lets the producers go on once every connection is back.
//
// The consumers are not drained first, on purpose: at the stop they hold
// messages the application has acknowledged whose acks are not durable yet.
// The server delivers those again; a consumer drops what it has already
// returned, so exactly once holds only if each unit goes back to the
// consumer that had it (DESIGN.md §1: a unit moves only after its owner has
// acknowledged everything, or has been declared dead).
func (r *elasticRun) restartServer(ctx context.Context) {
	GinkgoHelper()
	By(fmt.Sprintf("pausing every producer at %d%% of its share and flushing what it sent", restartAt))
	for range elasticProducers {
		Eventually(ctx, r.paused).WithTimeout(90*time.Second).Should(Receive(), r.ledger.summary)
	}
	before := r.describe(ctx)

	By("stopping the node and starting a new one on the same data directory and NATS port")
	r.ledger.markRestart()
	r.s.restart()

	By("waiting for every client connection to reconnect")
	for _, nc := range append([]*nats.Conn{r.s.nc}, r.conns...) {
		Eventually(ctx, nc.IsConnected).WithTimeout(30 * time.Second).Should(BeTrue())
	}
	after := r.describe(ctx)
	Expect(after.Epoch).To(Equal(before.Epoch), "the layout survives the restart")
	Expect(activeByRange(after)).To(Equal(activeByRange(before)))

	By("resuming the producers")
	close(r.resume)
}

// runElastic runs the whole workload and checks its promises.
func runElastic(ctx context.Context, s *server, topic string, restart bool, producerOpts ...client.ProducerOption) {
	GinkgoHelper()
	start := time.Now()
	r := &elasticRun{
		s: s, uri: "topic://public/default/" + topic, restart: restart, producerOpts: producerOpts,
		ledger: newLedger(!restart), admin: client.NewAdmin(s.nc),
		pausedAt: elasticPerProducer * restartAt / 100, paused: make(chan int, elasticProducers),
		resume: make(chan struct{}), done: make(chan struct{}),
	}

	By("creating the topic with 2 segments of 2 entry buckets each, automatic scaling off")
	off := false
	d, err := r.admin.CreateTopic(ctx, r.uri, 2, client.WithTopicBuckets(4),
		client.WithTopicPolicies(&api.Policies{AutoScale: &off}))
	Expect(err).NotTo(HaveOccurred())
	Expect(activeByRange(d)).To(HaveLen(2))

	By(fmt.Sprintf("joining subscription %q with %d stream consumers", elasticSubscription, elasticConsumers))
	r.startConsumers(ctx)

	By(fmt.Sprintf("starting %d producers, each sending %d messages round robin over its own %d keys",
		elasticProducers, elasticPerProducer, elasticKeysPerProducer))
	r.startProducers(ctx)

	By(fmt.Sprintf("splitting the widest active segment after %d%% of the sends", firstSplitAt))
	r.awaitSent(ctx, firstSplitAt)
	d, err = r.admin.Split(ctx, r.uri, widestActive(r.describe(ctx)), nil)
	Expect(err).NotTo(HaveOccurred())
	Expect(activeByRange(d)).To(HaveLen(3))

	By(fmt.Sprintf("splitting the widest active segment after %d%% of the sends", secondSplitAt))
	r.awaitSent(ctx, secondSplitAt)
	d, err = r.admin.Split(ctx, r.uri, widestActive(r.describe(ctx)), nil)
	Expect(err).NotTo(HaveOccurred())
	Expect(activeByRange(d)).To(HaveLen(4))

	if restart {
		r.restartServer(ctx)
	}

	By(fmt.Sprintf("merging the two middle adjacent active segments after %d%% of the sends", mergeAt))
	r.awaitSent(ctx, mergeAt)
	a, b := middlePair(r.describe(ctx))
	d, err = r.admin.Merge(ctx, r.uri, a, b)
	Expect(err).NotTo(HaveOccurred())
	Expect(activeByRange(d)).To(HaveLen(3))
	Expect(d.Epoch).To(BeEquivalentTo(4), "two splits and a merge after the creation")

	By("waiting for every producer to have its last send answered")
	Eventually(ctx, r.done).WithTimeout(90*time.Second).Should(BeClosed(), r.ledger.summary)
	produced := time.Since(start)
	r.ledger.mu.Lock()
	sendErrors := slices.Clone(r.ledger.sendErrors)
	r.ledger.mu.Unlock()
	if !restart {
		Expect(sendErrors).To(BeEmpty(), "no send may fail without a restart")
	}

	By("waiting until the consumers have delivered every acknowledged message")
	Eventually(ctx, r.ledger.undelivered).WithTimeout(90*time.Second).WithPolling(20*time.Millisecond).
		Should(BeZero(), r.ledger.summary)

	By("checking: nothing lost, nothing delivered twice, every key in production order")
	lost, unanswered := r.ledger.lost(10)
	Expect(unanswered).To(BeZero(), "every send's callback ran")
	Expect(lost).To(BeEmpty(), "acknowledged messages never delivered")
	r.ledger.mu.Lock()
	violations, violationCount := slices.Clone(r.ledger.violations), r.ledger.violationCount
	acked, failed := r.ledger.acked, r.ledger.failed
	perConsumer := make([]int, elasticConsumers)
	for c, a := range r.ledger.arrivals {
		perConsumer[c] = len(a)
	}
	r.ledger.mu.Unlock()
	Expect(violations).To(BeEmpty(), "%d violations, the first ones listed; %s", violationCount, r.ledger.summary())
	Expect(acked + failed).To(Equal(elasticMessages))
	if !restart {
		Expect(acked).To(Equal(elasticMessages))
	}
	for c, n := range perConsumer {
		Expect(n).To(BeNumerically(">", 0), "consumer %d received nothing: the subscription was not shared", c+1)
	}

	By("checking that the subscription's backlog drains to 0 (the acks are durable)")
	Eventually(ctx, func() (uint64, error) {
		st, err := r.admin.Stats(ctx, r.uri)
		if err != nil {
			return 0, err
		}
		for _, sub := range st.Subscriptions {
			if sub.Name == elasticSubscription {
				return sub.Backlog, nil
			}
		}
		return 0, fmt.Errorf("no subscription %q in %+v", elasticSubscription, st.Subscriptions)
	}).WithTimeout(30*time.Second).WithPolling(20*time.Millisecond).Should(BeZero(), r.ledger.summary)

	GinkgoWriter.Printf("%s: produced in %s, all delivered in %s; %s; send errors %v\n",
		topic, produced.Round(time.Millisecond), time.Since(start).Round(time.Millisecond), r.ledger.summary(), sendErrors)
}

var _ = Describe("An elastic topic under keyed load", func() {
	var s *server

	BeforeEach(func() {
		s = startServer(GinkgoT().TempDir())
		DeferCleanup(s.stop)
	})

	It(fmt.Sprintf("delivers every message of 4 producers (%d keyed messages over 1,000 keys, every send acknowledged) "+
		"exactly once and per key in production order to 3 stream consumers of one subscription, "+
		"while the topic is split twice and merged once by hand", elasticMessages),
		func(ctx SpecContext) {
			runElastic(ctx, s, "elastic", false)
		}, SpecTimeout(5*time.Minute))

	It("keeps that promise with producers that keep several batches of a unit in flight and name the layout epoch "+
		"they routed by (the contract before the server absorbed layout changes: it refuses what meets a seal, "+
		"or would overtake a batch refused by one, and the producers re-route it)",
		func(ctx SpecContext) {
			runElastic(ctx, s, "elastic-pipelined", false, client.WithUnitPipeline(8), client.WithBatch(50, 64<<10),
				client.WithEpochRouting(true))
		}, SpecTimeout(5*time.Minute))

	It("keeps that promise when the server restarts in the middle: the producers pause and flush, "+
		"the node is replaced by a new one on the same data directory and NATS port while the consumers keep reading, "+
		"then the producers resume; every message whose send was acknowledged is delivered exactly once "+
		"and per key in production order, and a send that failed may be missing or present once at its place",
		func(ctx SpecContext) {
			runElastic(ctx, s, "elastic-restart", true)
		}, SpecTimeout(5*time.Minute))
})
