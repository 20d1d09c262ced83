package clustertest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/client"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
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
			r, err := nodeList(nc)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(liveNodes(r)).To(ConsistOf("n1", "n2", "n3"))
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
}

func newKeyed() *keyed { return &keyed{seen: map[int]int{}, last: map[string]int{}} }

func (k *keyed) add(key string, payload []byte) {
	k.mu.Lock()
	defer k.mu.Unlock()
	seq, err := strconv.Atoi(string(payload))
	if err != nil {
		k.err = fmt.Errorf("payload %q", payload)
		return
	}
	k.seen[seq]++
	if prev, ok := k.last[key]; ok && prev >= seq && k.err == nil {
		k.err = fmt.Errorf("key %s: %d read after %d", key, seq, prev)
	}
	k.last[key] = seq
}

// produceGo sends seqs [from, to) through the Go client, keyed over keys
// keys (the key of seq is seq%keys, so each key's seqs rise), and
// returns once every one is acknowledged.
func produceGo(nc *nats.Conn, uri string, from, to, keys int) {
	GinkgoHelper()
	p, err := client.NewProducer(nc, uri)
	Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for seq := from; seq < to; seq++ {
		rec := api.Record{Key: []byte("k" + strconv.Itoa(seq%keys)), Payload: []byte(strconv.Itoa(seq))}
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
		for {
			_, err := p.SendSync(ctx, rec)
			if err == nil {
				break
			}
			// Refused by a fenced node (as an error, or as no node taking
			// it, which the producer resent until its request timeout).
			Expect(errors.Is(err, api.ErrUnavailable) && strings.Contains(err.Error(), "takes no") || errors.Is(err, client.ErrNoServer)).To(BeTrue(), "seq %d: %v", seq, err)
			time.Sleep(50 * time.Millisecond) // the node renews its lease within a third of it
		}
	}
	Expect(p.Close(ctx)).To(Succeed())
}

// producePlainRetrying is producePlain sending a message again while
// the cluster answers UNAVAILABLE (which stores nothing): the moments
// after a node's loss, before its key ranges have a live owner.
func producePlainRetrying(nc *nats.Conn, uri string, from, to, keys int) {
	GinkgoHelper()
	parts := strings.Split(strings.TrimPrefix(uri, "topic://"), "/")
	subject := api.TopicSubject(api.ProducePrefix, parts[0], parts[1], parts[2])
	deadline := time.Now().Add(time.Minute)
	for seq := from; seq < to; seq++ {
		m := &nats.Msg{Subject: subject, Header: nats.Header{api.HeaderKey: []string{"k" + strconv.Itoa(seq%keys)}},
			Data: []byte(strconv.Itoa(seq))}
		for {
			reply, err := nc.RequestMsg(m, 10*time.Second)
			if errors.Is(err, nats.ErrNoResponders) {
				// No node takes clients' requests for a moment (the entry
				// role is moving): nothing was stored.
				Expect(time.Now().Before(deadline)).To(BeTrue(), "produce %d: %v", seq, err)
				time.Sleep(20 * time.Millisecond) // the next poll
				continue
			}
			Expect(err).NotTo(HaveOccurred(), "seq %d", seq)
			code := reply.Header.Get(micro.ErrorCodeHeader)
			if code == "" {
				break
			}
			Expect(code).To(Equal(strconv.Itoa(api.CodeUnavailable.Number)), "produce %d: %s", seq, reply.Header.Get(micro.ErrorHeader))
			Expect(time.Now().Before(deadline)).To(BeTrue(), "produce %d still refused: %s", seq, reply.Header.Get(micro.ErrorHeader))
			time.Sleep(20 * time.Millisecond) // the next poll
		}
	}
}

// producePlain sends seqs [from, to) as single-message requests of a
// plain NATS client, one at a time, each acknowledged before the next.
func producePlain(nc *nats.Conn, uri string, from, to, keys int) {
	GinkgoHelper()
	parts := strings.Split(strings.TrimPrefix(uri, "topic://"), "/")
	subject := api.TopicSubject(api.ProducePrefix, parts[0], parts[1], parts[2])
	for seq := from; seq < to; seq++ {
		m := &nats.Msg{Subject: subject, Header: nats.Header{api.HeaderKey: []string{"k" + strconv.Itoa(seq%keys)}},
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
	c, err := client.NewStreamConsumer(nc, uri, sub, client.WithFetch(200, 1<<20, 100*time.Millisecond))
	Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	k := newKeyed()
	for {
		k.mu.Lock()
		got := len(k.seen)
		k.mu.Unlock()
		if got >= to-from {
			break
		}
		m, err := c.Next(ctx)
		Expect(err).NotTo(HaveOccurred(), "after %d of %d messages", got, to-from)
		k.add(string(m.Key), m.Payload)
		m.Ack()
	}
	Expect(c.Close(ctx)).To(Succeed())
	k.mu.Lock()
	defer k.mu.Unlock()
	Expect(k.err).NotTo(HaveOccurred())
	for seq := from; seq < to; seq++ {
		Expect(k.seen[seq]).To(Equal(1), "seq %d read %d times", seq, k.seen[seq])
	}
	Expect(k.seen).To(HaveLen(to-from), "read seqs outside [%d, %d)", from, to)
	return k
}

var _ = Describe("A cluster of three nodes", func() {
	It("forms: every node lists the three live, and the metadata store has three replicas", func() {
		_, conns, _ := startCluster()
		js, err := jetstream.New(conns[1])
		Expect(err).NotTo(HaveOccurred())
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s, err := js.Stream(ctx, "KV_braid-meta")
		Expect(err).NotTo(HaveOccurred())
		info, err := s.Info(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(info.Config.Replicas).To(Equal(3))
		Expect(info.Cluster).NotTo(BeNil())
		Expect(info.Cluster.Replicas).To(HaveLen(2), "the bucket's followers")
	})

	It("serves any client through any node: Go and plain producers and a consumer on different nodes, every message once, in key order", func() {
		_, conns, _ := startCluster()
		const uri = "topic://public/default/anynode"
		admin := client.NewAdmin(conns[2])
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		created, err := admin.CreateTopic(ctx, uri, 2)
		Expect(err).NotTo(HaveOccurred())
		owner := created.Segments[0].Owner
		Expect(owner).To(BeElementOf("n1", "n2", "n3"))
		const keys = 16
		produceGo(conns[0], uri, 0, 1000, keys)
		producePlain(conns[1], uri, 1000, 1200, keys)
		produceGo(conns[2], uri, 1200, 2000, keys)
		readAll(conns[2], uri, "readers", 2000)
		// Every segment, the split's children too, has the one owner,
		// whichever node the change came through.
		_, err = client.NewAdmin(conns[1]).Split(ctx, uri, 0, nil)
		Expect(err).NotTo(HaveOccurred())
		d, err := client.NewAdmin(conns[0]).DescribeTopic(ctx, uri)
		Expect(err).NotTo(HaveOccurred())
		Expect(d.Segments).To(HaveLen(4))
		for _, seg := range d.Segments {
			Expect(seg.Owner).To(Equal(owner), "segment %d", seg.ID)
		}
		produceGo(conns[0], uri, 2000, 2500, keys)
		readAll(conns[1], uri, "after-split", 2500)
	})

	It("spreads topics over the nodes; one connection produces to all of them at once, through one node", func() {
		_, conns, _ := startCluster()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		const topics, keys, per = 12, 8, 300
		owners := map[string]int{}
		uris := make([]string, topics)
		for i := range uris {
			uris[i] = fmt.Sprintf("topic://public/default/spread%d", i)
			d, err := client.NewAdmin(conns[i%3]).CreateTopic(ctx, uris[i], 1)
			Expect(err).NotTo(HaveOccurred())
			owners[d.Segments[0].Owner]++
		}
		if len(owners) < 2 {
			r, _ := nodeList(conns[0])
			b, _ := json.Marshal(r)
			GinkgoWriter.Printf("node.list: %s\n", b)
		}
		Expect(len(owners)).To(BeNumerically(">=", 2), "owners: %v", owners)
		// One Go connection to n1 sends to every topic at once: its
		// requests carry parts of topics of several owners.
		producers := make([]*client.Producer, topics)
		for i, uri := range uris {
			p, err := client.NewProducer(conns[0], uri)
			Expect(err).NotTo(HaveOccurred())
			producers[i] = p
		}
		for seq := range per {
			for _, p := range producers {
				rec := api.Record{Key: []byte("k" + strconv.Itoa(seq%keys)), Payload: []byte(strconv.Itoa(seq))}
				Expect(p.Send(ctx, rec, func(_ client.MessageID, err error) {
					defer GinkgoRecover()
					Expect(err).NotTo(HaveOccurred())
				})).To(Succeed())
			}
		}
		for _, p := range producers {
			Expect(p.Close(ctx)).To(Succeed())
		}
		for i, uri := range uris {
			readAll(conns[(i+1)%3], uri, "spread", per)
		}
		// Every active segment has exactly one owner, and every node
		// describes it the same.
		for _, uri := range uris {
			var seen []api.SegmentInfo
			for _, nc := range conns {
				d, err := client.NewAdmin(nc).DescribeTopic(ctx, uri)
				Expect(err).NotTo(HaveOccurred())
				for _, s := range d.Segments {
					if s.State == "active" {
						Expect(s.Owner).To(BeElementOf("n1", "n2", "n3"), "%s segment %d", uri, s.ID)
					}
				}
				if seen == nil {
					seen = d.Segments
				}
				Expect(d.Segments).To(Equal(seen), "%s described differently through another node", uri)
			}
		}
	})

	It("moves a killed owner's key ranges to a live node: writes resume, the sealed data is read once the node returns, every key in order", func() {
		nodes, conns, _ := startCluster()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// Topics until one is owned by a node that does not take the
		// clients' requests (the entry node does), and another by
		// another node.
		r, err := nodeList(conns[0])
		Expect(err).NotTo(HaveOccurred())
		entry := r.Entry
		var lostURI, keptURI, lostOwner, keptOwner string
		for i := 0; (lostURI == "" || keptURI == "") && i < 60; i++ {
			uri := fmt.Sprintf("topic://public/default/back%d", i)
			d, err := client.NewAdmin(conns[0]).CreateTopic(ctx, uri, 2)
			Expect(err).NotTo(HaveOccurred())
			owner := d.Segments[0].Owner
			switch {
			case lostURI == "" && owner != entry:
				lostURI, lostOwner = uri, owner
			case keptURI == "" && owner != lostOwner && lostOwner != "":
				keptURI, keptOwner = uri, owner
			}
		}
		Expect(lostURI).NotTo(BeEmpty())
		Expect(keptURI).NotTo(BeEmpty())
		victim, survivor := int(lostOwner[1]-'1'), int(keptOwner[1]-'1')
		other := 3 - victim - survivor // the node that owns neither
		produceGo(conns[other], lostURI, 0, 500, 8)
		produceGo(conns[other], keptURI, 0, 500, 8)
		// A subscription reads (and acknowledges) everything so far on the
		// owner: its state is on the owner's disk.
		readAll(conns[other], lostURI, "before", 500)

		killed := time.Now()
		nodes[victim].kill()
		// Requests forwarded to it before its lease runs out go unanswered
		// (the client's timeout: a plain client cannot tell whether they
		// were stored), so wait for that first.
		Eventually(func(g Gomega) {
			r, err := nodeList(conns[other])
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(liveNodes(r)).NotTo(ContainElement(nodes[victim].id))
		}).WithTimeout(45 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
		// Writes to the killed node's key ranges resume: refused
		// (UNAVAILABLE, nothing stored) until a live node has sealed its
		// segments in metadata and taken their ranges.
		producePlainRetrying(conns[other], lostURI, 500, 501, 8)
		fmt.Fprintf(GinkgoWriter, "kill to first acknowledged write of the lost node's ranges: %s\n", time.Since(killed))
		producePlainRetrying(conns[other], lostURI, 501, 600, 8)
		d, err := client.NewAdmin(conns[other]).DescribeTopic(ctx, lostURI)
		Expect(err).NotTo(HaveOccurred())
		sealedThere, activeElsewhere := 0, 0
		for _, s := range d.Segments {
			switch {
			case s.State == "sealed" && s.Owner == nodes[victim].id:
				sealedThere++
			case s.State == "active":
				Expect(s.Owner).NotTo(Equal(nodes[victim].id), "active segment %d", s.ID)
				Expect(s.Parents).To(HaveLen(1))
				activeElsewhere++
			}
		}
		Expect(sealedThere).To(Equal(2), "%+v", d.Segments)
		Expect(activeElsewhere).To(Equal(2), "%+v", d.Segments)
		// Stats name the killed node's buckets as unknown while it is down.
		st, err := client.NewAdmin(conns[other]).Stats(ctx, lostURI)
		Expect(err).NotTo(HaveOccurred())
		unknown := 0
		for _, b := range st.Buckets {
			if b.Owner == nodes[victim].id {
				Expect(b.Unavailable).To(BeTrue(), "bucket %d/%d", b.Segment, b.Bucket)
				unknown++
			}
		}
		Expect(unknown).To(BeNumerically(">=", 2))
		// The other topic carries on.
		Eventually(func() error {
			actx, acancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer acancel()
			_, err := client.NewAdmin(conns[other]).DescribeTopic(actx, keptURI)
			return err
		}).WithTimeout(30 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
		produceGo(conns[other], keptURI, 500, 700, 8)
		readAll(conns[survivor], keptURI, "kept", 700)

		// The node returns with its disk: its sealed segments are read
		// there, ahead of their successors, every key in order.
		nodes[victim].start()
		Eventually(func(g Gomega) {
			r, err := nodeList(conns[other])
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(liveNodes(r)).To(HaveLen(3))
		}).WithTimeout(60 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
		produceGo(conns[other], lostURI, 600, 700, 8)
		readAll(conns[victim], lostURI, "after", 700)
		// Every message counted, the returned node's buckets included.
		st, err = client.NewAdmin(conns[other]).Stats(ctx, lostURI)
		Expect(err).NotTo(HaveOccurred())
		Expect(st.Messages).To(Equal(uint64(700)), "%+v", st.Buckets)
		// The subscription's state came over from the returned node: it
		// goes on after what it had acknowledged there.
		readSeqs(conns[survivor], lostURI, "before", 500, 700)
	})

	It("kills a topic's controller during a split: the layout is the one before or the one after, and a live node carries on", func() {
		nodes, conns, _ := startCluster()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		r, err := nodeList(conns[0])
		Expect(err).NotTo(HaveOccurred())
		var uri string
		victim := -1
		for i := 0; victim < 0 && i < 60; i++ {
			u := fmt.Sprintf("topic://public/default/torn%d", i)
			d, err := client.NewAdmin(conns[0]).CreateTopic(ctx, u, 1)
			Expect(err).NotTo(HaveOccurred())
			if owner := d.Segments[0].Owner; owner != r.Entry {
				uri, victim = u, int(owner[1]-'1')
			}
		}
		Expect(victim).To(BeNumerically(">=", 0))
		other := (victim + 1) % 3
		produceGo(conns[other], uri, 0, 300, 8)
		// The split request and the SIGKILL race: the split lands or not.
		go func() {
			defer GinkgoRecover()
			sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer scancel()
			_, _ = client.NewAdmin(conns[other]).Split(sctx, uri, 0, nil)
		}()
		nodes[victim].kill()
		Eventually(func(g Gomega) {
			r, err := nodeList(conns[other])
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(liveNodes(r)).NotTo(ContainElement(nodes[victim].id))
		}).WithTimeout(45 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
		producePlainRetrying(conns[other], uri, 300, 400, 8)
		d, err := client.NewAdmin(conns[other]).DescribeTopic(ctx, uri)
		Expect(err).NotTo(HaveOccurred())
		// Before the split: one root, sealed on the killed node, one
		// successor. After: the root and its two children sealed there
		// and two successors. Nothing in between.
		byID := map[uint64]api.SegmentInfo{}
		active := 0
		for _, s := range d.Segments {
			byID[s.ID] = s
		}
		for _, s := range d.Segments {
			if s.State != "active" {
				Expect(s.Owner).To(Equal(nodes[victim].id), "sealed segment %d", s.ID)
				continue
			}
			active++
			Expect(s.Owner).NotTo(Equal(nodes[victim].id), "active segment %d", s.ID)
			Expect(s.Parents).To(HaveLen(1))
			parent := byID[s.Parents[0]]
			Expect(parent.State).To(Equal("sealed"))
			Expect(parent.Range).To(Equal(s.Range))
		}
		Expect(active).To(Or(Equal(1), Equal(2)), "%+v", d.Segments)
		Expect(d.Segments).To(HaveLen(2*active + active - 1))
		nodes[victim].start()
		Eventually(func(g Gomega) {
			r, err := nodeList(conns[other])
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(liveNodes(r)).To(HaveLen(3))
		}).WithTimeout(60 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
		readAll(conns[other], uri, "after-split", 400)
	})

	It("drains a node under load: producers see no error, its groups go on elsewhere, every key in order", func() {
		nodes, conns, _ := startCluster()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		r, err := nodeList(conns[0])
		Expect(err).NotTo(HaveOccurred())
		var uri string
		drained := -1
		for i := 0; drained < 0 && i < 60; i++ {
			u := fmt.Sprintf("topic://public/default/drained%d", i)
			d, err := client.NewAdmin(conns[0]).CreateTopic(ctx, u, 2)
			Expect(err).NotTo(HaveOccurred())
			if owner := d.Segments[0].Owner; owner != r.Entry {
				uri, drained = u, int(owner[1]-'1')
			}
		}
		Expect(drained).To(BeNumerically(">=", 0))
		other := (drained + 1) % 3
		produceGo(conns[other], uri, 0, 200, 8)
		readAll(conns[other], uri, "grp", 200) // its state is on the drained node

		// A Go producer keeps sending while the node is drained.
		const total = 3000
		p, err := client.NewProducer(conns[other], uri)
		Expect(err).NotTo(HaveOccurred())
		var acked sync.WaitGroup
		var errs []error
		var errMu sync.Mutex
		acked.Add(total - 200)
		started := make(chan struct{})
		var sent atomic.Int64
		go func() {
			defer GinkgoRecover()
			for seq := 200; seq < total; seq++ {
				sent.Store(int64(seq))
				if seq == 400 {
					close(started)
				}
				rec := api.Record{Key: []byte("k" + strconv.Itoa(seq%8)), Payload: []byte(strconv.Itoa(seq))}
				Expect(p.Send(ctx, rec, func(_ client.MessageID, err error) {
					if err != nil {
						errMu.Lock()
						errs = append(errs, err)
						errMu.Unlock()
					}
					acked.Done()
				})).To(Succeed())
				if seq%50 == 0 {
					time.Sleep(time.Millisecond) // spread the load over the drain
				}
			}
		}()
		<-started
		reply, err := client.NewAdmin(conns[other]).DrainNode(ctx, nodes[drained].id)
		Expect(err).NotTo(HaveOccurred())
		fmt.Fprintf(GinkgoWriter, "drain: %+v (sent so far: %d)\n", reply, sent.Load())
		Expect(reply.Topics).To(BeNumerically(">=", 1))
		Expect(reply.Segments).To(BeNumerically(">=", 2))
		Expect(reply.Groups).To(BeNumerically(">=", 1))
		acked.Wait()
		Expect(p.Close(ctx)).To(Succeed())
		errMu.Lock()
		Expect(errs).To(BeEmpty(), "errors seen by the producer")
		errMu.Unlock()

		d, err := client.NewAdmin(conns[other]).DescribeTopic(ctx, uri)
		Expect(err).NotTo(HaveOccurred())
		for _, s := range d.Segments {
			if s.State == "active" {
				Expect(s.Owner).NotTo(Equal(nodes[drained].id))
			}
		}
		// The drained node's next renewal says so.
		Eventually(func(g Gomega) {
			nl, err := nodeList(conns[other])
			g.Expect(err).NotTo(HaveOccurred())
			for _, nd := range nl.Nodes {
				g.Expect(nd.Draining).To(Equal(nd.ID == nodes[drained].id), "node %s", nd.ID)
			}
		}).WithTimeout(30 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
		// The group goes on where it was; the sealed segments are read on
		// the drained node.
		readSeqs(conns[other], uri, "grp", 200, total)
	})

	It("moves topics to a node that joins a loaded cluster; producers and readers carry on", func() {
		rebalance := []string{"--rebalance-interval", "1s"}
		nodes, conns, _ := startCluster(rebalance...)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		// n3 leaves (a clean stop releases its lease); topics are made
		// and used on the other two.
		nodes[2].signal(syscall.SIGTERM)
		Eventually(nodes[2].exited).WithTimeout(30 * time.Second).Should(BeClosed())
		nodes[2].cmd = nil
		Eventually(func(g Gomega) {
			r, err := nodeList(conns[0])
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(liveNodes(r)).To(ConsistOf("n1", "n2"))
			// If n3 held the entry role, another node has taken it.
			g.Expect(r.Entry).To(BeElementOf("n1", "n2"))
		}).WithTimeout(30 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
		const topics = 8
		uris := make([]string, topics)
		for i := range uris {
			uris[i] = fmt.Sprintf("topic://public/default/joined%d", i)
			// (Placed on n3 by a node that had not yet read its lease
			// again, a topic moves off it at its first produce.)
			_, err := client.NewAdmin(conns[0]).CreateTopic(ctx, uris[i], 2)
			Expect(err).NotTo(HaveOccurred())
			produceGo(conns[0], uris[i], 0, 100, 8)
		}
		// n3 comes back with nothing: the entry node moves topics to it.
		nodes[2].start(rebalance...)
		conns[2] = connect(nodes[2])
		Eventually(func(g Gomega) {
			owned := 0
			for _, uri := range uris {
				d, err := client.NewAdmin(conns[0]).DescribeTopic(ctx, uri)
				g.Expect(err).NotTo(HaveOccurred())
				for _, s := range d.Segments {
					if s.State == "active" && s.Owner == "n3" {
						owned++
					}
				}
			}
			g.Expect(owned).To(BeNumerically(">=", 2))
		}).WithTimeout(60 * time.Second).WithPolling(250 * time.Millisecond).Should(Succeed())
		for i, uri := range uris {
			produceGo(conns[i%3], uri, 100, 200, 8)
			readAll(conns[(i+1)%3], uri, "joined", 200)
		}
	})

	It("lets the Go producer write straight to a topic's owner: it needs no entry node", func() {
		nodes, conns, _ := startCluster()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		r, err := nodeList(conns[0])
		Expect(err).NotTo(HaveOccurred())
		entry := int(r.Entry[1] - '1')
		var uri string
		for i := 0; uri == "" && i < 60; i++ {
			u := fmt.Sprintf("topic://public/default/direct%d", i)
			d, err := client.NewAdmin(conns[0]).CreateTopic(ctx, u, 2)
			Expect(err).NotTo(HaveOccurred())
			if d.Segments[0].Owner != r.Entry {
				uri = u
			}
		}
		Expect(uri).NotTo(BeEmpty())
		via := (entry + 1) % 3
		p, err := client.NewProducer(conns[via], uri)
		Expect(err).NotTo(HaveOccurred())
		// The entry node stops: nothing reaches it, and no other node
		// takes its role for a lease; the producer's batches go straight
		// to the owner all the same.
		nodes[entry].signal(syscall.SIGSTOP)
		defer nodes[entry].signal(syscall.SIGCONT)
		sctx, scancel := context.WithTimeout(ctx, 2*time.Second)
		defer scancel()
		for seq := range 100 {
			rec := api.Record{Key: []byte("k" + strconv.Itoa(seq%8)), Payload: []byte(strconv.Itoa(seq))}
			_, err := p.SendSync(sctx, rec)
			Expect(err).NotTo(HaveOccurred(), "seq %d with the entry node stopped", seq)
		}
		nodes[entry].signal(syscall.SIGCONT)
		Expect(p.Close(ctx)).To(Succeed())
		Eventually(func(g Gomega) {
			r, err := nodeList(conns[via])
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(liveNodes(r)).To(HaveLen(3))
		}).WithTimeout(60 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
		Eventually(func() error {
			actx, acancel := context.WithTimeout(ctx, 2*time.Second)
			defer acancel()
			_, err := client.NewAdmin(conns[via]).DescribeTopic(actx, uri)
			return err
		}).WithTimeout(30 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
		readAll(conns[via], uri, "direct", 100)
	})

	It("fences a stopped owner: its key ranges move, and when it continues it acknowledges nothing into the sealed segments", func() {
		nodes, conns, _ := startCluster()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		r, err := nodeList(conns[0])
		Expect(err).NotTo(HaveOccurred())
		var uri string
		stopped := -1
		for i := 0; stopped < 0 && i < 60; i++ {
			u := fmt.Sprintf("topic://public/default/paused%d", i)
			d, err := client.NewAdmin(conns[0]).CreateTopic(ctx, u, 1)
			Expect(err).NotTo(HaveOccurred())
			if owner := d.Segments[0].Owner; owner != r.Entry {
				uri, stopped = u, int(owner[1]-'1')
			}
		}
		Expect(stopped).To(BeNumerically(">=", 0))
		other := (stopped + 1) % 3
		produceGo(conns[other], uri, 0, 300, 8)
		nodes[stopped].signal(syscall.SIGSTOP)
		defer nodes[stopped].signal(syscall.SIGCONT)
		Eventually(func(g Gomega) {
			r, err := nodeList(conns[other])
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(liveNodes(r)).NotTo(ContainElement(nodes[stopped].id))
		}).WithTimeout(45 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
		producePlainRetrying(conns[other], uri, 300, 400, 8)
		nodes[stopped].signal(syscall.SIGCONT)
		Eventually(func(g Gomega) {
			r, err := nodeList(conns[other])
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(liveNodes(r)).To(HaveLen(3))
		}).WithTimeout(60 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
		// The continued node does not serve the moved topic any more: its
		// requests reach the new owner, and everything acknowledged is
		// read once, in key order, the sealed segment first.
		producePlainRetrying(conns[stopped], uri, 400, 500, 8)
		d, err := client.NewAdmin(conns[stopped]).DescribeTopic(ctx, uri)
		Expect(err).NotTo(HaveOccurred())
		for _, s := range d.Segments {
			if s.State == "active" {
				Expect(s.Owner).NotTo(Equal(nodes[stopped].id))
			}
		}
		readAll(conns[stopped], uri, "after-pause", 500)
	})

	It("moves the entry role when the entry node is killed: topics of the live nodes serve again through any node", func() {
		nodes, conns, _ := startCluster()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		r, err := nodeList(conns[0])
		Expect(err).NotTo(HaveOccurred())
		entry := int(r.Entry[1] - '1')
		// A topic owned by a node that is not the entry node.
		var uri string
		var owner int
		for i := 0; uri == "" && i < 60; i++ {
			u := fmt.Sprintf("topic://public/default/moved%d", i)
			d, err := client.NewAdmin(conns[0]).CreateTopic(ctx, u, 1)
			Expect(err).NotTo(HaveOccurred())
			if o := int(d.Segments[0].Owner[1] - '1'); o != entry {
				uri, owner = u, o
			}
		}
		Expect(uri).NotTo(BeEmpty())
		third := 3 - entry - owner
		produceGo(conns[third], uri, 0, 300, 8)

		nodes[entry].kill()
		Eventually(func(g Gomega) {
			r, err := nodeList(conns[third])
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(r.Entry).NotTo(BeEmpty())
			g.Expect(r.Entry).NotTo(Equal(nodes[entry].id))
		}).WithTimeout(45 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
		Eventually(func() error {
			actx, acancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer acancel()
			_, err := client.NewAdmin(conns[third]).DescribeTopic(actx, uri)
			return err
		}).WithTimeout(30 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
		produceGo(conns[third], uri, 300, 600, 8)
		producePlain(conns[owner], uri, 600, 700, 8)
		readAll(conns[third], uri, "moved", 700)
	})

	It("fences a stopped entry node: another takes the role, and the stopped one takes nothing out of order when it continues", func() {
		nodes, conns, _ := startCluster()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		r, err := nodeList(conns[0])
		Expect(err).NotTo(HaveOccurred())
		stopped := int(r.Entry[1] - '1')
		other := (stopped + 1) % 3
		var uri string
		for i := 0; uri == "" && i < 60; i++ {
			u := fmt.Sprintf("topic://public/default/fenced%d", i)
			d, err := client.NewAdmin(conns[other]).CreateTopic(ctx, u, 1)
			Expect(err).NotTo(HaveOccurred())
			if d.Segments[0].Owner != nodes[stopped].id {
				uri = u
			}
		}
		Expect(uri).NotTo(BeEmpty())
		produceGo(conns[other], uri, 0, 300, 8)

		nodes[stopped].signal(syscall.SIGSTOP)
		stillStopped := true
		defer func() {
			if stillStopped {
				nodes[stopped].signal(syscall.SIGCONT)
			}
		}()
		Eventually(func(g Gomega) {
			r, err := nodeList(conns[other])
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(r.Entry).NotTo(BeEmpty())
			g.Expect(r.Entry).NotTo(Equal(nodes[stopped].id))
		}).WithTimeout(60 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
		Eventually(func() error {
			actx, acancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer acancel()
			_, err := client.NewAdmin(conns[other]).DescribeTopic(actx, uri)
			return err
		}).WithTimeout(30 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
		produceRetrying(conns[other], uri, 300, 600, 8)

		nodes[stopped].signal(syscall.SIGCONT)
		stillStopped = false
		// The continued node finds the role taken and stops its client
		// services (requests it held meanwhile were refused or are lost:
		// their senders time out).
		Eventually(func() string { return nodes[stopped].logTail(400) }).WithTimeout(30 * time.Second).
			WithPolling(200 * time.Millisecond).Should(ContainSubstring("another node took the entry role"))
		// Through the continued node's own server: its requests reach the
		// new entry node.
		Eventually(func() error {
			actx, acancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer acancel()
			_, err := client.NewAdmin(conns[stopped]).DescribeTopic(actx, uri)
			return err
		}).WithTimeout(30 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
		produceRetrying(conns[stopped], uri, 600, 900, 8)
		// If the topic moved off the stopped node while it was away, its
		// sealed segments are read there: once its lease is live again.
		Eventually(func(g Gomega) {
			r, err := nodeList(conns[other])
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(liveNodes(r)).To(HaveLen(3))
		}).WithTimeout(60 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
		readAll(conns[other], uri, "fenced", 900)
		// (The metadata store may be electing a leader again for a moment
		// after the stopped node's return.)
		Eventually(func(g Gomega) {
			r, err := nodeList(conns[other])
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(r.Entry).NotTo(BeEmpty())
			g.Expect(r.Entry).NotTo(Equal(nodes[stopped].id))
		}).WithTimeout(30 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
	})

	It("applies a namespace's policy change to its active topics on every node", func() {
		_, conns, _ := startCluster()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		r, err := nodeList(conns[0])
		Expect(err).NotTo(HaveOccurred())
		var uri string
		for i := 0; uri == "" && i < 60; i++ {
			u := fmt.Sprintf("topic://public/default/policed%d", i)
			d, err := client.NewAdmin(conns[0]).CreateTopic(ctx, u, 1)
			Expect(err).NotTo(HaveOccurred())
			if d.Segments[0].Owner != r.Entry {
				uri = u
			}
		}
		Expect(uri).NotTo(BeEmpty())
		produceGo(conns[1], uri, 0, 10, 2) // active on its owner
		retention := "100h"
		_, err = client.NewAdmin(conns[2]).SetNamespacePolicies(ctx, "public/default", &api.Policies{Retention: &retention})
		Expect(err).NotTo(HaveOccurred())
		Eventually(func(g Gomega) {
			d, err := client.NewAdmin(conns[0]).DescribeTopic(ctx, uri)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(d.EffectivePolicies).NotTo(BeNil())
			g.Expect(d.EffectivePolicies.Retention).NotTo(BeNil())
			got, err := time.ParseDuration(*d.EffectivePolicies.Retention)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(100 * time.Hour))
		}).WithTimeout(20 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
	})

	It("refuses a second process with the id of a live node", func() {
		nodes, conns, _ := startCluster()
		// The second process joins through an external NATS (n2's server)
		// with n1's id: its lease is refused.
		dup := newCluster(1)[0]
		dup.id = nodes[0].id
		dup.start("--nats-url", nodes[1].url())
		Eventually(dup.exited).WithTimeout(60 * time.Second).Should(BeClosed())
		Expect(dup.waitErr).To(HaveOccurred())
		Expect(dup.logTail(5)).To(ContainSubstring("in use by another running braid serve"))
		dup.cmd = nil
		// The live node kept its lease.
		r, err := nodeList(conns[1])
		Expect(err).NotTo(HaveOccurred())
		Expect(liveNodes(r)).To(ConsistOf("n1", "n2", "n3"))
		for _, n := range r.Nodes {
			if n.ID == nodes[0].id {
				Expect(n.NATSURL).To(Equal(nodes[0].url()))
			}
		}
		b, _ := json.Marshal(r)
		GinkgoWriter.Printf("node.list: %s\n", b)
	})
})
