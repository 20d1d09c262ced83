package clustertest

import (
	"fmt"
	"slices"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// A majority/minority split of five nodes, the minority holding a
// majority of the topic's copies: the home and one follower of a
// replicated topic (three copies) cut off from the three other nodes,
// the metadata store's leader among those. The two can still commit
// between them (two of the three copies), the three cannot seal the
// topic's groups (one copy) and move it: the home, unless its side also
// holds a majority of the metadata stream's peers, must fence itself
// before its lease lapses and the others take the topic (never two
// owners), and nothing it acknowledged may be lost.

func splitFive(prefix string) {
	GinkgoHelper()
	const fault = "partition: five nodes split two (the home and a follower) from three"
	c := startChaosClusterSized("", 5, 5, "--replication-factor", "3")
	defer func() {
		for _, nd := range c.nodes {
			nd.kill()
		}
	}()
	uri, home, _ := c.topicFor(prefix, theHome)
	d := describe(c.conns[home], uri)
	minority := []int{home}
	for _, r := range d.Segments[0].Replicas {
		if i := slices.IndexFunc(c.nodes, func(nd *node) bool { return nd.id == r.Node }); i >= 0 && i != home && len(minority) < 2 {
			minority = append(minority, i)
		}
	}
	Expect(minority).To(HaveLen(2), "no follower of segment 0 of %s", uri)
	var majority []int
	for i := range c.nodes {
		if !slices.Contains(minority, i) {
			majority = append(majority, i)
		}
	}
	spared, reader := majority[0], majority[1]
	l, stop := writeThrough(c, uri, spared, home)
	defer stop()
	Eventually(l.acks).WithTimeout(time.Minute).WithPolling(50*time.Millisecond).Should(BeNumerically(">=", 100), "acknowledged before the split")

	l.mark("spared")
	cutAt := time.Now()
	ids := func(is []int) []string {
		var out []string
		for _, i := range is {
			out = append(out, c.nodes[i].id)
		}
		return out
	}
	c.net.Partition(ids(minority), ids(majority))
	fmt.Fprintf(GinkgoWriter, "%s: %v cut off from %v (home of %s: %s)\n", fault, ids(minority), ids(majority), uri, c.nodes[home].id)
	// Held past the home's lease: the others take the topic, once they
	// may.
	held := time.Now()
	Eventually(func() bool { return time.Since(held) >= 2*leaseTTL }).WithTimeout(2*leaseTTL + time.Minute).WithPolling(100 * time.Millisecond).Should(BeTrue())
	healAt := time.Now()
	c.net.HealAll()
	bothResume(l)
	stop()

	v := check(c.conns[reader], uri, "chaos-check", l)
	gap := l.longestGap("spared", cutAt)
	fmt.Fprintf(GinkgoWriter, "%s: %+v; writes through %s unavailable for %s at most; the home acknowledged %d after the cut's first second\n",
		fault, v, c.nodes[spared].id, gap, l.acksBetween("victim", cutAt.Add(time.Second), healAt))
	agreed := false
	defer func() { record(fault, v, []time.Duration{gap}, agreed) }()
	waitReplicasAgree(c.conns[spared], uri, v.acked-v.lost)
	Expect(oneLeaderPerTerm(c, uri)).To(BeNumerically(">", 0), "no raft entry found on two copies")
	agreed = true
	expectClean(v)
}

var _ = Describe("Faults of five nodes", func() {
	It("a split of two nodes holding two of a topic's three copies (its home among them) from three: nothing acknowledged lost, and never two owners", func() {
		if !chaosFull() {
			Skip("make chaos runs it (BRAID_CHAOS_ROUNDS)")
		}
		for round := range chaosRounds() {
			splitFive(fmt.Sprintf("five%d-", round))
		}
	})
})
