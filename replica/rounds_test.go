package replica_test

import (
	"testing"
)

// A host given a commit group (as a node's is) commits its replicas'
// appends in the group's rounds, through the journal its logs write to,
// leaders' and followers' alike; what it acknowledged is on a majority,
// and a replica restarted from its journal and log catches up.
func TestGroupAppendsCommitInRounds(t *testing.T) {
	c := newClusterOf(t, 3, true)
	lead := c.leader()
	got := acked{}
	if lost := c.propose(lead, 0, 100, got); lost != 0 {
		t.Fatalf("%d proposals lost with a steady leader", lost)
	}
	c.agree(got)
	for _, id := range c.ids {
		c.mu.Lock()
		h, commits, j := c.hosts[id], c.commits[id], c.journals[id]
		c.mu.Unlock()
		if n := h.Counters().AppendRounds.Load(); n == 0 {
			t.Fatalf("replica %d: no rounds of appends", id)
		}
		if n := commits.Counts().Rounds; n == 0 {
			t.Fatalf("replica %d: its appends were not committed in its commit group's rounds", id)
		}
		if n := j.Counts().Entries; n == 0 {
			t.Fatalf("replica %d: nothing journaled: its log synced its own file", id)
		}
	}
	follower := c.followers(lead)[0]
	c.halt(follower)
	c.propose(lead, 1000, 50, got)
	c.start(follower)
	c.agree(got)
}
