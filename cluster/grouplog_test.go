package cluster

import (
	"testing"

	"github.com/braidmq/braid/topology"
)

// TestGroupRaftNames: a consumer group's state generation is named so that
// a follower can tell its kind, topic, subscription and generation, and
// names that are not one are refused, not half read.
func TestGroupRaftNames(t *testing.T) {
	name := groupRaftName(GroupQueue, "topic://t/n/orders", "billing", 7)
	kind, topic, sub, gen, err := parseGroupRaftName(name)
	if err != nil || kind != GroupQueue || topic != "topic://t/n/orders" || sub != "billing" || gen != 7 {
		t.Fatalf("parse(%q) = %q %q %q %d %v", name, kind, topic, sub, gen, err)
	}
	for _, bad := range []string{
		"topic://t/n/orders#inc#1#0",         // a unit's group
		"sub#stream#topic://t/n/x#s",         // no generation
		"sub#stream#topic://t/n/x#s#0",       // generation 0 is the local log
		"sub#stream#topic://t/n/x#s#x",       // not a number
		"sub#stream#topic://t/n/x#s#1#extra", // too many parts
		"stream#topic://t/n/x#s#1",           // no prefix
	} {
		if _, _, _, _, err := parseGroupRaftName(bad); err == nil {
			t.Errorf("parse(%q) succeeded", bad)
		}
	}
}

// TestReplicaIndex: a node is a replica under its incarnation only (a
// node back with an empty disk is not the replica it was).
func TestReplicaIndex(t *testing.T) {
	reps := []topology.Replica{{Node: "n1", Incarnation: "a"}, {Node: "n2", Incarnation: "b"}}
	if got := replicaIndex(reps, "n2", "b"); got != 2 {
		t.Fatalf("n2/b: %d, want 2", got)
	}
	if got := replicaIndex(reps, "n2", "c"); got != 0 {
		t.Fatalf("n2 under another incarnation: %d, want 0", got)
	}
	if got := peersOfReplicas(reps); got[1].Node != "n1" || got[2].Incarnation != "b" || len(got) != 2 {
		t.Fatalf("peers: %+v", got)
	}
}

// TestGroupsShortCounted: a group counts once while its state is short of
// the replicas wanted, and no more once it is not or it closes.
func TestGroupsShortCounted(t *testing.T) {
	n := &Member{}
	a, b := &groupLog{n: n}, &groupLog{n: n}
	a.setShort(true)
	a.setShort(true)
	b.setShort(true)
	if got := n.groupsShort.Load(); got != 2 {
		t.Fatalf("two groups short: counted %d", got)
	}
	a.setShort(false)
	if got := n.groupsShort.Load(); got != 1 {
		t.Fatalf("one group short: counted %d", got)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if got := n.groupsShort.Load(); got != 0 {
		t.Fatalf("the short group closed: counted %d", got)
	}
}
