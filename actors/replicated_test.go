package actors

import (
	"context"
	"errors"
	"testing"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/replica"
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
