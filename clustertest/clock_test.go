package clustertest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// Clock trouble: one node's wall clock steps by three leases (30 s), back
// or forward, as an operator or NTP steps a real clock, while producers
// write through it and through another node; it steps back to the true
// time at the heal. Leases are measured on each node's clock that never
// steps, and the others' by the reader's own clock, so nothing is to
// happen: the victim keeps its lease (it never lapses, and no node takes
// its topics or its entry role: no two owners at once), and every
// acknowledged message is read once, in its key's order.

// clockStepBin is cmd/braid built with the braidclockstep tag (the wall
// clock stepped by what <data-dir>/clock-step says), built once.
var clockStepBin = sync.OnceValue(func() string {
	bin := filepath.Join(filepath.Dir(braidBin), "braid-clockstep")
	out, err := exec.Command("go", "build", "-tags", "braidclockstep", "-o", bin, "github.com/braidmq/braid/cmd/braid").CombinedOutput()
	Expect(err).NotTo(HaveOccurred(), "go build -tags braidclockstep ./cmd/braid: %s", out)
	return bin
})

// stepClock steps node v's wall clock to by from the true time.
func stepClock(c *chaosCluster, v int, by time.Duration) {
	GinkgoHelper()
	nd := c.nodes[v]
	Expect(os.WriteFile(filepath.Join(nd.dataDir, "clock-step"), []byte(by.String()), 0o644)).To(Succeed())
	Eventually(func() string { return nd.logTail(200) }).WithTimeout(10*time.Second).WithPolling(50*time.Millisecond).
		Should(ContainSubstring(fmt.Sprintf("the wall clock stepped\" offset=%s", by)), "%s's clock not stepped", nd.id)
}

func clockFault(name string, v victim, by time.Duration, small bool) homeFault {
	return homeFault{name: name, victim: v, small: small,
		cut:  func(c *chaosCluster, i int) { stepClock(c, i, by) },
		heal: func(c *chaosCluster, i int) { stepClock(c, i, 0) }}
}

var clockFaults = []homeFault{
	clockFault("clock: the home's wall clock stepped back 30 s (three leases), then forward again", theHome, -3*leaseTTL, true),
	clockFault("clock: the home's wall clock stepped forward 30 s, then back again", theHome, 3*leaseTTL, false),
	clockFault("clock: the entry node's wall clock stepped back 30 s, then forward again", theEntry, -3*leaseTTL, false),
	clockFault("clock: the entry node's wall clock stepped forward 30 s, then back again", theEntry, 3*leaseTTL, false),
}

var _ = Describe("Faults of clocks", func() {
	for _, f := range clockFaults {
		It(f.name+": no lease lapses, no topic or role moves, and no acknowledged message is lost, duplicated or reordered", func() {
			if !f.small && !chaosFull() {
				Skip("make chaos runs it (BRAID_CHAOS_ROUNDS)")
			}
			c := startChaosClusterOf(clockStepBin(), "--replication-factor", "3")
			for round := range chaosRounds() {
				homeCut(c, f, fmt.Sprintf("clock%d-", round), 2*leaseTTL)
			}
			for _, nd := range c.nodes {
				log := nd.logTail(100_000)
				for _, moved := range []string{"the membership lease had run out", "topic moved off a lost node", "another node took the entry role"} {
					Expect(strings.Contains(log, moved)).To(BeFalse(), "%s logged %q: a clock step was taken for a lost node", nd.id, moved)
				}
			}
		})
	}
})
