// Package clustertest specifies Braid as a cluster: Ginkgo specs that run
// three real `braid serve` processes on 127.0.0.1, joined in one embedded
// NATS cluster, and drive them only through NATS, as users would.
package clustertest

import (
	"os/exec"
	"path/filepath"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

func TestCluster(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Braid cluster")
}

// braidBin is cmd/braid built once for the suite.
var braidBin string

var _ = BeforeSuite(func() {
	goTool, err := exec.LookPath("go")
	Expect(err).NotTo(HaveOccurred(), "the cluster specs build cmd/braid and need the go tool")
	braidBin = filepath.Join(GinkgoT().TempDir(), "braid")
	out, err := exec.Command(goTool, "build", "-o", braidBin, "github.com/braidmq/braid/cmd/braid").CombinedOutput()
	Expect(err).NotTo(HaveOccurred(), "go build ./cmd/braid: %s", out)
})
