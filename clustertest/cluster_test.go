package clustertest

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"syscall"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/client"
	"github.com/nats-io/nats.go/jetstream"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

var _ = Describe("A cluster of three nodes", func() {
	It("forms: every node lists the three live, and the metadata store has three replicas", func() {
		_, conns, _ := startCluster()
		js, err := jetstream.New(conns[1])
		Expect(err).NotTo(HaveOccurred())
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s, err := js.Stream(ctx, "KV_braid-meta")
		Expect(err).NotTo(HaveOccurred())
		info, err := s.Info(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(info.Config.Replicas).To(Equal(3))
		Expect(info.Cluster).NotTo(BeNil())
		Expect(info.Cluster.Replicas).To(HaveLen(2), "the bucket's followers")
	})

	It("serves any client through any node: Go and plain producers and consumers on different nodes, every message once, in key order, across splits that place children on other nodes", func() {
		_, conns, _ := startCluster()
		const uri = "topic://public/default/anynode"
		admin := client.NewAdmin(conns[2])
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// Hot above 300 msg/s a segment, measured every 100 ms: the load
		// below splits it by itself too.
		var policies api.Policies
		Expect(json.Unmarshal([]byte(`{"split_msg_rate_in":300,"merge_msg_rate_in":1,"evaluation_interval":"100ms",
			"split_window":"500ms","merge_window":"1h","split_cooldown":"500ms","merge_cooldown":"1h","max_segments":6,
			"split_vs_rebucket_msg_rate":1000000}`), &policies)).To(Succeed())
		created, err := admin.CreateTopic(ctx, uri, 2, client.WithTopicPolicies(&policies))
		Expect(err).NotTo(HaveOccurred())
		home := created.Segments[0].Owner
		Expect(home).To(BeElementOf("n1", "n2", "n3"))
		// Four producers through the three nodes, Go and plain, each
		// with keys of its own, while the topic is split by hand (the
		// child off hash 0 goes to another node than the home) and by
		// its load.
		const keys, per = 8, 1500
		done := make(chan struct{}, 4)
		run := func(f func()) {
			go func() {
				defer GinkgoRecover()
				defer func() { done <- struct{}{} }()
				f()
			}()
		}
		for _, nc := range conns {
			describe(nc, uri) // every node forwards to the home by now
		}
		run(func() { produceGoKeys(conns[0], uri, "a", 0, per, keys) })
		run(func() { producePlainKeys(conns[1], uri, "b", per, 2*per, keys) })
		run(func() { produceGoKeys(conns[2], uri, "c", 2*per, 3*per, keys) })
		run(func() { producePlainKeys(conns[0], uri, "d", 3*per, 4*per, keys) })
		d := describe(conns[1], uri)
		for _, s := range d.Segments {
			if s.State == "active" && s.Range[0] != "0x0000000000000000" {
				_, err = client.NewAdmin(conns[1]).Split(ctx, uri, s.ID, nil)
				Expect(err).NotTo(HaveOccurred())
				break
			}
		}
		for range 4 {
			<-done
		}
		d = describe(conns[0], uri)
		owners := map[string]int{}
		for _, s := range d.Segments {
			if s.State != "active" {
				continue
			}
			Expect(s.Owner).To(BeElementOf("n1", "n2", "n3"), "segment %d", s.ID)
			owners[s.Owner]++
			if s.Range[0] == "0x0000000000000000" {
				Expect(s.Owner).To(Equal(home), "the segment covering hash 0 stays with the home")
			}
		}
		GinkgoWriter.Printf("layout epoch %d, %d segments, active ones by owner: %v (home %s)\n", d.Epoch, len(d.Segments), owners, home)
		Expect(len(owners)).To(BeNumerically(">=", 2), "active segments by owner: %v", owners)
		Expect(d.Epoch).To(BeNumerically(">=", 2), "a split by hand and one by load at least")
		// Two stream consumers through the nodes that are not the home's
		// read everything once, every key in order.
		readAll(conns[1], uri, "readers", 4*per)
		readAll(conns[2], uri, "others", 4*per)
	})

	It("spreads topics over the nodes; one connection produces to all of them at once, through one node", func() {
		_, conns, _ := startCluster()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		const topics, keys, per = 12, 8, 300
		owners := map[string]int{}
		uris := make([]string, topics)
		for i := range uris {
			uris[i] = fmt.Sprintf("topic://public/default/spread%d", i)
			d, err := client.NewAdmin(conns[i%3]).CreateTopic(ctx, uris[i], 1)
			Expect(err).NotTo(HaveOccurred())
			owners[d.Segments[0].Owner]++
		}
		if len(owners) < 2 {
			r, _ := nodeList(conns[0])
			b, _ := json.Marshal(r)
			GinkgoWriter.Printf("node.list: %s\n", b)
		}
		Expect(len(owners)).To(BeNumerically(">=", 2), "owners: %v", owners)
		// One Go connection to n1 sends to every topic at once: its
		// requests carry parts of topics of several owners.
		producers := make([]*client.Producer, topics)
		for i, uri := range uris {
			p := newProducer(conns[0], uri)
			producers[i] = p
		}
		for seq := range per {
			for _, p := range producers {
				rec := api.Record{Key: []byte("k" + strconv.Itoa(seq%keys)), Payload: []byte(strconv.Itoa(seq))}
				Expect(p.Send(ctx, rec, func(_ client.MessageID, err error) {
					defer GinkgoRecover()
					Expect(err).NotTo(HaveOccurred())
				})).To(Succeed())
			}
		}
		for _, p := range producers {
			Expect(p.Close(ctx)).To(Succeed())
		}
		for i, uri := range uris {
			readAll(conns[(i+1)%3], uri, "spread", per)
		}
		// Every active segment has exactly one owner, and every node
		// describes it the same.
		for _, uri := range uris {
			var seen []api.SegmentInfo
			for _, nc := range conns {
				d := describe(nc, uri)
				for _, s := range d.Segments {
					if s.State == "active" {
						Expect(s.Owner).To(BeElementOf("n1", "n2", "n3"), "%s segment %d", uri, s.ID)
					}
				}
				if seen == nil {
					seen = d.Segments
				}
				Expect(d.Segments).To(Equal(seen), "%s described differently through another node", uri)
			}
		}
	})

	It("lets the Go producer write straight to a topic's owner: it needs no entry node", func() {
		nodes, conns, _ := startCluster()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		r, err := nodeList(conns[0])
		Expect(err).NotTo(HaveOccurred())
		entry := int(r.Entry[1] - '1')
		var uri string
		for i := 0; uri == "" && i < 60; i++ {
			u := fmt.Sprintf("topic://public/default/direct%d", i)
			d, err := client.NewAdmin(conns[0]).CreateTopic(ctx, u, 2)
			Expect(err).NotTo(HaveOccurred())
			if d.Segments[0].Owner != r.Entry {
				uri = u
			}
		}
		Expect(uri).NotTo(BeEmpty())
		via := (entry + 1) % 3
		p := newProducer(conns[via], uri)
		// The entry node stops: nothing reaches it, and no other node
		// takes its role for a lease; the producer's batches go straight
		// to the owner all the same.
		nodes[entry].signal(syscall.SIGSTOP)
		defer nodes[entry].signal(syscall.SIGCONT)
		sctx, scancel := context.WithTimeout(ctx, 2*time.Second)
		defer scancel()
		for seq := range 100 {
			rec := api.Record{Key: []byte("k" + strconv.Itoa(seq%8)), Payload: []byte(strconv.Itoa(seq))}
			_, err := p.SendSync(sctx, rec)
			Expect(err).NotTo(HaveOccurred(), "seq %d with the entry node stopped", seq)
		}
		nodes[entry].signal(syscall.SIGCONT)
		Expect(p.Close(ctx)).To(Succeed())
		waitAllLive(conns[via])
		Eventually(func() error {
			actx, acancel := context.WithTimeout(ctx, 2*time.Second)
			defer acancel()
			_, err := client.NewAdmin(conns[via]).DescribeTopic(actx, uri)
			return err
		}).WithTimeout(30 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
		readAll(conns[via], uri, "direct", 100)
	})

	It("moves the entry role when the entry node is killed: topics of the live nodes serve again through any node", func() {
		nodes, conns, _ := startCluster()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		r, err := nodeList(conns[0])
		Expect(err).NotTo(HaveOccurred())
		entry := int(r.Entry[1] - '1')
		// A topic owned by a node that is not the entry node.
		var uri string
		var owner int
		for i := 0; uri == "" && i < 60; i++ {
			u := fmt.Sprintf("topic://public/default/moved%d", i)
			d, err := client.NewAdmin(conns[0]).CreateTopic(ctx, u, 1)
			Expect(err).NotTo(HaveOccurred())
			if o := int(d.Segments[0].Owner[1] - '1'); o != entry {
				uri, owner = u, o
			}
		}
		Expect(uri).NotTo(BeEmpty())
		third := 3 - entry - owner
		produceGo(conns[third], uri, 0, 300, 8)

		nodes[entry].kill()
		Eventually(func(g Gomega) {
			r, err := nodeList(conns[third])
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(r.Entry).NotTo(BeEmpty())
			g.Expect(r.Entry).NotTo(Equal(nodes[entry].id))
		}).WithTimeout(45 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
		Eventually(func() error {
			actx, acancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer acancel()
			_, err := client.NewAdmin(conns[third]).DescribeTopic(actx, uri)
			return err
		}).WithTimeout(30 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
		produceGo(conns[third], uri, 300, 600, 8)
		producePlain(conns[owner], uri, 600, 700, 8)
		readAll(conns[third], uri, "moved", 700)
	})

	It("hands the entry role over on a clean stop: another node takes it before the stopped node's lease could have lapsed", func() {
		nodes, conns, _ := startCluster()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		r, err := nodeList(conns[0])
		Expect(err).NotTo(HaveOccurred())
		entry := int(r.Entry[1] - '1')
		other := (entry + 1) % 3
		uri, _ := topicOffEntry(ctx, conns[other], "handed", 1)
		nodes[entry].signal(syscall.SIGTERM)
		Eventually(func(g Gomega) {
			r, err := nodeList(conns[other])
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(r.Entry).NotTo(BeEmpty())
			g.Expect(r.Entry).NotTo(Equal(nodes[entry].id))
		}).WithTimeout(45 * time.Second).WithPolling(50 * time.Millisecond).Should(Succeed())
		Eventually(nodes[entry].exited).WithTimeout(30 * time.Second).Should(BeClosed())
		// The event, not the time it took: the stopped node released its
		// record while it still held the role (a release that finds the
		// role taken, or fails, says "handing the entry role over
		// failed"), so the role moved by the hand-over, not a lapse.
		Expect(nodes[entry].logTail(400)).To(ContainSubstring("entry role handed over"), "the role moved only when the lease lapsed")
		nodes[entry].cmd = nil
		producePlain(conns[other], uri, 0, 50, 4)
		readAll(conns[other], uri, "handed", 50)
	})

	It("fences a stopped entry node: another takes the role, and the stopped one takes nothing out of order when it continues", func() {
		nodes, conns, _ := startCluster()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		r, err := nodeList(conns[0])
		Expect(err).NotTo(HaveOccurred())
		stopped := int(r.Entry[1] - '1')
		other := (stopped + 1) % 3
		var uri string
		for i := 0; uri == "" && i < 60; i++ {
			u := fmt.Sprintf("topic://public/default/fenced%d", i)
			d, err := client.NewAdmin(conns[other]).CreateTopic(ctx, u, 1)
			Expect(err).NotTo(HaveOccurred())
			if d.Segments[0].Owner != nodes[stopped].id {
				uri = u
			}
		}
		Expect(uri).NotTo(BeEmpty())
		produceGo(conns[other], uri, 0, 300, 8)

		nodes[stopped].signal(syscall.SIGSTOP)
		stillStopped := true
		defer func() {
			if stillStopped {
				nodes[stopped].signal(syscall.SIGCONT)
			}
		}()
		Eventually(func(g Gomega) {
			r, err := nodeList(conns[other])
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(r.Entry).NotTo(BeEmpty())
			g.Expect(r.Entry).NotTo(Equal(nodes[stopped].id))
		}).WithTimeout(60 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
		Eventually(func() error {
			actx, acancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer acancel()
			_, err := client.NewAdmin(conns[other]).DescribeTopic(actx, uri)
			return err
		}).WithTimeout(30 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
		produceRetrying(conns[other], uri, 300, 600, 8)

		nodes[stopped].signal(syscall.SIGCONT)
		stillStopped = false
		// The continued node finds the role taken and stops its client
		// services (requests it held meanwhile were refused or are lost:
		// their senders time out).
		Eventually(func() string { return nodes[stopped].logTail(400) }).WithTimeout(30 * time.Second).
			WithPolling(200 * time.Millisecond).Should(ContainSubstring("another node took the entry role"))
		// Through the continued node's own server: its requests reach the
		// new entry node.
		Eventually(func() error {
			actx, acancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer acancel()
			_, err := client.NewAdmin(conns[stopped]).DescribeTopic(actx, uri)
			return err
		}).WithTimeout(30 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
		produceRetrying(conns[stopped], uri, 600, 900, 8)
		// If the topic moved off the stopped node while it was away, its
		// sealed segments are read there: once its lease is live again.
		waitAllLive(conns[other])
		readAll(conns[other], uri, "fenced", 900)
		// (The metadata store may be electing a leader again for a moment
		// after the stopped node's return.)
		Eventually(func(g Gomega) {
			r, err := nodeList(conns[other])
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(r.Entry).NotTo(BeEmpty())
			g.Expect(r.Entry).NotTo(Equal(nodes[stopped].id))
		}).WithTimeout(30 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
	})

	It("applies a namespace's policy change to its active topics on every node", func() {
		_, conns, _ := startCluster()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		r, err := nodeList(conns[0])
		Expect(err).NotTo(HaveOccurred())
		var uri string
		for i := 0; uri == "" && i < 60; i++ {
			u := fmt.Sprintf("topic://public/default/policed%d", i)
			d, err := client.NewAdmin(conns[0]).CreateTopic(ctx, u, 1)
			Expect(err).NotTo(HaveOccurred())
			if d.Segments[0].Owner != r.Entry {
				uri = u
			}
		}
		Expect(uri).NotTo(BeEmpty())
		produceGo(conns[1], uri, 0, 10, 2) // active on its owner
		retention := "100h"
		_, err = client.NewAdmin(conns[2]).SetNamespacePolicies(ctx, "public/default", &api.Policies{Retention: &retention})
		Expect(err).NotTo(HaveOccurred())
		Eventually(func(g Gomega) {
			d, err := client.NewAdmin(conns[0]).DescribeTopic(ctx, uri)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(d.EffectivePolicies).NotTo(BeNil())
			g.Expect(d.EffectivePolicies.Retention).NotTo(BeNil())
			got, err := time.ParseDuration(*d.EffectivePolicies.Retention)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(100 * time.Hour))
		}).WithTimeout(20 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
	})

	It("refuses a second process with the id of a live node", func() {
		nodes, conns, _ := startCluster()
		// The second process joins through an external NATS (n2's server)
		// with n1's id: its lease is refused.
		dup := newCluster(1)[0]
		dup.id = nodes[0].id
		dup.start("--nats-url", nodes[1].url())
		Eventually(dup.exited).WithTimeout(60 * time.Second).Should(BeClosed())
		Expect(dup.waitErr).To(HaveOccurred())
		Expect(dup.logTail(5)).To(ContainSubstring("in use by another running braid serve"))
		dup.cmd = nil
		// The live node kept its lease.
		r, err := nodeList(conns[1])
		Expect(err).NotTo(HaveOccurred())
		Expect(liveNodes(r)).To(ConsistOf("n1", "n2", "n3"))
		for _, n := range r.Nodes {
			if n.ID == nodes[0].id {
				Expect(n.NATSURL).To(Equal(nodes[0].url()))
			}
		}
		b, _ := json.Marshal(r)
		GinkgoWriter.Printf("node.list: %s\n", b)
	})
})
