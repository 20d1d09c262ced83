package clustertest

import (
	"context"
	"fmt"
	"strconv"
	"syscall"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/client"
	"github.com/braidmq/braid/routing"
	"github.com/braidmq/braid/topology"
	"github.com/nats-io/nats.go"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

var _ = Describe("Segments of one topic on several nodes", func() {
	It("moves the range of a killed node that holds a split's child: the home relocates it, writes resume, the child's data is read once the node returns", func() {
		nodes, conns, _ := startCluster()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		uri, home, child := splitOffHome(ctx, conns, "placed")
		victim := int(child.Owner[1] - '1')
		homeIdx := int(home[1] - '1')
		other := 3 - victim - homeIdx
		lo, _ := topology.ParseHash(child.Range[0])
		hi, _ := topology.ParseHash(child.Range[1])
		inChild := func(seq int) bool {
			h := routing.KeyHashString("k" + strconv.Itoa(seq%8))
			return lo <= h && h <= hi
		}
		// Through the node that is neither the home nor the child's.
		produceGo(conns[other], uri, 0, 500, 8)
		readAll(conns[other], uri, "before", 500)

		killed := time.Now()
		nodes[victim].kill()
		waitNodeGone(conns[other], nodes[victim].id)
		// Writes of the child's keys are refused (UNAVAILABLE, nothing
		// stored) until the home has sealed it in metadata and placed a
		// successor; the other keys go on.
		first := true
		for seq := 500; seq < 600; seq++ {
			producePlainRetrying(conns[other], uri, seq, seq+1, 8)
			if first && inChild(seq) {
				first = false
				fmt.Fprintf(GinkgoWriter, "kill to first acknowledged write of the lost child's range: %s\n", time.Since(killed))
			}
		}
		Expect(first).To(BeFalse(), "no key of the child's range was written")
		d := describe(conns[other], uri)
		for _, s := range d.Segments {
			switch {
			case s.ID == child.ID:
				Expect(s.State).To(Equal("sealed"))
				Expect(s.Owner).To(Equal(nodes[victim].id))
			case s.State == "active":
				Expect(s.Owner).NotTo(Equal(nodes[victim].id), "active segment %d", s.ID)
				if s.Range[0] == topology.FormatHash(0) {
					Expect(s.Owner).To(Equal(home))
				}
			}
		}
		// The node returns with its disk: the child is read there, ahead
		// of its successor, every key in order.
		nodes[victim].start()
		waitAllLive(conns[other])
		produceGo(conns[other], uri, 600, 700, 8)
		readAll(conns[victim], uri, "after", 700)
		st, err := client.NewAdmin(conns[other]).Stats(ctx, uri)
		Expect(err).NotTo(HaveOccurred())
		Expect(st.Messages).To(Equal(uint64(700)), "%+v", st.Buckets)
		readSeqs(conns[homeIdx], uri, "before", 500, 700)
	})

	It("drains a node that holds a split's child under load: the home moves its range, Go and plain producers see no error, every key in order", func() {
		nodes, conns, _ := startCluster()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		uri, home, child := splitOffHome(ctx, conns, "drainchild")
		drained := int(child.Owner[1] - '1')
		other := 3 - drained - int(home[1]-'1')
		produceGo(conns[other], uri, 0, 200, 8)
		// A Go producer through one node and a plain one through another
		// keep sending (keys of their own) while the node is drained; the
		// Go one until the drain has answered and 200 more.
		done := make(chan struct{}, 1)
		started, answered, ended := make(chan struct{}), make(chan struct{}), make(chan int, 1)
		go func() {
			defer GinkgoRecover()
			p := newProducer(conns[other], uri)
			seq, end := 800, -1
			for ; end < 0 || seq < end; seq++ {
				if end < 0 && isClosed(answered) {
					end = seq + 200
				}
				if seq == 1000 {
					close(started)
				}
				seq := seq // the callback runs later, on another goroutine
				rec := api.Record{Key: []byte("k" + strconv.Itoa(seq%8)), Payload: []byte(strconv.Itoa(seq))}
				Expect(p.Send(ctx, rec, func(_ client.MessageID, err error) {
					defer GinkgoRecover()
					Expect(err).NotTo(HaveOccurred(), "seq %d", seq)
				})).To(Succeed())
				if seq%10 == 0 {
					time.Sleep(time.Millisecond) // spread the load over the drain
				}
			}
			Expect(p.Close(ctx)).To(Succeed())
			ended <- seq
		}()
		go func() {
			defer GinkgoRecover()
			defer func() { done <- struct{}{} }()
			producePlainKeys(conns[drained], uri, "p", 200, 800, 8)
		}()
		<-started
		reply, err := client.NewAdmin(conns[other]).DrainNode(ctx, nodes[drained].id)
		close(answered)
		Expect(err).NotTo(HaveOccurred())
		fmt.Fprintf(GinkgoWriter, "drain: %+v\n", reply)
		Expect(reply.Failed).To(BeEmpty())
		Expect(reply.Segments).To(BeNumerically(">=", 1))
		total := <-ended
		<-done
		d := describe(conns[other], uri)
		for _, s := range d.Segments {
			switch {
			case s.ID == child.ID:
				Expect(s.State).To(Equal("sealed"))
			case s.State == "active":
				Expect(s.Owner).NotTo(Equal(nodes[drained].id), "active segment %d", s.ID)
			}
		}
		readAll(conns[other], uri, "all", total)
	})

	It("fences a stopped node that holds a split's child: the home moves its range, and what it had sent the node is not taken when the node continues", func() {
		nodes, conns, _ := startCluster()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		uri, home, child := splitOffHome(ctx, conns, "pausedchild")
		stopped := int(child.Owner[1] - '1')
		other := 3 - stopped - int(home[1]-'1')
		produceGo(conns[other], uri, 0, 300, 8)
		nodes[stopped].signal(syscall.SIGSTOP)
		defer nodes[stopped].signal(syscall.SIGCONT)
		// Appends of the child's keys sent now reach the stopped node's
		// socket and wait there; the home answers them UNAVAILABLE, the
		// producer sends them again, and once the node's lease lapsed the
		// home moves the range and they land in the successor.
		producePlainRetrying(conns[other], uri, 300, 400, 8)
		nodes[stopped].signal(syscall.SIGCONT)
		waitAllLive(conns[other])
		producePlainRetrying(conns[stopped], uri, 400, 500, 8)
		d := describe(conns[stopped], uri)
		for _, s := range d.Segments {
			if s.State == "active" {
				Expect(s.Owner).NotTo(Equal(nodes[stopped].id), "active segment %d", s.ID)
			}
		}
		// Each message once: the appends the stopped node found waiting
		// when it continued were refused, not written.
		waitAllLive(conns[other])
		readAll(conns[stopped], uri, "after-pause", 500)
	})
})

// splitOffHome creates topics prefix0, prefix1... of one segment until one
// has the entry node for home, splits it, and returns it, its home and the
// split's child off hash 0, which placement put on another node.
func splitOffHome(ctx context.Context, conns []*nats.Conn, prefix string) (string, string, api.SegmentInfo) {
	GinkgoHelper()
	r, err := nodeList(conns[0])
	Expect(err).NotTo(HaveOccurred())
	entry := r.Entry
	// The entry node for home, so that the node the split's child goes
	// to is not the entry node (killing or draining the entry node moves
	// the entry role too, which other specs cover).
	var uri string
	for i := 0; uri == "" && i < 60; i++ {
		u := fmt.Sprintf("topic://public/default/%s%d", prefix, i)
		d, err := client.NewAdmin(conns[0]).CreateTopic(ctx, u, 1)
		Expect(err).NotTo(HaveOccurred())
		if d.Segments[0].Owner == entry {
			uri = u
		}
	}
	Expect(uri).NotTo(BeEmpty())
	for _, nc := range conns {
		describe(nc, uri) // every node forwards to the home by now
	}
	d, err := client.NewAdmin(conns[0]).Split(ctx, uri, 0, nil)
	Expect(err).NotTo(HaveOccurred())
	var child api.SegmentInfo
	for _, s := range d.Segments {
		if s.State == "active" && s.Range[0] != topology.FormatHash(0) {
			child = s
		}
	}
	Expect(child.Owner).To(BeElementOf("n1", "n2", "n3"))
	Expect(child.Owner).NotTo(Equal(entry), "the child off hash 0 goes to another node than the home")
	return uri, entry, child
}
