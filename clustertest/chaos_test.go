package clustertest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/braidmq/braid/client"
	"github.com/braidmq/braid/internal/faultnet"
	"github.com/nats-io/nats.go"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// The fault suite's cluster: three `braid serve` processes whose every
// node-to-node connection — NATS routes and the actor transport — goes
// through a faultnet proxy of its own (node a dials node b through the
// proxy a → b), so that a spec can cut, slow or break any link. Clients
// connect to the nodes directly: a client of a cut-off node still
// reaches it, as an application beside it would.

// chaosCluster is the nodes and their links.
type chaosCluster struct {
	nodes []*node
	conns []*nats.Conn
	net   *faultnet.Net
	// flags are each node's link flags (its proxies), by index.
	flags [][]string
	// started are the nodes started (waitLive waits for them).
	started map[string]bool
}

// startChaosCluster starts three nodes linked through proxies, with the
// given flags, and waits until each lists the three live.
func startChaosCluster(extra ...string) *chaosCluster {
	GinkgoHelper()
	return startChaosClusterOf("", extra...)
}

// startChaosClusterOf is startChaosCluster running binary bin ("": the
// suite's).
func startChaosClusterOf(bin string, extra ...string) *chaosCluster {
	GinkgoHelper()
	return startChaosClusterSized(bin, 3, 3, extra...)
}

// startChaosClusterSized is startChaosClusterOf with size nodes linked,
// the first running of them started (the others, by start, later).
func startChaosClusterSized(bin string, size, running int, extra ...string) *chaosCluster {
	GinkgoHelper()
	nodes := newCluster(size)
	for _, nd := range nodes {
		nd.bin = bin
	}
	fn := faultnet.New()
	DeferCleanup(fn.Close)
	actor := make([]string, len(nodes))
	for i := range nodes {
		actor[i] = freeAddr()
	}
	c := &chaosCluster{nodes: nodes, net: fn, flags: make([][]string, len(nodes)), started: map[string]bool{}}
	for i, a := range nodes {
		a.routes = nil
		var dial []string
		for j, b := range nodes {
			if i == j {
				continue
			}
			route, err := fn.Proxy(a.id, b.id, b.clusterAddr)
			Expect(err).NotTo(HaveOccurred())
			a.routes = append(a.routes, "nats://"+route)
			via, err := fn.Proxy(a.id, b.id, actor[j])
			Expect(err).NotTo(HaveOccurred())
			dial = append(dial, actor[j]+"="+via)
		}
		// The route address a node gives its peers leads nowhere: the
		// peers reach it only by their --routes, through the proxies (an
		// implicit route to its own listener would go round them).
		c.flags[i] = []string{"--actor-listen", actor[i], "--actor-dial", strings.Join(dial, ","), "--cluster-advertise", "127.0.0.1:1"}
	}
	for i := range running {
		c.start(i, extra...)
	}
	c.conns = make([]*nats.Conn, len(nodes))
	for i, nd := range nodes[:running] {
		c.conns[i] = connect(nd)
	}
	c.waitLive()
	return c
}

// waitLive waits until every node started lists those started live.
func (c *chaosCluster) waitLive() {
	GinkgoHelper()
	var nodes []*node
	var ids []string
	for _, nd := range c.nodes {
		if c.started[nd.id] {
			nodes, ids = append(nodes, nd), append(ids, nd.id)
		}
	}
	for _, nc := range c.conns {
		if nc == nil {
			continue
		}
		Eventually(func(g Gomega) {
			for _, nd := range nodes {
				if !nd.running() {
					StopTrying(fmt.Sprintf("%s exited (%v) while the cluster formed; its log:\n%s", nd.id, nd.waitErr, nd.logTail(30))).Now()
				}
			}
			r, err := nodeList(nc)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(servingNodes(r)).To(ConsistOf(ids))
		}).WithTimeout(90 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
	}
}

func (c *chaosCluster) start(i int, extra ...string) {
	GinkgoHelper()
	c.started[c.nodes[i].id] = true
	c.nodes[i].start(append(slices.Clone(c.flags[i]), extra...)...)
}

// others are the ids of every node but i.
func (c *chaosCluster) others(i int) []string {
	var out []string
	for j, nd := range c.nodes {
		if j != i {
			out = append(out, nd.id)
		}
	}
	return out
}

// victim names the node a fault strikes, in relation to a topic.
type victim int

const (
	theHome     victim = iota // the topic's home, not leading the metadata stream
	theMetaHome               // the topic's home, leading the metadata stream
	theEntry                  // the entry node (clients' requests), not the home
	theFollower               // a node holding copies only: neither home, entry nor metadata leader
	theMeta                   // the metadata stream's leader, not the home
)

// topicFor creates replicated topics until one stands to the nodes as v
// wants, and returns it, its home's index and the victim's.
func (c *chaosCluster) topicFor(prefix string, v victim) (uri string, home, target int) {
	GinkgoHelper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	index := func(id string) int {
		for i, nd := range c.nodes {
			if nd.id == id {
				return i
			}
		}
		return -1
	}
	for i := 0; i < 40; i++ {
		leader := index(metaStreamLeader(c.conns[0]))
		r, err := nodeList(c.conns[0])
		Expect(err).NotTo(HaveOccurred())
		entry := index(r.Entry)
		uri = fmt.Sprintf("topic://public/default/%s%d", prefix, i)
		d, err := client.NewAdmin(c.conns[0]).CreateTopic(ctx, uri, 2)
		Expect(err).NotTo(HaveOccurred())
		home = index(d.Segments[0].Owner)
		switch v {
		case theHome:
			if home != leader {
				return uri, home, home
			}
		case theMetaHome:
			if home == leader {
				return uri, home, home
			}
		case theEntry:
			if entry >= 0 && home != entry {
				return uri, home, entry
			}
		case theFollower:
			for j := range c.nodes {
				if j != home && j != entry && j != leader && entry >= 0 {
					return uri, home, j
				}
			}
		case theMeta:
			if leader >= 0 && home != leader {
				return uri, home, leader
			}
		}
	}
	Fail(fmt.Sprintf("no topic placed for victim %d", v))
	return "", 0, 0
}

// ledger is what the producers of a run were told: the seqs
// acknowledged, and those whose outcome they could not know (no answer
// in time, UNAVAILABLE: stored or not, once or more, each copy next to the last).
type ledger struct {
	mu      sync.Mutex
	acked   map[int]bool
	unknown map[int]bool
	// tried counts the requests of each seq sent.
	tried map[int]int
	// firstAck is when each producer's first acknowledgement after a
	// mark came (see since).
	marks map[string]time.Time
	waits map[string]time.Duration
	// times are when each producer's acknowledgements came.
	times map[string][]time.Time
}

func newLedger() *ledger {
	return &ledger{acked: map[int]bool{}, unknown: map[int]bool{}, tried: map[int]int{}, marks: map[string]time.Time{}, waits: map[string]time.Duration{}, times: map[string][]time.Time{}}
}

// mark starts timing name: the time to the next acknowledgement of a
// producer that reports under name.
func (l *ledger) mark(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.marks[name] = time.Now()
	delete(l.waits, name)
}

func (l *ledger) ack(name string, seq int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.acked[seq] = true
	l.times[name] = append(l.times[name], time.Now())
	if t, ok := l.marks[name]; ok {
		if _, done := l.waits[name]; !done {
			l.waits[name] = time.Since(t)
		}
	}
}

func (l *ledger) try(seq int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.tried[seq]++
}

// untry takes back a try whose request was never sent.
func (l *ledger) untry(seq int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.tried[seq]--
}

// acksOf counts name's acknowledgements.
func (l *ledger) acksOf(name string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.times[name])
}

// acks counts the seqs acknowledged.
func (l *ledger) acks() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acked)
}

func (l *ledger) maybe(seq int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.unknown[seq] = true
}

// acksBetween counts name's acknowledgements that came in [from, to).
func (l *ledger) acksBetween(name string, from, to time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := 0
	for _, t := range l.times[name] {
		if !t.Before(from) && t.Before(to) {
			k++
		}
	}
	return k
}

// longestGap is the longest time name's producer went without an
// acknowledgement from its last one before from on: how long its writes
// were unavailable across a fault that began at from.
func (l *ledger) longestGap(name string, from time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	times := l.times[name]
	k, _ := slices.BinarySearchFunc(times, from, func(t, from time.Time) int { return t.Compare(from) })
	k = max(k-1, 0)
	var gap time.Duration
	for ; k+1 < len(times); k++ {
		gap = max(gap, times[k+1].Sub(times[k]))
	}
	return gap
}

// wait is how long name's producer waited for its first acknowledgement
// after its mark (false: none yet).
func (l *ledger) wait(name string) (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	d, ok := l.waits[name]
	return d, ok
}

// chaosRow is one fault's line of make chaos's table.
type chaosRow struct {
	fault                                          string
	runs                                           int
	acked, lost, duplicated, reordered, unexpected int
	resentTwice, acksLost                          int
	acksChecked                                    bool
	unavailable                                    []time.Duration
	replicasAgreed                                 bool
}

var chaosTable = struct {
	sync.Mutex
	rows map[string]*chaosRow
	keys []string
}{rows: map[string]*chaosRow{}}

// record adds a run's verdict to fault's row.
func record(fault string, v verdict, unavailable []time.Duration, agreed bool) {
	chaosTable.Lock()
	defer chaosTable.Unlock()
	r, ok := chaosTable.rows[fault]
	if !ok {
		r = &chaosRow{fault: fault, replicasAgreed: true}
		chaosTable.rows[fault] = r
		chaosTable.keys = append(chaosTable.keys, fault)
	}
	r.runs++
	r.acked += v.acked
	r.lost += v.lost
	r.duplicated += v.duplicated
	r.reordered += v.reordered
	r.unexpected += v.unexpected
	r.resentTwice += v.resentTwice
	r.acksLost += v.acksLost
	r.acksChecked = r.acksChecked || v.acksChecked
	r.unavailable = append(r.unavailable, unavailable...)
	r.replicasAgreed = r.replicasAgreed && agreed
}

// chaosRounds is how many runs each fault gets: one in make test,
// BRAID_CHAOS_ROUNDS (make chaos) in full.
func chaosRounds() int {
	if n, err := strconv.Atoi(os.Getenv("BRAID_CHAOS_ROUNDS")); err == nil && n > 0 {
		return n
	}
	return 1
}

// chaosFull says whether the full suite runs (make chaos): every fault,
// not only the small set make test runs.
func chaosFull() bool { return os.Getenv("BRAID_CHAOS_ROUNDS") != "" }

// writeChaosTable writes the table to BRAID_CHAOS_TABLE (make chaos
// prints it), if set.
func writeChaosTable() {
	path := os.Getenv("BRAID_CHAOS_TABLE")
	if path == "" {
		return
	}
	chaosTable.Lock()
	defer chaosTable.Unlock()
	var b strings.Builder
	fmt.Fprintln(&b, "| fault | runs | acknowledged | lost | duplicated | reordered | unexpected | resent, stored again | consumer acks lost | unavailable p50 / max | replicas agreed |")
	fmt.Fprintln(&b, "|---|---|---|---|---|---|---|---|---|---|---|")
	for _, k := range chaosTable.keys {
		r := chaosTable.rows[k]
		un := "-"
		if len(r.unavailable) > 0 {
			d := slices.Clone(r.unavailable)
			slices.Sort(d)
			un = fmt.Sprintf("%.1f s / %.1f s", d[len(d)/2].Seconds(), d[len(d)-1].Seconds())
		}
		agreed := "yes"
		if !r.replicasAgreed {
			agreed = "NO"
		}
		acks := "-" // no subscription acknowledged before the fault
		if r.acksChecked {
			acks = strconv.Itoa(r.acksLost)
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %d | %d | %d | %s | %s | %s |\n", r.fault, r.runs, r.acked, r.lost, r.duplicated, r.reordered, r.unexpected, r.resentTwice, acks, un, agreed)
	}
	_ = os.WriteFile(path, []byte(b.String()), 0o644)
}

var _ = AfterSuite(writeChaosTable)

// homeCut runs fault f once on a new replicated topic: writers through
// a node the fault spares (keys k0..k7) and through the victim (m0..m7)
// write while the fault holds for hold, then it heals; writes through
// the spared node must resume, and once healed through the victim too,
// and a fresh reader must read every acknowledged message once and in
// its key's order, and the replicas of every unit agree.
//
// A silenced victim reaches no other node while cut: it must
// acknowledge nothing from a second after the cut (a request's timeout:
// what it answered then was committed before) to the heal; a silenced
// home must be taken for down by its raft peers' silence, before its
// lease lapses — which shows that every link of the victim goes
// through the proxies.
func homeCut(c *chaosCluster, f homeFault, prefix string, hold time.Duration) {
	GinkgoHelper()
	uri, home, target := c.topicFor(prefix, f.victim)
	spared := (target + 1) % 3
	if spared == home && f.victim != theHome && f.victim != theMetaHome {
		spared = (target + 2) % 3 // writes through a node other than the home, when the home is spared
	}
	l, stop := writeThrough(c, uri, spared, target)
	defer stop()
	Eventually(l.acks).WithTimeout(time.Minute).WithPolling(50*time.Millisecond).Should(BeNumerically(">=", 100), "acknowledged before the fault")
	// A subscription's acks, stored before the fault, must hold after it.
	reader := (target + 2) % 3
	consumed := ackBefore(c.conns[reader], uri, "chaos-acks", 50)

	l.mark("spared")
	cutAt := time.Now()
	f.cut(c, target)
	fmt.Fprintf(GinkgoWriter, "%s: %s cut for %s (home of %s: %s)\n", f.name, c.nodes[target].id, hold, uri, c.nodes[home].id)
	Eventually(func() bool { _, ok := l.wait("spared"); return ok }).WithTimeout(time.Minute).WithPolling(50*time.Millisecond).
		Should(BeTrue(), "writes through %s never resumed", c.nodes[spared].id)
	// Held past the raft election timeout, the beacons' and the lease's.
	held := time.Now()
	Eventually(func() bool { return time.Since(held) >= hold }).WithTimeout(hold + time.Minute).WithPolling(100 * time.Millisecond).Should(BeTrue())
	healAt := time.Now()
	f.heal(c, target)
	l.mark("victim")
	Eventually(func() bool { _, ok := l.wait("victim"); return ok }).WithTimeout(time.Minute).WithPolling(50*time.Millisecond).
		Should(BeTrue(), "writes through %s never resumed after the heal", c.nodes[target].id)
	stop()

	v := check(c.conns[reader], uri, "chaos-check", l)
	acksLost, after := acksHeld(c.conns[reader], uri, "chaos-acks", l, consumed)
	v.acksLost, v.acksChecked = acksLost, true
	v.add("the subscription that acknowledged before the fault", after)
	gap := l.longestGap("spared", cutAt)
	back, _ := l.wait("victim")
	fmt.Fprintf(GinkgoWriter, "%s: %+v (the Go producer's %d among them); writes through %s unavailable for %s at most, through %s for %s after the heal; %s acknowledged %d while cut (%d in its first second)\n",
		f.name, v, l.acksOf("go"), c.nodes[spared].id, gap, c.nodes[target].id, back, c.nodes[target].id,
		l.acksBetween("victim", cutAt.Add(time.Second), healAt), l.acksBetween("victim", cutAt, cutAt.Add(time.Second)))
	agreed := false
	defer func() { record(f.name, v, []time.Duration{gap}, agreed) }()
	waitReplicasAgree(c.conns[spared], uri, v.acked-v.lost)
	shared := oneLeaderPerTerm(c, uri)
	fmt.Fprintf(GinkgoWriter, "%s: %d raft entries found on two copies or more, each the same on all: one leader a term\n", f.name, shared)
	Expect(shared).To(BeNumerically(">", 0), "no raft entry found on two copies")
	agreed = true
	expectClean(v)
	if !f.silenced {
		return
	}
	Expect(l.acksBetween("victim", cutAt.Add(time.Second), healAt)).To(BeZero(), "writes the cut-off %s acknowledged", c.nodes[target].id)
	if f.victim == theHome {
		logs := ""
		for i, nd := range c.nodes {
			if i != target {
				logs += nd.logTail(2000)
			}
		}
		Expect(logs).To(MatchRegexp(`topic moved off a lost node.*`+regexp.QuoteMeta(uri)+`.*before_its_lease_lapsed=true`),
			"the topic did not move off its silent home before its lease lapsed")
	}
}

// homeFault is a fault of one node (the victim, by its relation to a
// replicated topic): what cuts it and what heals it.
type homeFault struct {
	name   string
	victim victim
	// silenced: the victim reaches no other node while cut (homeCut).
	silenced  bool
	cut, heal func(c *chaosCluster, victim int)
	// small: run in make test too (the others in make chaos only).
	small bool
}

func isolate(c *chaosCluster, home int) {
	c.net.Partition([]string{c.nodes[home].id}, c.others(home))
}

func healAll(c *chaosCluster, _ int) { c.net.HealAll() }

// strobes are the strobes running, stopped by the heal.
var strobes []func()

var homeFaults = []homeFault{
	{name: "partition: the home isolated", silenced: true, cut: isolate, heal: healAll, small: true},
	{name: "partition: the home isolated, leading the metadata stream", victim: theMetaHome, silenced: true, cut: isolate, heal: healAll},
	{name: "partition: the entry node isolated (not the home)", victim: theEntry, silenced: true, cut: isolate, heal: healAll},
	{name: "partition: a follower isolated", victim: theFollower, silenced: true, cut: isolate, heal: healAll},
	{name: "partition: the metadata leader isolated (not the home)", victim: theMeta, silenced: true, cut: isolate, heal: healAll},
	{name: "pause: the metadata leader stopped (not the home)", victim: theMeta, silenced: true, cut: func(c *chaosCluster, v int) {
		c.nodes[v].signal(syscall.SIGSTOP)
	}, heal: func(c *chaosCluster, v int) { c.nodes[v].signal(syscall.SIGCONT) }},
	{name: "one-way cut: the home's bytes to the others", cut: func(c *chaosCluster, home int) {
		for _, o := range c.others(home) {
			c.net.Cut(c.nodes[home].id, o)
		}
	}, heal: healAll},
	{name: "one-way cut: the others' bytes to the home", cut: func(c *chaosCluster, home int) {
		for _, o := range c.others(home) {
			c.net.Cut(o, c.nodes[home].id)
		}
	}, heal: healAll},
	{name: "strobe: the home's links cut and healed every 300 ms", cut: func(c *chaosCluster, home int) {
		for _, o := range c.others(home) {
			strobes = append(strobes, c.net.Strobe(c.nodes[home].id, o, 300*time.Millisecond))
		}
	}, heal: func(c *chaosCluster, _ int) {
		for _, stop := range strobes {
			stop()
		}
		strobes = nil
	}},
	{name: "latency: 200 ms each way on the home's links", cut: func(c *chaosCluster, home int) {
		for _, o := range c.others(home) {
			c.net.Latency(c.nodes[home].id, o, 200*time.Millisecond)
			c.net.Latency(o, c.nodes[home].id, 200*time.Millisecond)
		}
	}, heal: healAll},
	{name: "pause: the home stopped (SIGSTOP) past every timeout", silenced: true, cut: func(c *chaosCluster, home int) {
		c.nodes[home].signal(syscall.SIGSTOP)
	}, heal: func(c *chaosCluster, home int) { c.nodes[home].signal(syscall.SIGCONT) }},
}

var _ = Describe("Faults", func() {
	for _, f := range homeFaults {
		It(f.name+", then healed: no acknowledged message lost, duplicated or reordered, and the replicas agree", func() {
			if !f.small && !chaosFull() {
				Skip("make chaos runs it (BRAID_CHAOS_ROUNDS)")
			}
			c := startChaosCluster("--replication-factor", "3")
			for round := range chaosRounds() {
				homeCut(c, f, fmt.Sprintf("fault%d-", round), 8*time.Second)
			}
		})
	}
})

// powerLossBin is cmd/braid built with the braidpowerloss tag (its logs'
// writes kept in memory until synced: kill -9 loses what a power cut
// would), built once.
var powerLossBin = sync.OnceValue(func() string {
	bin := filepath.Join(filepath.Dir(braidBin), "braid-powerloss") // beside braidBin, for the suite
	out, err := exec.Command("go", "build", "-tags", "braidpowerloss", "-o", bin, "github.com/braidmq/braid/cmd/braid").CombinedOutput()
	Expect(err).NotTo(HaveOccurred(), "go build -tags braidpowerloss ./cmd/braid: %s", out)
	return bin
})

// powerLoss runs one power cut on the power-loss build: writers through
// two nodes (keys k*, m*) until enough is acknowledged, then kill -9 of
// the nodes in cut (all at once), which lose what they had not synced;
// started again, the writers go on until both have been acknowledged
// again, and a fresh reader must read every acknowledged message once,
// in its key's order, and the replicas agree.
func powerLoss(c *chaosCluster, fault, prefix string, cut func(home int) []int) {
	GinkgoHelper()
	uri, home, _ := c.topicFor(prefix, theHome)
	other := (home + 1) % 3
	l, stop := writeThrough(c, uri, other, home)
	defer stop()
	Eventually(l.acks).WithTimeout(time.Minute).WithPolling(50*time.Millisecond).Should(BeNumerically(">=", 300), "acknowledged before the power cut")
	killed := cut(home)
	for _, i := range killed {
		_ = c.nodes[i].cmd.Process.Kill() // all at once, then reaped
	}
	for _, i := range killed {
		c.nodes[i].kill()
	}
	before := l.acks()
	fmt.Fprintf(GinkgoWriter, "%s: %d nodes killed on the power-loss build with %d messages acknowledged (home of %s: %s)\n", fault, len(killed), before, uri, c.nodes[home].id)
	for _, i := range killed {
		c.start(i, "--replication-factor", "3")
	}
	c.waitLive()
	bothResume(l)
	stop()
	v := check(c.conns[other], uri, "chaos-check", l)
	fmt.Fprintf(GinkgoWriter, "%s: %+v\n", fault, v)
	agreed := false
	defer func() { record(fault, v, nil, agreed) }()
	waitReplicasAgree(c.conns[other], uri, v.acked-v.lost)
	Expect(oneLeaderPerTerm(c, uri)).To(BeNumerically(">", 0), "no raft entry found on two copies")
	agreed = true
	expectClean(v)
}

var _ = Describe("Faults of power", func() {
	for _, f := range []struct {
		name string
		cut  func(home int) []int
	}{
		{"power loss: every node at once", func(int) []int { return []int{0, 1, 2} }},
		{"power loss: the home alone", func(home int) []int { return []int{home} }},
	} {
		It(f.name+", on the power-loss build (writes kept in memory until synced), started again: no acknowledged message lost", func() {
			if !chaosFull() {
				Skip("make chaos runs it (BRAID_CHAOS_ROUNDS)")
			}
			c := startChaosClusterOf(powerLossBin(), "--replication-factor", "3")
			for round := range chaosRounds() {
				powerLoss(c, f.name, fmt.Sprintf("power%d-", round), f.cut)
			}
		})
	}
})
