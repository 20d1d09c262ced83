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

// Journaled replicas keep their hard states and marks in their state
// journals, synced in the rounds, and not in their state files: a leader
// lost and back, and every replica restarted, read them from there and
// agree.
func TestGroupStateJournaled(t *testing.T) {
	c := newClusterOf(t, 3, true)
	got := acked{}
	lead := c.leader()
	c.propose(lead, 0, 50, got)
	c.halt(lead)
	next := c.leader(lead)
	if lost := c.propose(next, 1000, 50, got); lost != 0 {
		t.Fatalf("%d proposals lost under the new leader", lost)
	}
	c.start(lead)
	c.agree(got)
	for _, id := range c.ids {
		c.mu.Lock()
		j := c.hosts[id].StateJournal()
		c.mu.Unlock()
		if n := j.Counts(); n.Syncs == 0 || n.Records == 0 {
			t.Fatalf("replica %d: its state journal synced %d times, %d records: its state went elsewhere", id, n.Syncs, n.Records)
		}
	}
	for _, id := range c.ids {
		c.halt(id)
	}
	for _, id := range c.ids {
		c.start(id)
	}
	again := c.leader()
	if lost := c.propose(again, 2000, 20, got); lost != 0 {
		t.Fatalf("%d proposals lost after a restart of all", lost)
	}
	c.agree(got)
}
