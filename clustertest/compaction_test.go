package clustertest

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/client"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

var _ = Describe("Compaction of a topic on several nodes", func() {
	It("compacts a split's child on another node at the home: one value per key through any node, the child's compacted log kept by the home", func() {
		nodes, conns, _ := startCluster()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		uri, home, child := splitOffHome(ctx, conns, "compacted")
		homeIdx, ownerIdx := int(home[1]-'1'), int(child.Owner[1]-'1')
		other := 3 - homeIdx - ownerIdx
		// 50 updates of each of 8 keys, through the third node: the last
		// of key k<i> is seq 392+i.
		produceGo(conns[other], uri, 0, 400, 8)

		adm := client.NewAdmin(conns[other], client.WithRequestTimeout(30*time.Second))
		st, err := adm.Compact(ctx, uri)
		Expect(err).NotTo(HaveOccurred())
		Eventually(func() bool {
			st, err = adm.Compaction(ctx, uri)
			Expect(err).NotTo(HaveOccurred())
			return st.Running
		}).WithTimeout(time.Minute).WithPolling(20 * time.Millisecond).Should(BeFalse())
		Expect(st.Error).To(BeEmpty())
		Expect(st.Kept).To(Equal(uint64(8)), "one record per key, in the home's child and the other node's")
		Expect(st.Read).To(Equal(uint64(400)))
		var childHorizon uint64
		for _, h := range st.Horizons {
			if h.Segment == child.ID {
				childHorizon = h.Horizon
			}
		}
		Expect(childHorizon).To(BeNumerically(">", 0), "the child on node %s has a horizon: %+v", child.Owner, st.Horizons)
		inHome, _ := filepath.Glob(filepath.Join(nodes[homeIdx].dataDir, "topics", "public", "default", "*", "*", fmt.Sprintf("seg-%d", child.ID), "b-0", "compacted-1"))
		Expect(inHome).To(HaveLen(1), "the home keeps the child's compacted log")
		inOwner, _ := filepath.Glob(filepath.Join(nodes[ownerIdx].dataDir, "topics", "public", "default", "*", "*", "*", "*", "compacted-*"))
		Expect(inOwner).To(BeEmpty())

		// A checkpoint consumer reading the compacted view, through the
		// node that holds the child: exactly the last value of each key.
		c, err := client.NewCheckpointConsumer(conns[ownerIdx], uri, client.WithReadCompacted(), client.WithFetch(100, 1<<20, 50*time.Millisecond))
		Expect(err).NotTo(HaveOccurred())
		defer c.Close()
		last := map[string]int{}
		for len(last) < 8 {
			m, err := c.Next(ctx)
			Expect(err).NotTo(HaveOccurred())
			Expect(last).NotTo(HaveKey(string(m.Key)), "a key read twice from the compacted view")
			seq, err := strconv.Atoi(string(m.Payload))
			Expect(err).NotTo(HaveOccurred())
			last[string(m.Key)] = seq
		}
		for i := range 8 {
			Expect(last).To(HaveKeyWithValue("k"+strconv.Itoa(i), 392+i))
		}
		short, stop := context.WithTimeout(ctx, 300*time.Millisecond)
		defer stop()
		_, err = c.Next(short)
		Expect(errors.Is(err, context.DeadlineExceeded)).To(BeTrue(), "nothing after the latest values: %v", err)

		// Updates after the horizon follow, in the child too.
		produceGo(conns[other], uri, 400, 408, 8)
		for range 8 {
			m, err := c.Next(ctx)
			Expect(err).NotTo(HaveOccurred())
			Expect(string(m.Payload)).To(BeElementOf(strconv.Itoa(400), "401", "402", "403", "404", "405", "406", "407"))
		}
		var reply api.CompactionStatus
		reply, err = adm.Compaction(ctx, uri)
		Expect(err).NotTo(HaveOccurred())
		Expect(reply.Generation).To(Equal(uint64(1)))
	})
})
