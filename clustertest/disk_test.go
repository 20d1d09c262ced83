package clustertest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// Failing disks: on the disk-fault build, every fsync of one node's logs
// fails EIO, or every write ENOSPC (a full file system), for a while
// under load, then the disk heals. A replica whose log or state could not
// be made durable acknowledges nothing of it and fails alone; it is made
// again from its peers as a damaged copy is. Every acknowledged message
// must be read once, in its key's order, and the copies agree again.

// diskFaultBin is cmd/braid built with the braiddiskfault tag (its logs'
// writes and syncs fail as <data-dir>/disk-fault says), built once.
var diskFaultBin = sync.OnceValue(func() string {
	bin := filepath.Join(filepath.Dir(braidBin), "braid-diskfault")
	out, err := exec.Command("go", "build", "-tags", "braiddiskfault", "-o", bin, "github.com/braidmq/braid/cmd/braid").CombinedOutput()
	Expect(err).NotTo(HaveOccurred(), "go build -tags braiddiskfault ./cmd/braid: %s", out)
	return bin
})

// failDisk has node v's logs fail as line says ("" heals them).
func failDisk(c *chaosCluster, v int, line string) {
	GinkgoHelper()
	nd := c.nodes[v]
	Expect(os.WriteFile(filepath.Join(nd.dataDir, "disk-fault"), []byte(line), 0o644)).To(Succeed())
	want := "disk faults off"
	if line != "" {
		want = "disk faults on"
	}
	Eventually(func() string { return nd.logTail(200) }).WithTimeout(10*time.Second).WithPolling(20*time.Millisecond).
		Should(ContainSubstring(want), "%s's disk fault not set", nd.id)
}

func failingDisk(name string, v victim, line string) homeFault {
	return homeFault{name: name, victim: v,
		cut:  func(c *chaosCluster, i int) { failDisk(c, i, line) },
		heal: func(c *chaosCluster, i int) { failDisk(c, i, "") }}
}

var failingDisks = []homeFault{
	failingDisk("disk: every fsync of a follower's logs fails (EIO)", theFollower, "sync EIO"),
	failingDisk("disk: a follower's file system full (ENOSPC on every write)", theFollower, "write ENOSPC"),
	failingDisk("disk: every fsync of the home's logs fails (EIO)", theHome, "sync EIO"),
	failingDisk("disk: the home's file system full (ENOSPC on every write)", theHome, "write ENOSPC"),
}

var _ = Describe("Faults of failing disks", func() {
	for _, f := range failingDisks {
		It(f.name+", for 5 s under load: nothing it could not make durable acknowledged, no acknowledged message lost, duplicated or reordered, and the copies agree again", func() {
			if !chaosFull() {
				Skip("make chaos runs it (BRAID_CHAOS_ROUNDS)")
			}
			c := startChaosClusterOf(diskFaultBin(), "--replication-factor", "3")
			for round := range chaosRounds() {
				homeCut(c, f, fmt.Sprintf("eio%d-", round), 5*time.Second)
			}
		})
	}
})
