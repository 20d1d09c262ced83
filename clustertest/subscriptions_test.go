package clustertest

import (
	"context"
	"fmt"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/client"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

var _ = Describe("Subscription management in a cluster", func() {
	It("lists, moves and deletes a subscription through a node that does not own its topic: the owner does it", func() {
		_, conns, _ := startCluster()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		const uri = "topic://public/default/managed"
		d, err := client.NewAdmin(conns[0]).CreateTopic(ctx, uri, 1)
		Expect(err).NotTo(HaveOccurred())
		other := 0
		for i := range conns {
			if fmt.Sprintf("n%d", i+1) != d.Segments[0].Owner {
				other = i
				break
			}
		}
		adm := client.NewAdmin(conns[other])
		describe(conns[other], uri) // the node forwards to the owner by now
		produceGo(conns[other], uri, 0, 100, 8)
		readAll(conns[other], uri, "audit", 100)

		var subs []api.SubscriptionInfo
		Eventually(func() error {
			subs, err = adm.ListSubscriptions(ctx, uri)
			return err
		}).WithTimeout(30 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
		Expect(subs).To(ConsistOf(And(HaveField("Name", "audit"), HaveField("Kind", api.SubscriptionStream), HaveField("Backlog", uint64(0)))))

		r, err := adm.SeekSubscription(ctx, uri, "audit", client.SeekEarliest(), false)
		Expect(err).NotTo(HaveOccurred())
		Expect(r.Backlog).To(Equal(uint64(100)))
		readAll(conns[other], uri, "audit", 100) // everything again, once

		detached, err := adm.DeleteSubscription(ctx, uri, "audit", false)
		Expect(err).NotTo(HaveOccurred())
		Expect(detached).To(BeEmpty())
		subs, err = adm.ListSubscriptions(ctx, uri)
		Expect(err).NotTo(HaveOccurred())
		Expect(subs).To(BeEmpty())
		_, err = adm.DeleteSubscription(ctx, uri, "audit", false)
		Expect(err).To(MatchError(ContainSubstring("NOT_FOUND")))
		readAll(conns[other], uri, "audit", 100) // a new subscription, from the start
	})
})
