package specs

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/braidmq/braid/internal/poll"

	"github.com/braidmq/braid/api"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	. "github.com/onsi/gomega"
)

// Load generation and checking for the elastic specs. Everything here runs
// on plain goroutines and reports problems as errors, which the specs then
// assert on: Gomega must not fail outside the spec's goroutine.

// loadGen produces keyed records at a target rate, in batches, one batch
// at a time, so that the records of each key are sent in order. Each
// payload is "key|seq", seq counting from 0 per key.
type loadGen struct {
	s     *server
	topic string
	keys  []string
	rate  atomic.Int64 // msg/s
	quit  chan struct{}
	done  chan struct{}

	mu sync.Mutex
	// Guarded by mu:
	next map[string]int // acknowledged records per key
	err  error
}

// startLoad starts producing at rate msg/s over keys.
func (s *server) startLoad(topic string, keys []string, rate int) *loadGen {
	g := &loadGen{s: s, topic: topic, keys: keys, quit: make(chan struct{}), done: make(chan struct{}), next: map[string]int{}}
	g.rate.Store(int64(rate))
	go g.run()
	return g
}

func (g *loadGen) setRate(r int) { g.rate.Store(int64(r)) }

func (g *loadGen) run() {
	defer close(g.done)
	const tick = 20 * time.Millisecond
	owed, k := 0.0, 0
	last := time.Now()
	for {
		select {
		case <-g.quit:
			return
		case <-time.After(tick):
		}
		now := time.Now()
		// No catching up after a stall beyond one tick: a burst would not
		// be the rate the spec asked for.
		owed += float64(g.rate.Load()) * min(now.Sub(last), 2*tick).Seconds()
		last = now
		n := int(owed)
		if n == 0 {
			continue
		}
		owed -= float64(n)
		recs := make([]api.Record, n)
		g.mu.Lock()
		counts := map[string]int{}
		for i := range recs {
			key := g.keys[k%len(g.keys)]
			k++
			recs[i] = api.Record{Key: []byte(key), Payload: []byte(key + "|" + strconv.Itoa(g.next[key]+counts[key]))}
			counts[key]++
		}
		g.mu.Unlock()
		if err := g.send(recs); err != nil {
			g.mu.Lock()
			g.err = err
			g.mu.Unlock()
			return
		}
		g.mu.Lock()
		for key, c := range counts {
			g.next[key] += c
		}
		g.mu.Unlock()
	}
}

// send produces recs as one batch and waits for the reply. Records refused
// with SEGMENT_SEALED (a split or merge sealed their segment) are sent again,
// in their order, once the server routes by the new layout: this producer
// waits for every reply before it sends more, and all records of one key in
// a batch go to one segment, so resending the refused ones keeps each key's
// order (the producer rule of DESIGN.md §1).
func (g *loadGen) send(recs []api.Record) error {
	var failed error // an error that ends the sending, not a refusal to resend
	// poll.Until sends again every 5ms: the new layout is published right
	// after the seal.
	if poll.Until(10*time.Second, func() bool {
		data, err := g.s.request(api.TopicSubject(api.ProduceBatchPrefix, "public", "default", g.topic), api.AppendRecords(nil, recs))
		if err != nil {
			failed = err
			return true
		}
		res, err := api.DecodeResults(data)
		if err != nil {
			failed = err
			return true
		}
		var refused []api.Record
		for i, r := range res {
			err := r.Err()
			switch {
			case err == nil:
			case errors.Is(err, api.ErrSegmentSealed):
				refused = append(refused, recs[i])
			default:
				failed = fmt.Errorf("record %d: %w", i, err)
				return true
			}
		}
		recs = refused
		return len(recs) == 0
	}) {
		return failed
	}
	return fmt.Errorf("%d records still refused as sealed after 10s", len(recs))
}

// halt stops producing and returns how many records of each key were
// acknowledged, and the first error.
func (g *loadGen) halt() (map[string]int, error) {
	close(g.quit)
	<-g.done
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.next, g.err
}

// group is stream consumers of one subscription, fetching and acking in a
// loop, recording every delivery in the order replies arrive. A consumer
// appends a reply's messages before it acks them, and the server hands a
// key's next message to anyone only once the previous ones are acked, so
// per key this order is the delivery order.
type group struct {
	s     *server
	topic string
	sub   string
	quit  chan struct{}
	wg    sync.WaitGroup

	mu sync.Mutex
	// Guarded by mu:
	delivered []api.Message
	assigned  map[string]int // units per consumer, from the last fetch
	err       error
}

// startGroup joins consumers to sub and starts their loops.
func (s *server) startGroup(topic, sub string, consumers ...string) *group {
	g := &group{s: s, topic: topic, sub: sub, quit: make(chan struct{}), assigned: map[string]int{}}
	for _, c := range consumers {
		g.add(c)
	}
	return g
}

func (g *group) add(consumer string) {
	g.s.consume(api.ConsumeJoin, g.topic, api.JoinRequest{Subscription: g.sub, Consumer: consumer})
	g.wg.Add(1)
	go g.loop(consumer)
}

func (g *group) fail(err error) {
	g.mu.Lock()
	if g.err == nil {
		g.err = err
	}
	g.mu.Unlock()
}

func (g *group) loop(consumer string) {
	defer g.wg.Done()
	subject := func(verb string) string { return api.ConsumeSubject(verb, "public", "default", g.topic) }
	for {
		select {
		case <-g.quit:
			return
		default:
		}
		body, _ := json.Marshal(api.FetchRequest{Subscription: g.sub, Consumer: consumer, Max: 500, Wait: "100ms"})
		m, err := g.s.nc.RequestMsg(&nats.Msg{Subject: subject(api.ConsumeFetch), Data: body}, 10*time.Second)
		if err == nil {
			if e := api.ParseError(m.Header.Get(micro.ErrorCodeHeader), m.Header.Get(micro.ErrorHeader)); e != nil {
				err = e
			}
		}
		if err != nil {
			g.fail(fmt.Errorf("fetch by %s: %w", consumer, err))
			return
		}
		msgs, err := api.DecodeMessages(m.Data)
		if err != nil {
			g.fail(err)
			return
		}
		units, _ := strconv.Atoi(m.Header.Get(api.FetchReplyHeaderAssigned))
		g.mu.Lock()
		g.delivered = append(g.delivered, msgs...)
		g.assigned[consumer] = units
		g.mu.Unlock()
		if len(msgs) == 0 {
			continue
		}
		last := map[[2]uint64]uint64{}
		for _, msg := range msgs {
			last[[2]uint64{msg.Segment, uint64(msg.Bucket)}] = max(last[[2]uint64{msg.Segment, uint64(msg.Bucket)}], msg.Offset)
		}
		ack := api.AckRequest{Subscription: g.sub, Consumer: consumer}
		for u, off := range last {
			ack.Acks = append(ack.Acks, api.Position{Segment: u[0], Bucket: int(u[1]), Offset: off})
		}
		ab, _ := json.Marshal(ack)
		if _, err := g.s.request(subject(api.ConsumeAck), ab); err != nil {
			g.fail(fmt.Errorf("ack by %s: %w", consumer, err))
			return
		}
	}
}

// count is the number of deliveries so far.
func (g *group) count() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.delivered)
}

// idle returns the consumers the last fetch found without units.
func (g *group) idle() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []string
	for c, n := range g.assigned {
		if n == 0 {
			out = append(out, c)
		}
	}
	return out
}

func (g *group) stop() ([]api.Message, error) {
	close(g.quit)
	g.wg.Wait()
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.delivered, g.err
}

// checkOnceInOrder checks that the deliveries hold every produced record
// exactly once and, per key, in production order.
func checkOnceInOrder(delivered []api.Message, produced map[string]int) error {
	next := map[string]int{}
	for _, m := range delivered {
		key, seqText, ok := strings.Cut(string(m.Payload), "|")
		seq, err := strconv.Atoi(seqText)
		if !ok || err != nil || key != string(m.Key) {
			return fmt.Errorf("message %d/%d/%d: payload %q does not match key %q", m.Segment, m.Bucket, m.Offset, m.Payload, m.Key)
		}
		if seq != next[key] {
			return fmt.Errorf("key %s: got seq %d (at %d/%d/%d), want %d: duplicated or out of order",
				key, seq, m.Segment, m.Bucket, m.Offset, next[key])
		}
		next[key]++
	}
	for key, n := range produced {
		if next[key] != n {
			return fmt.Errorf("key %s: delivered %d of %d", key, next[key], n)
		}
	}
	return nil
}

// drainAndCheck stops the load, waits until the group has received every
// acknowledged record, stops the group and checks the deliveries.
func drainAndCheck(load *loadGen, g *group) {
	produced, err := load.halt()
	Expect(err).NotTo(HaveOccurred(), "producing")
	total := 0
	for _, n := range produced {
		total += n
	}
	Expect(total).To(BeNumerically(">", 0))
	Eventually(g.count).WithTimeout(30 * time.Second).Should(BeNumerically(">=", total))
	delivered, err := g.stop()
	Expect(err).NotTo(HaveOccurred(), "consuming")
	Expect(checkOnceInOrder(delivered, produced)).To(Succeed())
}

// keys returns n distinct keys.
func keys(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("key-%d", i)
	}
	return out
}
