package clustertest

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/client"
	"github.com/nats-io/nats.go"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// leaseTTL is the nodes' membership lease in the specs. Longer than the
// metadata store's leader elections (JetStream's Raft election timeout is
// 4-9 s), during which no lease can be renewed: with a shorter lease, the
// loss of the node leading the store's stream made every node's lease
// lapse for a moment, and specs failed on what that moment refused rather
// than on what they check. The specs check behaviour; the time a loss
// takes at the default lease is measured by benchmarks/cluster.
const leaseTTL = 10 * time.Second

// node is one `braid serve` process of the cluster, started again on the
// same data directory and addresses after a kill.
type node struct {
	id, dataDir, natsAddr, clusterAddr string
	routes                             []string
	logPath                            string
	cmd                                *exec.Cmd
	exited                             chan struct{}
	waitErr                            error
	// bin is the braid binary it runs ("": braidBin).
	bin string
}

// The ports come from below the kernel's ephemeral range (32768 and up
// on Linux), which it hands out for bind(":0") and for the local end of
// every outgoing connection: a port picked from that range, closed, and
// bound by a node a moment later may meanwhile be another socket's (a
// node's actor listener, a route being dialled), and the node would not
// start. Nor is one address handed out twice in a process.
func freeAddr() string {
	GinkgoHelper()
	usedMu.Lock()
	defer usedMu.Unlock()
	for range 1000 {
		addr := fmt.Sprintf("127.0.0.1:%d", 20000+rand.IntN(12000))
		if used[addr] {
			continue
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			continue // someone else's
		}
		l.Close()
		used[addr] = true
		return addr
	}
	Fail("no free port in [20000, 32000)")
	return ""
}

// used are the addresses freeAddr handed out in this process.
var (
	usedMu sync.Mutex
	used   = map[string]bool{}
)

// newCluster prepares n nodes (n1..nN) routed to each other; none runs.
func newCluster(n int) []*node {
	GinkgoHelper()
	dir := GinkgoT().TempDir()
	if keep := os.Getenv("BRAID_KEEP_NODES"); keep != "" {
		// For a look afterwards: the nodes' logs and data directories stay.
		var err error
		dir, err = os.MkdirTemp(keep, "cluster-")
		Expect(err).NotTo(HaveOccurred())
		GinkgoWriter.Printf("the nodes' directories: %s\n", dir)
	}
	nodes := make([]*node, n)
	for i := range nodes {
		id := fmt.Sprintf("n%d", i+1)
		nodes[i] = &node{id: id, dataDir: filepath.Join(dir, id), natsAddr: freeAddr(), clusterAddr: freeAddr(),
			logPath: filepath.Join(dir, id+".log")}
	}
	for _, a := range nodes {
		for _, b := range nodes {
			if a != b {
				a.routes = append(a.routes, "nats://"+b.clusterAddr)
			}
		}
	}
	DeferCleanup(func() {
		for _, nd := range nodes {
			nd.kill()
			if CurrentSpecReport().Failed() {
				GinkgoWriter.Printf("--- %s's log, last lines:\n%s\n", nd.id, nd.logTail(40))
			}
		}
	})
	return nodes
}

func (nd *node) url() string { return "nats://" + nd.natsAddr }

// defaultFactor is the flags of a node at the default replication factor
// (0: 3 in a cluster of three nodes).
var defaultFactor = []string{"--replication-factor", "0"}

// args are the serve flags of the node; with an external NATS (a
// --nats-url in extra) it runs no server of its own.
func (nd *node) args(extra []string) []string {
	args := []string{"serve", "--node-id", nd.id, "--data-dir", nd.dataDir,
		"--metrics-listen", "off", "--lease-ttl", leaseTTL.String(), "--log-level", "info"}
	if !slices.Contains(extra, "--rebalance-interval") {
		// Topics stay where the specs put them, but in the rebalancing spec.
		args = append(args, "--rebalance-interval", "-1s")
	}
	if !slices.Contains(extra, "--replication-factor") {
		// The specs of placement, moves and takeovers are of one copy
		// per segment (replicated segments stay on their home); the
		// replication specs give a factor, or defaultFactor.
		args = append(args, "--replication-factor", "1")
	}
	if !slices.Contains(extra, "--nats-url") {
		args = append(args, "--nats-listen", nd.natsAddr, "--cluster-listen", nd.clusterAddr, "--routes", strings.Join(nd.routes, ","))
	}
	return append(args, extra...)
}

// start runs the node's process; it does not wait for it to serve.
func (nd *node) start(extra ...string) {
	GinkgoHelper()
	f, err := os.OpenFile(nd.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	Expect(err).NotTo(HaveOccurred())
	bin := braidBin
	if nd.bin != "" {
		bin = nd.bin
	}
	cmd := exec.Command(bin, nd.args(extra)...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	Expect(cmd.Start()).To(Succeed())
	nd.cmd, nd.exited = cmd, make(chan struct{})
	go func(exited chan struct{}) {
		nd.waitErr = cmd.Wait()
		f.Close()
		close(exited)
	}(nd.exited)
}

// kill sends SIGKILL (if it runs) and waits until it is reaped.
func (nd *node) kill() {
	if nd.cmd == nil {
		return
	}
	_ = nd.cmd.Process.Kill()
	select {
	case <-nd.exited:
	case <-time.After(10 * time.Second):
	}
	nd.cmd = nil
}

// signal sends sig to the running process.
func (nd *node) signal(sig syscall.Signal) {
	GinkgoHelper()
	Expect(nd.cmd).NotTo(BeNil())
	Expect(syscall.Kill(nd.cmd.Process.Pid, sig)).To(Succeed())
}

func (nd *node) running() bool {
	if nd.cmd == nil {
		return false
	}
	select {
	case <-nd.exited:
		return false
	default:
		return true
	}
}

func (nd *node) logTail(n int) string {
	b, _ := os.ReadFile(nd.logPath)
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	return string(bytes.Join(lines[max(0, len(lines)-n):], []byte("\n")))
}

// connect opens a client connection to the node's embedded NATS server
// only (no failover to the others: the specs choose the node).
func connect(nd *node) *nats.Conn {
	GinkgoHelper()
	var nc *nats.Conn
	Eventually(func() error {
		var err error
		nc, err = nats.Connect(nd.url(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond), nats.DontRandomize(),
			nats.IgnoreDiscoveredServers())
		return err
	}).WithTimeout(30 * time.Second).WithPolling(50 * time.Millisecond).Should(Succeed())
	DeferCleanup(nc.Close)
	return nc
}

// nodeList asks node.list through nc.
func nodeList(nc *nats.Conn) (api.NodeListReply, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return client.NewAdmin(nc).ListNodes(ctx)
}

// servingNodes returns the ids of the nodes node.list names live and no
// longer starting: those placement gives topics to.
func servingNodes(r api.NodeListReply) []string {
	var ids []string
	for _, n := range r.Nodes {
		if n.Live && !n.Starting {
			ids = append(ids, n.ID)
		}
	}
	return ids
}

// liveNodes returns the ids of the live nodes node.list names.
func liveNodes(r api.NodeListReply) []string {
	var ids []string
	for _, n := range r.Nodes {
		if n.Live {
			ids = append(ids, n.ID)
		}
	}
	return ids
}
