package node

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/braidmq/braid/internal/poll"

	"github.com/braidmq/braid/api"
)

// Each consumer's lag (stream) and messages held (queue) are exported as
// subscription.list shows them, and follow acknowledgements.
func TestConsumerLagMetrics(t *testing.T) {
	n, nc := startNode(t, t.TempDir())
	defer stopNode(t, n, nc)
	const uri = "topic://public/default/lagged"
	mustAdmin(t, nc, api.AdminTopicCreate, api.TopicCreateRequest{Topic: uri, Segments: 2, Buckets: 1}, nil)
	for i := range 20 {
		produce(t, nc, "lagged", fmt.Sprintf("k%d", i), []byte(fmt.Sprint(i)))
	}
	consume := func(verb string) string { return api.ConsumeSubject(verb, "public", "default", "lagged") }
	for _, c := range []string{"c1", "c2"} {
		if _, e := jsonReq(t, nc, consume(api.ConsumeJoin), api.JoinRequest{Subscription: "readers", Consumer: c}); e != nil {
			t.Fatal(e)
		}
	}
	queue := func(verb string) string { return api.QueueSubject(verb, "public", "default", "lagged") }
	if _, e := jsonReq(t, nc, queue(api.QueueJoin), api.QueueJoinRequest{Subscription: "workers", Consumer: "w1"}); e != nil {
		t.Fatal(e)
	}
	data, e := jsonReq(t, nc, queue(api.QueueFetch), api.FetchRequest{Subscription: "workers", Consumer: "w1", Max: 3, Wait: "1s"})
	if e != nil {
		t.Fatal(e)
	}
	if msgs, err := api.DecodeMessages(data); err != nil || len(msgs) != 3 {
		t.Fatalf("queue fetch: %d messages (%v)", len(msgs), err)
	}
	line := func(metric, sub, consumer string, v uint64) string {
		return fmt.Sprintf(`%s{consumer=%q,namespace="default",subscription=%q,tenant="public",topic="lagged"} %d`, metric, consumer, sub, v)
	}
	// Both stream consumers hold a unit each once the group balanced.
	var list api.SubscriptionListReply
	lags := map[string]uint64{}
	poll.Eventually(t, 10*time.Second, "each stream consumer holds a unit", func() bool {
		mustAdmin(t, nc, api.AdminSubscriptionList, api.TopicRequest{Topic: uri}, &list)
		clear(lags)
		for _, s := range list.Subscriptions {
			if s.Name != "readers" {
				continue
			}
			for _, c := range s.Consumers {
				if len(c.Units) == 1 {
					lags[c.Name] = c.Lag
				}
			}
		}
		return len(lags) == 2
	})
	if lags["c1"]+lags["c2"] != 20 || lags["c1"] == 0 || lags["c2"] == 0 {
		t.Fatalf("lags %v: want two shares of 20", lags)
	}
	m := scrape(t, n)
	for _, want := range []string{
		line("braid_consumer_lag_messages", "readers", "c1", lags["c1"]),
		line("braid_consumer_lag_messages", "readers", "c2", lags["c2"]),
		line("braid_queue_consumer_inflight_messages", "workers", "w1", 3),
	} {
		if !contains(m, want) {
			t.Errorf("metrics lack %s:\n%s", want, grep(m, "consumer"))
		}
	}
	// c1 reads and acknowledges everything it holds: its lag falls to 0,
	// c2's stays.
	msgs := fetchAll(t, nc, "lagged", "readers", "c1")
	if uint64(len(msgs)) != lags["c1"] {
		t.Fatalf("c1 fetched %d, its lag was %d", len(msgs), lags["c1"])
	}
	poll.Eventually(t, 10*time.Second, "c1's lag 0", func() bool {
		m = scrape(t, n)
		return contains(m, line("braid_consumer_lag_messages", "readers", "c1", 0))
	})
	if !contains(m, line("braid_consumer_lag_messages", "readers", "c2", lags["c2"])) {
		t.Errorf("c2's lag changed:\n%s", grep(m, "braid_consumer_lag"))
	}
	if strings.Count(grep(m, "braid_consumer_lag_messages{"), "\n") != 1 {
		t.Errorf("want a series per stream consumer:\n%s", grep(m, "braid_consumer_lag_messages{"))
	}
}
