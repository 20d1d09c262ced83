package clustertest

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/braidmq/braid/client"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

var _ = Describe("Replication", func() {
	It("keeps every acknowledged message when a node is killed and its data directory lost (replication factor 3)", func() {
		nodes, conns, _ := startCluster("--replication-factor", "3")
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		uri := "topic://public/default/replicated"
		d, err := client.NewAdmin(conns[0]).CreateTopic(ctx, uri, 2)
		Expect(err).NotTo(HaveOccurred())
		home := int(d.Segments[0].Owner[1] - '1')
		for _, s := range d.Segments {
			Expect(s.Replicas).To(HaveLen(3), "segment %d: %+v", s.ID, s.Replicas)
			Expect(s.Replicas[0].Node).To(Equal(s.Owner))
		}
		other, third := (home+1)%3, (home+2)%3
		// Go and plain producers through the two nodes that are not the
		// home: every message acknowledged is on a majority of the three.
		produceGo(conns[other], uri, 0, 300, 8)
		producePlain(conns[third], uri, 300, 400, 8)
		readAll(conns[other], uri, "before", 400)

		// The home dies and its disk with it.
		nodes[home].kill()
		Expect(os.RemoveAll(nodes[home].dataDir)).To(Succeed())
		waitNodeGone(conns[other], nodes[home].id)
		// While it is down: everything acknowledged is read back, once,
		// per key in order, from the copies on the other two; writes go
		// on.
		readAll(conns[other], uri, "while-down", 400)
		producePlainRetrying(conns[other], uri, 400, 450, 8)
		readAll(conns[third], uri, "while-down-2", 450)

		// It returns under its id with an empty directory: a new member,
		// which holds none of the copies it held.
		nodes[home].start("--replication-factor", "3")
		waitAllLive(conns[other])
		r, err := nodeList(conns[other])
		Expect(err).NotTo(HaveOccurred())
		for _, n := range r.Nodes {
			if n.ID == nodes[home].id {
				Expect(n.Incarnation).NotTo(Equal(d.Segments[0].Replicas[0].Incarnation), "the wiped node came back under its old incarnation")
			}
		}
		produceGo(conns[other], uri, 450, 500, 8)
		readAll(conns[home], uri, "after", 500)
		fmt.Fprintf(GinkgoWriter, "layout after: %+v\n", describe(conns[other], uri).Segments)
	})
})
