package clustertest

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/client"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

var _ = Describe("Replication", func() {
	It("keeps every acknowledged message when a node is killed and its data directory lost (replication factor 3, the default of three nodes)", func() {
		// The default factor, and consumer groups' state compacted into a
		// new generation every few acks.
		args := append(slices.Clone(defaultFactor), "--group-compact-after", "8")
		nodes, conns, _ := startCluster(args...)
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
		readQueue(conns[third], uri, "work", 0, 400)

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
		// The subscription that read and acknowledged the first 400 on
		// the home carries on from there: its acks were committed on
		// the other two as well.
		readSeqs(conns[third], uri, "before", 400, 450)
		readQueue(conns[other], uri, "work", 400, 450)

		// It returns under its id with an empty directory: a new member,
		// which holds none of the copies it held.
		nodes[home].start(args...)
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
		readSeqs(conns[home], uri, "before", 450, 500)
		waitReplicasAgree(conns[other], uri, 500)
		fmt.Fprintf(GinkgoWriter, "layout after: %+v\n", describe(conns[other], uri).Segments)
	})
})

var _ = Describe("A replicated topic left alone while its home is lost", func() {
	It("serves again when the home returns with an empty disk: nothing acknowledged lost, its subscription carries on from its acks", func() {
		nodes, conns, _ := startCluster(defaultFactor...)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		uri := "topic://public/default/idlehome"
		d, err := client.NewAdmin(conns[0]).CreateTopic(ctx, uri, 2)
		Expect(err).NotTo(HaveOccurred())
		home := int(d.Segments[0].Owner[1] - '1')
		other := (home + 1) % 3
		produceGo(conns[other], uri, 0, 200, 8)
		readSeqs(conns[other], uri, "acked", 0, 200)
		// The home dies with its disk, and nothing asks for the topic
		// until it is back, empty, under its id.
		nodes[home].kill()
		Expect(os.RemoveAll(nodes[home].dataDir)).To(Succeed())
		waitNodeGone(conns[other], nodes[home].id)
		nodes[home].start(defaultFactor...)
		waitAllLive(conns[other])
		producePlainRetrying(conns[other], uri, 200, 250, 8)
		readSeqs(conns[home], uri, "acked", 200, 250)
		readAll(conns[other], uri, "all", 250)
	})
})

var _ = Describe("A replicated subscription deleted and made again under its name", func() {
	It("starts from nothing: the copies the other nodes kept of the deleted one's state are not taken for its own", func() {
		nodes, conns, _ := startCluster(defaultFactor...)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		uri := "topic://public/default/remade"
		d, err := client.NewAdmin(conns[0]).CreateTopic(ctx, uri, 1)
		Expect(err).NotTo(HaveOccurred())
		Expect(d.Segments[0].Replicas).To(HaveLen(3))
		produceGo(conns[0], uri, 0, 200, 8)
		readSeqs(conns[1], uri, "again", 0, 200) // every message acknowledged
		_, err = client.NewAdmin(conns[2]).DeleteSubscription(ctx, uri, "again", false)
		Expect(err).NotTo(HaveOccurred())
		// The same name again: a new subscription, from the earliest; its
		// first join is answered (no leader of the deleted one's state
		// stands in its way).
		c, err := client.NewStreamConsumer(conns[2], uri, "again")
		Expect(err).NotTo(HaveOccurred())
		Expect(c.Close(ctx)).To(Succeed())
		readAll(conns[2], uri, "again", 200)
		// Its state is a raft group of its own, not the deleted one's
		// (whose copies the followers keep until they open a later one).
		first := regexp.MustCompile(`subscription=again generation=(\d+) from=0 `)
		gens := map[string]bool{}
		for _, nd := range nodes {
			for _, m := range first.FindAllStringSubmatch(nd.logTail(400), -1) {
				gens[m[1]] = true
			}
		}
		Expect(gens).To(HaveLen(2), "the first generations of the two subscriptions: %v", gens)
		// The copies the followers kept of the deleted one's state go (the
		// nodes sweep them every 30 s): only the new one's stay.
		newest := ""
		for g := range gens {
			if len(g) > len(newest) || len(g) == len(newest) && g > newest {
				newest = g
			}
		}
		Eventually(func() []string {
			left := map[string]bool{}
			for _, nd := range nodes {
				dirs, _ := filepath.Glob(filepath.Join(nd.dataDir, "subscriptions", "*", "again", "r*"))
				for _, d := range dirs {
					left[filepath.Base(d)] = true
				}
			}
			return slices.Sorted(maps.Keys(left))
		}).WithTimeout(90 * time.Second).WithPolling(time.Second).Should(Equal([]string{"r" + newest}))
	})
})

var _ = Describe("A replicated subscription moved to a node without a copy of its state", func() {
	It("takes its committed state from one of its replicas: what it acknowledged is not read again", func() {
		nodes, conns, _ := startCluster(defaultFactor...)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		uri := "topic://public/default/twocopies"
		two := 2
		d, err := client.NewAdmin(conns[0]).CreateTopic(ctx, uri, 1, client.WithTopicPolicies(&api.Policies{ReplicationFactor: &two}))
		Expect(err).NotTo(HaveOccurred())
		Expect(d.Segments[0].Replicas).To(HaveLen(2))
		home := int(d.Segments[0].Owner[1] - '1')
		third := -1
		for i, nd := range nodes {
			if !slices.ContainsFunc(d.Segments[0].Replicas, func(r api.ReplicaInfo) bool { return r.Node == nd.id }) {
				third = i
			}
		}
		Expect(third).To(BeNumerically(">=", 0))
		produceGo(conns[third], uri, 0, 200, 8)
		readSeqs(conns[third], uri, "acked", 0, 200)
		// The topic moves to the node that holds no copy (the way the
		// rebalancer moves topics: the home asked to move them).
		body, err := json.Marshal(map[string]any{"to": nodes[third].id, "segments": 1})
		Expect(err).NotTo(HaveOccurred())
		_, err = conns[third].Request("braid.cluster.move."+nodes[home].id, body, time.Minute)
		Expect(err).NotTo(HaveOccurred())
		Eventually(func() string {
			return describe(conns[third], uri).Segments[len(describe(conns[third], uri).Segments)-1].Owner
		}).
			WithTimeout(30 * time.Second).Should(Equal(nodes[third].id))
		producePlainRetrying(conns[third], uri, 200, 250, 8)
		readSeqs(conns[home], uri, "acked", 200, 250)
	})
})

var _ = Describe("A replicated topic's home that stops answering", func() {
	It("loses the topic before its lease lapses (its groups sealed from the other copies), and, continued, serves it no more: every message once, in key order", func() {
		nodes, conns, _ := startCluster("--replication-factor", "3")
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// A home that does not lead the metadata stream: while that one
		// elects a leader (4-9 s), nothing can move (the lease decides).
		leader := metaStreamLeader(conns[0])
		var uri string
		home := -1
		for i := 0; home < 0 || nodes[home].id == leader; i++ {
			Expect(i).To(BeNumerically("<", 30), "no topic placed off the metadata leader %s", leader)
			uri = fmt.Sprintf("topic://public/default/paused%d", i)
			d, err := client.NewAdmin(conns[0]).CreateTopic(ctx, uri, 2)
			Expect(err).NotTo(HaveOccurred())
			home = int(d.Segments[0].Owner[1] - '1')
		}
		other, third := (home+1)%3, (home+2)%3
		produceGo(conns[other], uri, 0, 200, 8)

		nodes[home].signal(syscall.SIGSTOP)
		stopped := true
		defer func() {
			if stopped {
				nodes[home].signal(syscall.SIGCONT)
			}
		}()
		// Writes go on through the others: the topic moved while the
		// home's lease (10 s here) still held.
		producePlainResending(conns[third], uri, 200, 230, 8, true)
		Eventually(func() string { return nodes[other].logTail(400) + nodes[third].logTail(400) }).WithTimeout(10 * time.Second).
			WithPolling(200 * time.Millisecond).Should(MatchRegexp(`topic moved off a lost node.*` + regexp.QuoteMeta(uri) + `.*before_its_lease_lapsed=true`))

		// Continued, the old home finds its groups sealed by the others
		// and stops the topic (or, if the pause outlasted its lease, it
		// stops every topic before it serves again); what it is asked goes
		// to the new home, and a subscription through it reads everything.
		nodes[home].signal(syscall.SIGCONT)
		stopped = false
		producePlainResending(conns[home], uri, 230, 330, 8, true)
		Eventually(func() string { return nodes[home].logTail(400) }).WithTimeout(10 * time.Second).WithPolling(200 * time.Millisecond).
			Should(Or(MatchRegexp(`topic moved away while active here.*`+regexp.QuoteMeta(uri)), ContainSubstring("the membership lease had run out")))
		readAll(conns[home], uri, "after", 330)
		readAll(conns[other], uri, "after-other", 330)
		waitReplicasAgree(conns[other], uri, 330)
	})
})

// metaStreamLeader names the server leading the metadata bucket's stream.
func metaStreamLeader(nc *nats.Conn) string {
	GinkgoHelper()
	js, err := jetstream.New(nc)
	Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, "KV_braid-meta")
	Expect(err).NotTo(HaveOccurred())
	info, err := st.Info(ctx)
	Expect(err).NotTo(HaveOccurred())
	Expect(info.Cluster).NotTo(BeNil())
	return info.Cluster.Leader
}

// replicationRounds is how many kills the kill-and-wipe spec makes: a few
// in make test, BRAID_REPLICATION_ROUNDS (make replication-spec: 20) in
// full.
func replicationRounds() int {
	if n, err := strconv.Atoi(os.Getenv("BRAID_REPLICATION_ROUNDS")); err == nil && n > 0 {
		return n
	}
	return 3
}

var _ = Describe("Replication under repeated loss", func() {
	It("loses no acknowledged message or ack over kills of a random node with its data directory, and gets the replication factor back by itself", func() {
		nodes, conns, _ := startCluster("--replication-factor", "3", "--dead-after", "5s")
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		uri := "topic://public/default/wiped"
		d, err := client.NewAdmin(conns[0]).CreateTopic(ctx, uri, 2)
		Expect(err).NotTo(HaveOccurred())
		rng := rand.New(rand.NewPCG(uint64(GinkgoRandomSeed()), 29))
		seq, acked := 0, 0
		victim := int(d.Segments[0].Owner[1] - '1') // the topic's home first
		for round := range replicationRounds() {
			a, b := (victim+1)%3, (victim+2)%3
			produceGo(conns[a], uri, seq, seq+100, 8)
			producePlain(conns[b], uri, seq+100, seq+150, 8)
			seq += 150
			killed := time.Now()
			nodes[victim].kill()
			Expect(os.RemoveAll(nodes[victim].dataDir)).To(Succeed())
			waitNodeGone(conns[a], nodes[victim].id)
			sctx, scancel := context.WithTimeout(context.Background(), 20*time.Second)
			st, err := client.NewAdmin(conns[a]).Stats(sctx, uri)
			scancel()
			fmt.Fprintf(GinkgoWriter, "round %d, %s down: %d messages, buckets %+v, %v\n", round, nodes[victim].id, st.Messages, st.Buckets, err)
			// Every acknowledged message, once, per key in order, while
			// the node is down; writes go on.
			readAll(conns[a], uri, fmt.Sprintf("down-%d", round), seq)
			// node.list shows segments short of a copy.
			Eventually(func() int { return underReplicated(conns[a]) }).WithTimeout(30*time.Second).WithPolling(500*time.Millisecond).
				Should(BeNumerically(">", 0), "under-replicated segments while %s is down", nodes[victim].id)
			producePlainRetrying(conns[b], uri, seq, seq+30, 8)
			seq += 30
			// One subscription reads on from round to round: what it
			// acknowledged before the kill is never read again.
			readSeqs(conns[b], uri, "acked", acked, seq)
			acked = seq
			fmt.Fprintf(GinkgoWriter, "round %d: killed %s (wiped); %d messages read back and written on in %s\n", round, nodes[victim].id, seq, time.Since(killed))
			nodes[victim].start("--replication-factor", "3", "--dead-after", "5s")
			waitAllLive(conns[a])
			readAll(conns[victim], uri, fmt.Sprintf("back-%d", round), seq)
			waitFullyReplicated(conns[a], uri)
			Eventually(func() int { return underReplicated(conns[a]) }).WithTimeout(30*time.Second).WithPolling(500*time.Millisecond).
				Should(BeZero(), "under-replicated segments once every copy is made again")
			waitReplicasAgree(conns[a], uri, seq)
			victim = rng.IntN(3)
		}
	})
})

// underReplicated sums what node.list says of the nodes' under-replicated
// segments and consumer groups short of a copy (-1 when it does not
// answer).
func underReplicated(nc *nats.Conn) int {
	r, err := nodeList(nc)
	if err != nil {
		return -1
	}
	sum := 0
	for _, n := range r.Nodes {
		if n.Live {
			sum += n.UnderReplicated + n.GroupsShort
		}
	}
	return sum
}

// waitFullyReplicated waits until every segment of uri has three copies,
// each on a live node under its current incarnation.
func waitFullyReplicated(nc *nats.Conn, uri string) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		r, err := nodeList(nc)
		g.Expect(err).NotTo(HaveOccurred())
		current := map[string]string{}
		for _, n := range r.Nodes {
			if n.Live {
				current[n.ID] = n.Incarnation
			}
		}
		for _, s := range describe(nc, uri).Segments {
			if s.State == "deleted" {
				continue
			}
			g.Expect(s.Replicas).To(HaveLen(3), "segment %d (%s)", s.ID, s.State)
			for _, rep := range s.Replicas {
				g.Expect(current[rep.Node]).To(Equal(rep.Incarnation), "segment %d (%s): the copy on %s", s.ID, s.State, rep.Node)
			}
		}
	}).WithTimeout(2 * time.Minute).WithPolling(500 * time.Millisecond).Should(Succeed())
}

// waitReplicasAgree waits until topic.verify finds every replica of every
// unit of uri answering with the same committed records, at least
// messages of them compared in all, and the copies of each sealed unit
// ending at the same record.
func waitReplicasAgree(nc *nats.Conn, uri string, messages int) {
	GinkgoHelper()
	waitReplicasAgreeWithin(nc, uri, messages, time.Minute)
}

// waitReplicasAgreeWithin is waitReplicasAgree with its own patience.
func waitReplicasAgreeWithin(nc *nats.Conn, uri string, messages int, patience time.Duration) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		v, err := client.NewAdmin(nc).VerifyReplicas(ctx, uri)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(v.Disagree).To(BeZero(), "replicas disagree: %+v", v.Checks)
		g.Expect(v.Unanswered).To(BeZero(), "a replica did not answer: %+v", v.Checks)
		compared := uint64(0)
		for _, c := range v.Checks {
			g.Expect(c.Replicas).To(HaveLen(3), "unit %d/%d", c.Segment, c.Bucket)
			compared += c.To - c.From
			if c.State == "sealed" {
				for _, r := range c.Replicas {
					g.Expect(r.Next).To(Equal(c.To), "sealed unit %d/%d: the copy on %s ends elsewhere: %+v", c.Segment, c.Bucket, r.Node, c.Replicas)
				}
			}
		}
		g.Expect(compared).To(BeNumerically(">=", messages), "records compared on every replica")
		fmt.Fprintf(GinkgoWriter, "replicas agree: %d units, %d records compared on each of their copies\n", v.Units, compared)
	}).WithTimeout(patience).WithPolling(time.Second).Should(Succeed())
}

var _ = Describe("A replicated topic stopped for idleness at its home", func() {
	It("is verified from every copy, the home's included: its copy answers what its group committed", func() {
		nodes, conns, _ := startCluster("--replication-factor", "3", "--topic-idle-timeout", "1s", "--log-level", "debug")
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		uri := "topic://public/default/idle-verified"
		d, err := client.NewAdmin(conns[0]).CreateTopic(ctx, uri, 2)
		Expect(err).NotTo(HaveOccurred())
		home := int(d.Segments[0].Owner[1] - '1')
		produceGo(conns[home], uri, 0, 100, 4)
		// Stopped at its home: nothing asks for it there any more. (A
		// read of its copy at the home answered UNAVAILABLE, "not being
		// served here yet", until something activated it.)
		Eventually(func() string { return nodes[home].logTail(400) }).WithTimeout(30 * time.Second).WithPolling(200 * time.Millisecond).
			Should(ContainSubstring("idle topics passivated"))
		waitReplicasAgree(conns[(home+1)%3], uri, 100)
	})
})
