package clustertest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/client"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// startCluster starts three nodes and waits until every one lists the
// three live, one of them serving; it returns the nodes, a connection to
// each and the serving node's index.
func startCluster(extra ...string) ([]*node, []*nats.Conn, int) {
	GinkgoHelper()
	nodes := newCluster(3)
	for _, nd := range nodes {
		nd.start(extra...)
	}
	conns := make([]*nats.Conn, len(nodes))
	for i, nd := range nodes {
		conns[i] = connect(nd)
	}
	serving := -1
	for _, nc := range conns {
		Eventually(func(g Gomega) {
			for _, nd := range nodes {
				if !nd.running() {
					StopTrying(fmt.Sprintf("%s exited (%v) while the cluster formed; its log:\n%s", nd.id, nd.waitErr, nd.logTail(30))).Now()
				}
			}
			r, err := nodeList(nc)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(servingNodes(r)).To(ConsistOf("n1", "n2", "n3"))
			g.Expect(r.Serving).NotTo(BeEmpty())
			count := 0
			for i, n := range r.Nodes {
				if n.Serving {
					count++
					serving = i
				}
			}
			g.Expect(count).To(Equal(1), "nodes serving the topics: %+v", r.Nodes)
		}).WithTimeout(90 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
	}
	return nodes, conns, serving
}

// keyed records what one reader saw: per key, the sequence numbers in the
// order read.
type keyed struct {
	mu   sync.Mutex
	seen map[int]int
	last map[string]int
	err  error
	// resent counts, per seq, the requests whose outcome the producer
	// could not know (see resent): each may have stored a copy, so the
	// seq may be read up to that many times more, each copy right after
	// the last.
	resent map[int]int
}

func newKeyed() *keyed { return &keyed{seen: map[int]int{}, last: map[string]int{}} }

// resent holds, per topic, the seqs producePlainResending sent again after
// a request whose outcome it could not know (no answer in time, or
// UNAVAILABLE): a plain client has no idempotence, so each such request
// may have stored a copy of its message — next to itself, never out of
// its key's order.
var resent = struct {
	sync.Mutex
	seqs map[string]map[int]int
}{seqs: map[string]map[int]int{}}

func markResent(uri string, seq int) {
	resent.Lock()
	defer resent.Unlock()
	if resent.seqs[uri] == nil {
		resent.seqs[uri] = map[int]int{}
	}
	resent.seqs[uri][seq]++
}

func resentSeqs(uri string) map[int]int {
	resent.Lock()
	defer resent.Unlock()
	return maps.Clone(resent.seqs[uri])
}

func (k *keyed) add(key string, payload []byte) {
	k.mu.Lock()
	defer k.mu.Unlock()
	seq, err := strconv.Atoi(string(payload))
	if err != nil {
		k.err = fmt.Errorf("payload %q", payload)
		return
	}
	k.seen[seq]++
	if prev, ok := k.last[key]; ok && prev >= seq && !(prev == seq && k.seen[seq] <= 1+k.resent[seq]) && k.err == nil {
		k.err = fmt.Errorf("key %s: %d read after %d", key, seq, prev)
	}
	k.last[key] = seq
}

// produceGo sends seqs [from, to) through the Go client, keyed over keys
// keys (the key of seq is seq%keys, so each key's seqs rise), and
// returns once every one is acknowledged.
func produceGo(nc *nats.Conn, uri string, from, to, keys int) {
	GinkgoHelper()
	produceGoKeys(nc, uri, "k", from, to, keys)
}

// produceGoKeys is produceGo with keys prefix0, prefix1, ...
func produceGoKeys(nc *nats.Conn, uri, prefix string, from, to, keys int) {
	GinkgoHelper()
	// The producer's first request reads the layout: right after a
	// cluster forms, a forward may find no interest for the owner yet on
	// the entry node's server and go unanswered; it is asked again.
	p := newProducer(nc, uri)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for seq := from; seq < to; seq++ {
		rec := api.Record{Key: []byte(prefix + strconv.Itoa(seq%keys)), Payload: []byte(strconv.Itoa(seq))}
		Expect(p.Send(ctx, rec, func(_ client.MessageID, err error) {
			defer GinkgoRecover()
			Expect(err).NotTo(HaveOccurred())
		})).To(Succeed())
	}
	Expect(p.Close(ctx)).To(Succeed())
}

// produceRetrying sends seqs [from, to) one at a time through the Go
// client, sending a record again while the cluster refuses it UNAVAILABLE
// (a fenced node takes nothing, so nothing is stored twice), for the
// moments after a node's return when leases are being renewed.
func produceRetrying(nc *nats.Conn, uri string, from, to, keys int) {
	GinkgoHelper()
	var p *client.Producer
	Eventually(func() error {
		var err error
		p, err = client.NewProducer(nc, uri)
		return err
	}).WithTimeout(30 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for seq := from; seq < to; seq++ {
		rec := api.Record{Key: []byte("k" + strconv.Itoa(seq%keys)), Payload: []byte(strconv.Itoa(seq))}
		// Polled every 50ms: the node renews its lease within a third of it.
		Eventually(func() error {
			_, err := p.SendSync(ctx, rec)
			// Refused by a fenced node (as an error, or as no node taking
			// it, which the producer resent until its request timeout).
			if err != nil && !(errors.Is(err, api.ErrUnavailable) && strings.Contains(err.Error(), "takes no") || errors.Is(err, client.ErrNoServer)) {
				StopTrying(fmt.Sprintf("seq %d", seq)).Wrap(err).Now()
			}
			return err
		}).WithTimeout(2*time.Minute).WithPolling(50*time.Millisecond).Should(Succeed(), "seq %d", seq)
	}
	Expect(p.Close(ctx)).To(Succeed())
}

// producePlainRetrying is producePlain sending a message again while
// the cluster answers UNAVAILABLE or SEGMENT_SEALED: the moments after a
// node's loss, before its key ranges have a live owner, or while its
// topic moves.
func producePlainRetrying(nc *nats.Conn, uri string, from, to, keys int) {
	GinkgoHelper()
	producePlainResending(nc, uri, from, to, keys, false)
}

// producePlainResending is producePlainRetrying; with paused, it also
// resends a message whose request timed out (a paused node's forwarded
// requests go unanswered): each such request may have stored a copy (resent).
// Both resend what is refused UNAVAILABLE (outcome unknown: resent) or
// SEGMENT_SEALED (the topic moved under it: nothing stored).
func producePlainResending(nc *nats.Conn, uri string, from, to, keys int, paused bool) {
	GinkgoHelper()
	subject := produceSubject(uri)
	for seq := from; seq < to; seq++ {
		m := &nats.Msg{Subject: subject, Header: nats.Header{api.HeaderKey: []string{"k" + strconv.Itoa(seq%keys)}},
			Data: []byte(strconv.Itoa(seq))}
		Eventually(func() error {
			timeout := 10 * time.Second
			if paused {
				timeout = time.Second
			}
			reply, err := nc.RequestMsg(m, timeout)
			if errors.Is(err, nats.ErrNoResponders) {
				// No node takes clients' requests for a moment (the entry
				// role is moving): nothing was stored.
				return fmt.Errorf("produce %d: %w", seq, err)
			}
			if paused && errors.Is(err, nats.ErrTimeout) {
				// No answer in time (a node just continued): it may have
				// been stored.
				markResent(uri, seq)
				return fmt.Errorf("produce %d: %w", seq, err)
			}
			if err != nil {
				StopTrying(fmt.Sprintf("seq %d", seq)).Wrap(err).Now()
			}
			switch code := reply.Header.Get(micro.ErrorCodeHeader); {
			case code == "":
				return nil
			case code == strconv.Itoa(api.CodeUnavailable.Number):
				markResent(uri, seq) // the outcome is not known
				return fmt.Errorf("produce %d still refused: %s", seq, reply.Header.Get(micro.ErrorHeader))
			case code == strconv.Itoa(api.CodeSegmentSealed.Number):
				// The topic moved under the request (a seal, a relocation):
				// nothing was stored, and a plain producer resends as is.
				return fmt.Errorf("produce %d still refused: %s", seq, reply.Header.Get(micro.ErrorHeader))
			default:
				StopTrying(fmt.Sprintf("produce %d: code %s: %s", seq, code, reply.Header.Get(micro.ErrorHeader))).Now()
				return nil
			}
		}).WithTimeout(time.Minute).WithPolling(20 * time.Millisecond).Should(Succeed())
	}
}

// producePlain sends seqs [from, to) as single-message requests of a
// plain NATS client, one at a time, each acknowledged before the next.
func producePlain(nc *nats.Conn, uri string, from, to, keys int) {
	GinkgoHelper()
	producePlainKeys(nc, uri, "k", from, to, keys)
}

// producePlainKeys is producePlain with keys prefix0, prefix1, ...
func producePlainKeys(nc *nats.Conn, uri, prefix string, from, to, keys int) {
	GinkgoHelper()
	subject := produceSubject(uri)
	for seq := from; seq < to; seq++ {
		m := &nats.Msg{Subject: subject, Header: nats.Header{api.HeaderKey: []string{prefix + strconv.Itoa(seq%keys)}},
			Data: []byte(strconv.Itoa(seq))}
		reply, err := nc.RequestMsg(m, 10*time.Second)
		Expect(err).NotTo(HaveOccurred())
		Expect(reply.Header.Get(micro.ErrorCodeHeader)).To(BeEmpty(), "produce %d: %s", seq, reply.Header.Get(micro.ErrorHeader))
	}
}

// readAll reads the topic with a stream consumer over nc until n distinct
// seqs are read, checking per-key order.
func readAll(nc *nats.Conn, uri, sub string, n int) *keyed {
	GinkgoHelper()
	return readSeqs(nc, uri, sub, 0, n)
}

// readSeqs reads the topic with a stream consumer of subscription sub
// over nc until it has read seqs [from, to), checking per-key order and
// that it read each of them once and nothing else.
func readSeqs(nc *nats.Conn, uri, sub string, from, to int) *keyed {
	GinkgoHelper()
	// The metadata store may elect a leader (4-9 s) while the nodes'
	// leases are 4 s: a topic's owner may look lapsed for a moment, and
	// its topic answers UNAVAILABLE meanwhile, or the join waits on the
	// store past the client's timeout. That is waited out here.
	c := joinRetrying(func() (*client.StreamConsumer, error) {
		return client.NewStreamConsumer(nc, uri, sub, client.WithFetch(200, 1<<20, 100*time.Millisecond))
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	k := newKeyed()
	k.resent = resentSeqs(uri)
	var unavailable error
	// Reads until every seq came; an UNAVAILABLE topic is read again at
	// the next poll.
	Eventually(func() error {
		for {
			k.mu.Lock()
			got := len(k.seen)
			k.mu.Unlock()
			if got >= to-from {
				return nil
			}
			m, err := c.Next(ctx)
			if (errors.Is(err, api.ErrUnavailable) || errors.Is(err, client.ErrTimeout)) && ctx.Err() == nil {
				// Next again retries: a fetch answered late (a sealed
				// unit whose replicas are agreeing where it ends) is
				// asked again.
				unavailable = err
				return fmt.Errorf("after %d of %d messages: %w", got, to-from, err)
			}
			if err != nil {
				StopTrying(fmt.Sprintf("after %d of %d messages (the last UNAVAILABLE: %v)", got, to-from, unavailable)).Wrap(err).Now()
			}
			k.add(string(m.Key), m.Payload)
			m.Ack()
		}
	}).WithTimeout(time.Minute).WithPolling(100 * time.Millisecond).Should(Succeed())
	Expect(c.Close(ctx)).To(Succeed())
	k.mu.Lock()
	defer k.mu.Unlock()
	Expect(k.err).NotTo(HaveOccurred())
	for seq := from; seq < to; seq++ {
		// Each request of an outcome not known may have stored a copy.
		Expect(k.seen[seq]).To(BeNumerically(">=", 1), "seq %d not read", seq)
		Expect(k.seen[seq]).To(BeNumerically("<=", 1+k.resent[seq]), "seq %d read %d times, sent %d times more after outcomes not known", seq, k.seen[seq], k.resent[seq])
	}
	Expect(k.seen).To(HaveLen(to-from), "read seqs outside [%d, %d)", from, to)
	return k
}

// topicOffEntry creates topics prefix0, prefix1... of segments segments
// through nc until one is placed on a node that is not the entry node,
// and returns it and its owner's index.
func topicOffEntry(ctx context.Context, nc *nats.Conn, prefix string, segments int) (string, int) {
	GinkgoHelper()
	r, err := nodeList(nc)
	Expect(err).NotTo(HaveOccurred())
	for i := 0; i < 60; i++ {
		uri := fmt.Sprintf("topic://public/default/%s%d", prefix, i)
		d, err := client.NewAdmin(nc).CreateTopic(ctx, uri, segments)
		Expect(err).NotTo(HaveOccurred())
		if owner := d.Segments[0].Owner; owner != r.Entry {
			describe(nc, uri) // the entry node forwards to the owner by now
			return uri, int(owner[1] - '1')
		}
	}
	Fail("no topic placed off the entry node in 60 creates")
	return "", -1
}

// waitNodeGone waits until node.list through nc shows node not live.
func waitNodeGone(nc *nats.Conn, node string) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		r, err := nodeList(nc)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(liveNodes(r)).NotTo(ContainElement(node))
	}).WithTimeout(45 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
}

// waitAllLive waits until node.list through nc shows the three nodes live.
func waitAllLive(nc *nats.Conn) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		r, err := nodeList(nc)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(servingNodes(r)).To(HaveLen(3))
	}).WithTimeout(60 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
}

// describe reads a topic's layout through nc, asking again while the
// request goes unanswered or UNAVAILABLE (a forward racing the cluster's
// interest, a metadata election).
func describe(nc *nats.Conn, uri string) api.TopicDescription {
	GinkgoHelper()
	var d api.TopicDescription
	Eventually(func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var err error
		d, err = client.NewAdmin(nc).DescribeTopic(ctx, uri)
		return err
	}).WithTimeout(30 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
	return d
}

// newProducer makes a Go producer of uri over nc, asking again while its
// first read of the layout goes unanswered (see describe).
func newProducer(nc *nats.Conn, uri string, opts ...client.ProducerOption) *client.Producer {
	GinkgoHelper()
	var p *client.Producer
	Eventually(func() error {
		var err error
		p, err = client.NewProducer(nc, uri, opts...)
		return err
	}).WithTimeout(30 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
	return p
}

// produceSubject is the produce-one subject of a topic URI of either
// scheme (subjects carry none).
func produceSubject(uri string) string {
	_, path, _ := strings.Cut(uri, "://")
	parts := strings.Split(path, "/")
	return api.TopicSubject(api.ProducePrefix, parts[0], parts[1], parts[2])
}

// isClosed reports whether ch is closed, without waiting.
func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// readQueue reads the topic with a queue subscription sub over nc until
// it has read seqs [from, to), acknowledging each, and checks that it was
// handed nothing else (what it acknowledged before is never handed out
// again).
func readQueue(nc *nats.Conn, uri, sub string, from, to int) {
	GinkgoHelper()
	c := joinRetrying(func() (*client.QueueConsumer, error) { return client.NewQueueConsumer(nc, uri, sub) })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	seen := map[int]bool{}
	Eventually(func() error {
		for len(seen) < to-from {
			m, err := c.Next(ctx)
			if errors.Is(err, api.ErrUnavailable) && ctx.Err() == nil {
				return fmt.Errorf("after %d of %d messages: %w", len(seen), to-from, err)
			}
			if err != nil {
				StopTrying(fmt.Sprintf("after %d of %d messages", len(seen), to-from)).Wrap(err).Now()
			}
			seq, err := strconv.Atoi(string(m.Payload))
			if err != nil || seq < from || seq >= to {
				StopTrying(fmt.Sprintf("queue %s handed out %q, outside [%d, %d)", sub, m.Payload, from, to)).Now()
			}
			seen[seq] = true
			m.Ack()
		}
		return nil
	}).WithTimeout(time.Minute).WithPolling(100 * time.Millisecond).Should(Succeed())
	Expect(c.Close(ctx)).To(Succeed())
}

// joinRetrying joins a subscription with join, asking again for 30 s while
// it is refused UNAVAILABLE or times out (see readSeqs); any other error
// ends the spec.
func joinRetrying[C any](join func() (C, error)) C {
	GinkgoHelper()
	var c C
	Eventually(func() error {
		var err error
		c, err = join()
		if err != nil && !errors.Is(err, api.ErrUnavailable) && !errors.Is(err, client.ErrTimeout) {
			StopTrying("join").Wrap(err).Now()
		}
		return err
	}).WithTimeout(30 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
	return c
}
