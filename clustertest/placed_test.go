package clustertest

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/client"
	"github.com/braidmq/braid/routing"
	"github.com/braidmq/braid/topology"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

var _ = Describe("Segments of one topic on several nodes", func() {
	It("moves the range of a killed node that holds a split's child: the home relocates it, writes resume, the child's data is read once the node returns", func() {
		nodes, conns, _ := startCluster()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		r, err := nodeList(conns[0])
		Expect(err).NotTo(HaveOccurred())
		entry := r.Entry
		// A topic whose home is the entry node, so that the node its
		// split's child goes to is not (killing the entry node moves
		// the entry role too, which other specs cover).
		var uri, home string
		for i := 0; uri == "" && i < 60; i++ {
			u := fmt.Sprintf("topic://public/default/placed%d", i)
			d, err := client.NewAdmin(conns[0]).CreateTopic(ctx, u, 1)
			Expect(err).NotTo(HaveOccurred())
			if d.Segments[0].Owner == entry {
				uri, home = u, entry
			}
		}
		Expect(uri).NotTo(BeEmpty())
		d, err := client.NewAdmin(conns[0]).Split(ctx, uri, 0, nil)
		Expect(err).NotTo(HaveOccurred())
		var child api.SegmentInfo
		for _, s := range d.Segments {
			if s.State == "active" && s.Range[0] != topology.FormatHash(0) {
				child = s
			}
		}
		Expect(child.Owner).To(BeElementOf("n1", "n2", "n3"))
		Expect(child.Owner).NotTo(Equal(home), "the child off hash 0 goes to another node than the home")
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
		d, err = client.NewAdmin(conns[other]).DescribeTopic(ctx, uri)
		Expect(err).NotTo(HaveOccurred())
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
})
