package actors

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/internal/poll"
	"github.com/braidmq/braid/replica"
	"github.com/braidmq/braid/routing"
	"github.com/braidmq/braid/topology"
	"github.com/braidmq/braid/wal"
)

// A replication_factor the node cannot honour is refused INVALID_POLICY,
// and nothing is stored: above 1 on a node without a cluster, above the
// live nodes of a cluster; on a topic's create, its policies and its
// namespace's.
func TestReplicationFactorRefused(t *testing.T) {
	ctx := context.Background()
	three := 3
	for _, c := range []struct {
		name      string
		configure func(*Config)
	}{
		{"a node alone", nil},
		{"two live nodes", func(cfg *Config) {
			cfg.Replicas = replica.NewHost(replica.HostConfig{Self: replica.Peer{Node: "n1", Incarnation: "a"}, Send: func(replica.Peer, []replica.Envelope) {}})
			t.Cleanup(cfg.Replicas.Close)
			cfg.LiveNodes = func() int { return 2 }
		}},
	} {
		m := newTestManagerWith(t, c.configure)
		_, err := m.CreateTopic(ctx, api.TopicCreateRequest{Topic: "topic://t/n/r", Policies: &api.Policies{ReplicationFactor: &three}})
		if !errors.Is(err, api.ErrInvalidPolicy) {
			t.Fatalf("%s: create with replication_factor 3: %v, want INVALID_POLICY", c.name, err)
		}
		if _, err := m.Topic("topic://t/n/r"); !errors.Is(err, api.ErrTopicNotFound) {
			t.Fatalf("%s: the refused topic exists: %v", c.name, err)
		}
		if _, err := m.CreateTopic(ctx, api.TopicCreateRequest{Topic: "topic://t/n/r"}); err != nil {
			t.Fatal(err)
		}
		if _, err := m.TopicPolicies(ctx, api.TopicPoliciesRequest{Topic: "topic://t/n/r", Policies: &api.Policies{ReplicationFactor: &three}}); !errors.Is(err, api.ErrInvalidPolicy) {
			t.Fatalf("%s: topic.policies replication_factor 3: %v, want INVALID_POLICY", c.name, err)
		}
		reply, err := m.TopicPolicies(ctx, api.TopicPoliciesRequest{Topic: "topic://t/n/r"})
		if err != nil || reply.Policies.ReplicationFactor != nil || *reply.Effective.ReplicationFactor != 1 {
			t.Fatalf("%s: after the refusal: %+v, %v", c.name, reply, err)
		}
		if _, err := m.NamespacePolicies(ctx, api.NamespacePoliciesRequest{Namespace: "t/n", Policies: &api.Policies{ReplicationFactor: &three}}); !errors.Is(err, api.ErrInvalidPolicy) {
			t.Fatalf("%s: namespace.policies replication_factor 3: %v, want INVALID_POLICY", c.name, err)
		}
	}
}

// landings records where the appends of a test landed; landing is one
// append's sink.
type landings struct {
	mu  sync.Mutex
	err error
	wg  sync.WaitGroup
}

type landing struct {
	all *landings
	at  uint64 // the offset it must land at
}

func (l landing) landed(_ unitRef, _ []int, first uint64, err error) {
	l.all.mu.Lock()
	if err == nil && first != l.at {
		err = fmt.Errorf("the append of offset %d landed at %d", l.at, first)
	}
	if err != nil && l.all.err == nil {
		l.all.err = err
	}
	l.all.mu.Unlock()
	l.all.wg.Done()
}

func (landing) splitInto(int) {}

// A unit's committer keeps few proposals in flight and gathers the
// batches that come meanwhile into the next one (one raft entry): many
// small appends take far fewer raft entries than appends, and each lands
// at its offset, in the order submitted.
func TestReplicaCommitterGathersBatches(t *testing.T) {
	dir := t.TempDir()
	l, err := wal.Open(filepath.Join(dir, "log"), wal.Options{Durability: wal.DurabilityAlways})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	state := filepath.Join(dir, "raft-state")
	if err := replica.Bootstrap(nil, state, []uint64{1}); err != nil {
		t.Fatal(err)
	}
	st, err := replica.OpenStorage(l, nil, state)
	if err != nil {
		t.Fatal(err)
	}
	self := replica.Peer{Node: "n1", Incarnation: "a"}
	host := replica.NewHost(replica.HostConfig{Self: self, Send: func(replica.Peer, []replica.Envelope) {}})
	defer host.Close()
	g, err := host.Start(replica.Config{Group: "topic://t/n/c#i#0#0", ID: 1, Peers: map[uint64]replica.Peer{1: self}, Storage: st})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Lead(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	c := &replicaCommitter{g: g}
	const appends = 400
	all := &landings{}
	all.wg.Add(appends)
	for i := range appends {
		c.submit([]appendReq{{records: []wal.Record{{Payload: []byte(strconv.Itoa(i))}}, sink: landing{all, uint64(i)}}})
	}
	all.wg.Wait()
	c.drain()
	if all.err != nil {
		t.Fatal(all.err)
	}
	recs, err := l.ReadRange(0, appends+1, 0)
	if err != nil || len(recs) != appends {
		t.Fatalf("the log holds %d records (%v), want %d", len(recs), err, appends)
	}
	for i, r := range recs {
		if string(r.Payload) != strconv.Itoa(i) {
			t.Fatalf("record %d is %q: appends out of order", i, r.Payload)
		}
	}
	entries, err := l.Entries(0)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) > appends/4 {
		t.Fatalf("%d appends took %d raft entries: not gathered", appends, len(entries))
	}
	t.Logf("%d appends in %d raft entries", appends, len(entries))
}

// A replica's log closed under its running group and opened again (a
// sweep of idle logs racing a raft message that started the group over
// the old one) shows nothing until a group runs over it: a reader of the
// new log took the unit for empty (a sealed unit whose copy answered
// that it ended at 0, found by the fault suite under a one-way cut). The
// group starts again over the new log, from the commit it recorded.
func TestAReplicaFollowsItsLogOpenedAgain(t *testing.T) {
	self := replica.Peer{Node: "n1", Incarnation: "a"}
	m := newTestManagerWith(t, func(cfg *Config) {
		cfg.NodeID, cfg.Incarnation = "n1", "a"
		cfg.Replicas = replica.NewHost(replica.HostConfig{Self: self, Send: func(replica.Peer, []replica.Envelope) {}})
		t.Cleanup(cfg.Replicas.Close)
	})
	name := routing.TopicName{Tenant: "t", Namespace: "n", Name: "again"}
	key := UnitKey{Topic: name, Segment: 0, Bucket: 0}
	s := topology.Segment{ID: 0, State: topology.StateActive, Buckets: 1, Owner: "n1", Replicas: []topology.Replica{{Node: "n1", Incarnation: "a"}}}
	opts := wal.Options{Durability: wal.DurabilityAlways}
	l, err := m.store.Log(key, opts)
	if err != nil {
		t.Fatal(err)
	}
	g, err := m.startGroup(key, "inc", s, l)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Lead(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if err := g.Propose([]wal.Record{{Payload: []byte(strconv.Itoa(i))}}).Wait(); err != nil {
			t.Fatal(err)
		}
	}
	if l.NextOffset() != 5 {
		t.Fatalf("the replica's log shows %d records, want 5", l.NextOffset())
	}
	if err := m.store.CloseTopic(name); err != nil { // the group runs on
		t.Fatal(err)
	}
	l2, err := m.store.Log(key, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.startGroup(key, "inc", s, l2); err != nil {
		t.Fatal(err)
	}
	// The group over the new log knows what it committed (from its
	// state, or from its leader: here itself, once elected again).
	if !poll.Until(10*time.Second, func() bool { return l2.NextOffset() == 5 }) {
		t.Fatalf("the log opened again shows %d committed records, want 5", l2.NextOffset())
	}
}
