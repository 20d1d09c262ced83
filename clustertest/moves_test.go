package clustertest

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/client"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

var _ = Describe("Key ranges moving between nodes", func() {
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
		waitNodeGone(conns[other], nodes[victim].id)
		// Writes to the killed node's key ranges resume: refused
		// (UNAVAILABLE, nothing stored) until a live node has sealed its
		// segments in metadata and taken their ranges.
		producePlainRetrying(conns[other], lostURI, 500, 501, 8)
		fmt.Fprintf(GinkgoWriter, "kill to first acknowledged write of the lost node's ranges: %s\n", time.Since(killed))
		producePlainRetrying(conns[other], lostURI, 501, 600, 8)
		d := describe(conns[other], lostURI)
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
		waitAllLive(conns[other])
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
		uri, victim := topicOffEntry(ctx, conns[0], "torn", 1)
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
		waitNodeGone(conns[other], nodes[victim].id)
		producePlainRetrying(conns[other], uri, 300, 400, 8)
		d := describe(conns[other], uri)
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
		waitAllLive(conns[other])
		readAll(conns[other], uri, "after-split", 400)
	})

	It("drains a node under load: producers see no error, its groups go on elsewhere, every key in order", func() {
		nodes, conns, _ := startCluster()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		uri, drained := topicOffEntry(ctx, conns[0], "drained", 2)
		other := (drained + 1) % 3
		produceGo(conns[other], uri, 0, 200, 8)
		readAll(conns[other], uri, "grp", 200) // its state is on the drained node

		// A Go producer keeps sending while the node is drained, until the
		// drain has answered and 200 more.
		p := newProducer(conns[other], uri)
		var acked sync.WaitGroup
		var errs []error
		var errMu sync.Mutex
		started, answered, ended := make(chan struct{}), make(chan struct{}), make(chan int, 1)
		var sent atomic.Int64
		go func() {
			defer GinkgoRecover()
			seq, end := 200, -1
			for ; end < 0 || seq < end; seq++ {
				if end < 0 && isClosed(answered) {
					end = seq + 200
				}
				sent.Store(int64(seq))
				if seq == 400 {
					close(started)
				}
				acked.Add(1)
				rec := api.Record{Key: []byte("k" + strconv.Itoa(seq%8)), Payload: []byte(strconv.Itoa(seq))}
				Expect(p.Send(ctx, rec, func(_ client.MessageID, err error) {
					if err != nil {
						errMu.Lock()
						errs = append(errs, err)
						errMu.Unlock()
					}
					acked.Done()
				})).To(Succeed())
				if seq%10 == 0 {
					time.Sleep(time.Millisecond) // spread the load over the drain
				}
			}
			ended <- seq
		}()
		<-started
		reply, err := client.NewAdmin(conns[other]).DrainNode(ctx, nodes[drained].id)
		close(answered)
		Expect(err).NotTo(HaveOccurred())
		fmt.Fprintf(GinkgoWriter, "drain: %+v (sent so far: %d)\n", reply, sent.Load())
		Expect(reply.Topics).To(BeNumerically(">=", 1))
		Expect(reply.Segments).To(BeNumerically(">=", 2))
		Expect(reply.Groups).To(BeNumerically(">=", 1))
		// The drain answered once its lease said so: node.list shows it
		// at once, and topics made right after go to the other nodes
		// (some went to the drained node, placed by views not updated yet).
		nl, err := nodeList(conns[other])
		Expect(err).NotTo(HaveOccurred())
		for _, nd := range nl.Nodes {
			Expect(nd.Draining).To(Equal(nd.ID == nodes[drained].id), "node %s right after the drain", nd.ID)
		}
		for i := range 8 {
			d, err := client.NewAdmin(conns[(drained+1+i%2)%3]).CreateTopic(ctx, fmt.Sprintf("topic://public/default/afterdrain%d", i), 1)
			Expect(err).NotTo(HaveOccurred())
			Expect(d.Segments[0].Owner).NotTo(Equal(nodes[drained].id), "a topic made right after the drain")
		}
		total := <-ended
		acked.Wait()
		Expect(p.Close(ctx)).To(Succeed())
		errMu.Lock()
		Expect(errs).To(BeEmpty(), "errors seen by the producer")
		errMu.Unlock()

		d := describe(conns[other], uri)
		for _, s := range d.Segments {
			if s.State == "active" {
				Expect(s.Owner).NotTo(Equal(nodes[drained].id))
			}
		}
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

	It("fences a stopped owner: its key ranges move, and when it continues it acknowledges nothing into the sealed segments", func() {
		nodes, conns, _ := startCluster()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		uri, stopped := topicOffEntry(ctx, conns[0], "paused", 1)
		other := (stopped + 1) % 3
		produceGo(conns[other], uri, 0, 300, 8)
		nodes[stopped].signal(syscall.SIGSTOP)
		defer nodes[stopped].signal(syscall.SIGCONT)
		waitNodeGone(conns[other], nodes[stopped].id)
		producePlainRetrying(conns[other], uri, 300, 400, 8)
		nodes[stopped].signal(syscall.SIGCONT)
		waitAllLive(conns[other])
		// The continued node does not serve the moved topic any more: its
		// requests reach the new owner, and everything acknowledged is
		// read once, in key order, the sealed segment first.
		producePlainRetrying(conns[stopped], uri, 400, 500, 8)
		d := describe(conns[stopped], uri)
		for _, s := range d.Segments {
			if s.State == "active" {
				Expect(s.Owner).NotTo(Equal(nodes[stopped].id))
			}
		}
		// (The metadata store may elect a leader again after the stopped
		// node's return: read once the three leases are live.)
		waitAllLive(conns[other])
		readAll(conns[stopped], uri, "after-pause", 500)
	})

})
