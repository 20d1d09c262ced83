package node

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/clock"
	"github.com/braidmq/braid/internal/poll"
	"github.com/braidmq/braid/meta"
)

// Leases are measured on a clock that never steps: a node whose wall
// clock steps (an operator, NTP) by far more than a lease keeps its lease
// as long as it renews it, and fences itself a lease time after its last
// renewal, whichever way its clock stepped; and a node judges the others'
// leases by its own clock, never by the expiries their clocks wrote.

// fencedProduce sends one produce to a one-segment topic made for it and
// returns the error code of the answer ("" when it was taken).
func fencedProduce(t *testing.T, nc *nats.Conn, name string) func() string {
	t.Helper()
	mustAdmin(t, nc, api.AdminTopicCreate, api.TopicCreateRequest{Topic: "topic://public/default/" + name, Segments: 1}, nil)
	subject := api.TopicSubject(api.ProducePrefix, "public", "default", name)
	return func() string {
		m, err := nc.Request(subject, []byte("x"), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return m.Header.Get(micro.ErrorCodeHeader)
	}
}

// steppedNode starts a node with a 600 ms lease whose wall clock the
// test steps, and returns it with a produce to a topic of its own, taken
// once.
func steppedNode(t *testing.T, topic string) (*clock.Stepped, *Node, func() string) {
	t.Helper()
	c := &clock.Stepped{}
	node, nc := startNodeWith(t, t.TempDir(), func(cfg *Config) { cfg.LeaseTTL = 600 * time.Millisecond; cfg.LeaseClock = c })
	produce := fencedProduce(t, nc, topic)
	if code := produce(); code != "" {
		t.Fatalf("a produce with a current lease: %s", code)
	}
	return c, node, produce
}

func TestANodeWhoseClockStepsBackFencesItselfOnTime(t *testing.T) {
	c, node, produce := steppedNode(t, "stepped-back")
	c.Step(-time.Hour)
	node.member.StopRenewing()
	// By the wall clock the lease has an hour and more left; by the time
	// that passed it lapses in 600 ms.
	poll.Eventually(t, 10*time.Second, "a node cut off from the store after its clock stepped back an hour still takes appends", func() bool {
		return produce() == strconv.Itoa(api.CodeUnavailable.Number)
	})
}

func TestANodeWhoseClockStepsForwardKeepsItsLease(t *testing.T) {
	c, node, produce := steppedNode(t, "stepped-forward")
	rejoins := gathered(t, node, "braid_node_lease_rejoins_total", "")
	c.Step(time.Hour)
	// Five lease times: every produce is taken, and the lease never ran
	// out (no rejoin).
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); {
		if code := produce(); code != "" {
			t.Fatalf("a produce after the clock stepped an hour forward: %s", code)
		}
	}
	if got := gathered(t, node, "braid_node_lease_rejoins_total", ""); got != rejoins {
		t.Fatalf("the lease ran out %v times after the clock stepped forward", got-rejoins)
	}
}

// TestOthersLeasesGoByThisNodesClock: a lease written by a node whose
// clock is an hour behind holds while it is renewed, and one written by a
// node an hour ahead lapses a lease time after its last renewal.
func TestOthersLeasesGoByThisNodesClock(t *testing.T) {
	const ttl = 600 * time.Millisecond
	node, nc := startNodeWith(t, t.TempDir(), func(cfg *Config) { cfg.LeaseTTL = ttl })
	ctx := context.Background()
	live := func(id string) bool {
		var list api.NodeListReply
		mustAdmin(t, nc, api.AdminNodeList, struct{}{}, &list)
		for _, n := range list.Nodes {
			if n.ID == id {
				return n.Live
			}
		}
		return false
	}
	lease := func(id string, by time.Duration) meta.NodeRecord {
		now := time.Now().Add(by)
		return meta.NodeRecord{ID: id, Started: now.UnixMilli(), Renewed: now.UnixMilli(), Expires: now.Add(ttl).UnixMilli()}
	}
	behind := lease("behind", -time.Hour)
	rev, err := node.meta.TakeNodeLease(ctx, behind, 0)
	if err != nil {
		t.Fatal(err)
	}
	ahead, err := node.meta.TakeNodeLease(ctx, lease("ahead", time.Hour), 0)
	if err != nil || ahead == 0 {
		t.Fatal(err)
	}
	// Renewed every 200 ms for five lease times: live at every look.
	tick := time.NewTicker(ttl / 3)
	defer tick.Stop()
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); <-tick.C {
		renewed := lease("behind", -time.Hour)
		renewed.Started = behind.Started
		if rev, err = node.meta.RenewNodeLease(ctx, renewed, rev); err != nil {
			t.Fatal(err)
		}
		if !live("behind") {
			t.Fatal("a renewed lease written by a clock an hour behind was taken for lapsed")
		}
	}
	if live("ahead") {
		t.Fatal("a lease written by a clock an hour ahead, unrenewed for five lease times, holds")
	}
	poll.Eventually(t, 10*time.Second, "a lease unrenewed for a lease time still holds", func() bool { return !live("behind") })
}
