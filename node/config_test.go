package node

import (
	"strings"
	"testing"
)

// TestReplicationFactorDefault: without --replication-factor, a cluster
// of three or more nodes keeps three copies, a smaller one or a single
// node one; a factor given is kept, and one the cluster cannot hold
// refuses the start.
func TestReplicationFactorDefault(t *testing.T) {
	three := []string{"nats://127.0.0.1:1", "nats://127.0.0.1:2"}
	for _, c := range []struct {
		name    string
		cfg     Config
		want    int
		refused string
	}{
		{name: "single node", cfg: Config{}, want: 1},
		{name: "two nodes", cfg: Config{ClusterListen: "127.0.0.1:0", Routes: three[:1]}, want: 1},
		{name: "three nodes", cfg: Config{ClusterListen: "127.0.0.1:0", Routes: three}, want: 3},
		{name: "three nodes, factor 1 given", cfg: Config{ClusterListen: "127.0.0.1:0", Routes: three, ReplicationFactor: 1}, want: 1},
		{name: "three nodes, factor 5", cfg: Config{ClusterListen: "127.0.0.1:0", Routes: three, ReplicationFactor: 5}, refused: "more than the 3 nodes"},
		{name: "single node, factor 3", cfg: Config{ReplicationFactor: 3}, refused: "needs a cluster"},
		{name: "bad compaction", cfg: Config{GroupCompactAfter: -1}, refused: "compact-after"},
	} {
		c.cfg.DataDir = t.TempDir()
		got, err := c.cfg.withDefaults()
		switch {
		case c.refused != "":
			if err == nil || !strings.Contains(err.Error(), c.refused) {
				t.Errorf("%s: %v, want a refusal naming %q", c.name, err, c.refused)
			}
		case err != nil:
			t.Errorf("%s: %v", c.name, err)
		case got.ReplicationFactor != c.want:
			t.Errorf("%s: replication factor %d, want %d", c.name, got.ReplicationFactor, c.want)
		}
	}
}

// TestLinkAddressesChecked: --actor-dial and --cluster-advertise take
// host:port addresses; anything else refuses the start.
func TestLinkAddressesChecked(t *testing.T) {
	for _, c := range []struct {
		name    string
		cfg     Config
		refused string
	}{
		{name: "dial map", cfg: Config{ClusterListen: "127.0.0.1:0", ActorDial: map[string]string{"127.0.0.1:7001": "127.0.0.1:9001"}}},
		{name: "advertise", cfg: Config{ClusterListen: "127.0.0.1:0", ClusterAdvertise: "127.0.0.1:9002"}},
		{name: "dial from no port", cfg: Config{ClusterListen: "127.0.0.1:0", ActorDial: map[string]string{"127.0.0.1": "127.0.0.1:9001"}}, refused: "actor dial"},
		{name: "dial to empty", cfg: Config{ClusterListen: "127.0.0.1:0", ActorDial: map[string]string{"127.0.0.1:7001": ""}}, refused: "actor dial"},
		{name: "advertise no port", cfg: Config{ClusterListen: "127.0.0.1:0", ClusterAdvertise: "somewhere"}, refused: "cluster advertise"},
		{name: "advertise alone", cfg: Config{ClusterAdvertise: "127.0.0.1:9002"}, refused: "needs a cluster listener"},
	} {
		c.cfg.DataDir = t.TempDir()
		_, err := c.cfg.withDefaults()
		switch {
		case c.refused != "":
			if err == nil || !strings.Contains(err.Error(), c.refused) {
				t.Errorf("%s: %v, want a refusal naming %q", c.name, err, c.refused)
			}
		case err != nil:
			t.Errorf("%s: %v", c.name, err)
		}
	}
}
