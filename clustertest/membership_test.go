package clustertest

import (
	"context"
	"fmt"
	"time"

	"github.com/braidmq/braid/client"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// Membership under load: a cluster of three at three copies, written by
// two plain producers (through the topic's home and through another
// node); a fourth node joins, and the home is drained — its topic's
// active segments sealed and given successors on the other nodes, the
// new one among them, while the writers go on. Every acknowledged message
// must be read once, in its key's order, and the copies of every unit
// agree; nothing active is left on the drained node.

// joinAndDrain runs one round on a fresh cluster of four linked nodes,
// three started.
func joinAndDrain(prefix string) {
	GinkgoHelper()
	const fault = "membership: a node added and the home drained"
	c := startChaosClusterSized("", 4, 3, "--replication-factor", "3")
	defer func() { // the next round's cluster runs alone
		for _, nd := range c.nodes {
			nd.kill()
		}
	}()
	uri, home, _ := c.topicFor(prefix, theHome)
	spared := (home + 1) % 3
	l, stop := writeThrough(c, uri, spared, home)
	defer stop()
	Eventually(l.acks).WithTimeout(time.Minute).WithPolling(50*time.Millisecond).Should(BeNumerically(">=", 300), "acknowledged before the join")

	c.start(3, "--replication-factor", "3")
	c.conns[3] = connect(c.nodes[3])
	c.waitLive()
	l.mark("spared")
	drainAt := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	reply, err := client.NewAdmin(c.conns[spared]).DrainNode(ctx, c.nodes[home].id)
	Expect(err).NotTo(HaveOccurred())
	fmt.Fprintf(GinkgoWriter, "%s: drained %s (home of %s): %+v\n", fault, c.nodes[home].id, uri, reply)
	Expect(reply.Failed).To(BeEmpty())
	Expect(reply.Topics).To(BeNumerically(">=", 1))
	// The writers go on through both nodes, the drained one included.
	bothResume(l)
	acked := l.acks()
	Eventually(l.acks).WithTimeout(time.Minute).WithPolling(50*time.Millisecond).Should(BeNumerically(">=", acked+300), "writes after the drain")
	stop()

	v := check(c.conns[3], uri, "chaos-check", l)
	gap := l.longestGap("spared", drainAt)
	fmt.Fprintf(GinkgoWriter, "%s: %+v; writes through %s unavailable for %s at most\n", fault, v, c.nodes[spared].id, gap)
	agreed := false
	defer func() { record(fault, v, []time.Duration{gap}, agreed) }()
	d := describe(c.conns[3], uri)
	joined := false
	for _, s := range d.Segments {
		if s.State != "active" {
			continue
		}
		Expect(s.Owner).NotTo(Equal(c.nodes[home].id), "segment %d still homed on the drained node", s.ID)
		for _, r := range s.Replicas {
			Expect(r.Node).NotTo(Equal(c.nodes[home].id), "segment %d keeps a copy on the drained node", s.ID)
			joined = joined || r.Node == c.nodes[3].id
		}
	}
	Expect(joined).To(BeTrue(), "no active segment has a copy on the node that joined")
	waitReplicasAgree(c.conns[spared], uri, v.acked-v.lost)
	Expect(oneLeaderPerTerm(c, uri)).To(BeNumerically(">", 0), "no raft entry found on two copies")
	agreed = true
	expectClean(v)
}

var _ = Describe("Faults of membership", func() {
	It("a node added and the topic's home drained while plain producers write: no acknowledged message lost, duplicated or reordered, and the copies agree", func() {
		if !chaosFull() {
			Skip("make chaos runs it (BRAID_CHAOS_ROUNDS)")
		}
		for round := range chaosRounds() {
			joinAndDrain(fmt.Sprintf("member%d-", round))
		}
	})
})
