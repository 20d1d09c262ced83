package clustertest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/client"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

var _ = Describe("Fixed-partition topics in a cluster", func() {
	It("moves a killed owner's partitions to a live node as partition chains, reads them in order once it returns, and migrates the topic after", func() {
		nodes, conns, _ := startCluster()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		r, err := nodeList(conns[0])
		Expect(err).NotTo(HaveOccurred())
		// A fixed topic owned by a node that does not take the clients'
		// requests.
		var uri string
		victim := -1
		for i := 0; victim < 0 && i < 60; i++ {
			u := fmt.Sprintf("persistent://public/default/legacy%d", i)
			d, err := client.NewAdmin(conns[0]).CreateFixedTopic(ctx, u, 4)
			Expect(err).NotTo(HaveOccurred())
			if owner := d.Segments[0].Owner; owner != r.Entry {
				uri, victim = u, int(owner[1]-'1')
			}
		}
		Expect(victim).To(BeNumerically(">=", 0), "no fixed topic placed off the entry node")
		other := (victim + 1) % 3
		produceGo(conns[other], uri, 0, 400, 8)
		readAll(conns[other], uri, "before", 400) // its state is on the owner's disk

		nodes[victim].kill()
		waitNodeGone(conns[other], nodes[victim].id)
		// Appends resume on a live node: each partition continues in a
		// successor segment with the same partition index.
		producePlainRetrying(conns[other], uri, 400, 500, 8)
		d := describe(conns[other], uri)
		Expect(d.Topic).To(Equal(uri))
		sealed, tips := map[int]uint64{}, map[int]api.SegmentInfo{}
		for _, s := range d.Segments {
			Expect(s.Partition).NotTo(BeNil(), "segment %d of a fixed topic", s.ID)
			switch s.State {
			case "sealed":
				Expect(s.Owner).To(Equal(nodes[victim].id))
				Expect(s.Children).To(HaveLen(1))
				sealed[*s.Partition] = s.ID
			case "active":
				Expect(s.Owner).NotTo(Equal(nodes[victim].id))
				tips[*s.Partition] = s
			}
		}
		Expect(sealed).To(HaveLen(4), "%+v", d.Segments)
		Expect(tips).To(HaveLen(4), "%+v", d.Segments)
		for p, s := range tips {
			Expect(s.Parents).To(Equal([]uint64{sealed[p]}), "partition %d's successor follows its sealed segment", p)
		}
		// A producer naming a partition appends to its successor, and the
		// reply says which partition that is.
		reply, err := conns[other].RequestMsg(&nats.Msg{Subject: produceSubject(uri),
			Header: nats.Header{api.HeaderPartition: []string{"2"}}, Data: []byte("500")}, 10*time.Second)
		Expect(err).NotTo(HaveOccurred())
		Expect(reply.Header.Get(micro.ErrorCodeHeader)).To(BeEmpty(), "%s", reply.Header.Get(micro.ErrorHeader))
		var res struct {
			Segment   uint64 `json:"segment"`
			Partition *int   `json:"partition"`
		}
		Expect(json.Unmarshal(reply.Data, &res)).To(Succeed())
		Expect(res.Segment).To(Equal(tips[2].ID), "%s", reply.Data)
		Expect(res.Partition).To(HaveValue(Equal(2)), "%s", reply.Data)

		// The node returns with its disk: the partitions' sealed segments
		// are read there ahead of their successors, every key in order.
		nodes[victim].start()
		waitAllLive(conns[other])
		produceGo(conns[other], uri, 501, 601, 8)
		readAll(conns[victim], uri, "after", 601)
		readSeqs(conns[other], uri, "before", 400, 601)

		// Migration of a topic whose partitions are chains: the children
		// follow the partitions' tips; the subscription goes on. (The
		// partition producer above holds it back without force.)
		_, err = client.NewAdmin(conns[other]).Migrate(ctx, api.MigrateRequest{Topic: uri})
		Expect(err).To(MatchError(ContainSubstring("LAYOUT_REFUSED")))
		m, err := client.NewAdmin(conns[other]).Migrate(ctx, api.MigrateRequest{Topic: uri, Force: true})
		Expect(err).NotTo(HaveOccurred())
		scalable := strings.Replace(uri, "persistent://", "topic://", 1)
		Expect(m.Topic).To(Equal(scalable))
		for _, s := range m.Segments {
			if s.State == "active" {
				Expect(s.Partition).To(BeNil())
				Expect(s.Parents).To(ConsistOf(tips[0].ID, tips[1].ID, tips[2].ID, tips[3].ID))
			}
		}
		produceGo(conns[other], scalable, 601, 700, 8)
		readSeqs(conns[other], scalable, "before", 601, 700)
		_, err = client.NewAdmin(conns[other]).DescribeTopic(ctx, uri)
		Expect(err).To(MatchError(ContainSubstring("TOPIC_MIGRATED")))
	})
})
