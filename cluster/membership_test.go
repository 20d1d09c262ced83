package cluster

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestNodeIDStaysWithItsDataDirectory: a data directory gets an id at its
// first start (made, or the one asked for), keeps it, and refuses another;
// a bad id is refused.
func TestNodeIDStaysWithItsDataDirectory(t *testing.T) {
	dir := t.TempDir()
	id, err := resolveNodeID(dir, "")
	if err != nil || !strings.HasPrefix(id, "n") || len(id) != 9 {
		t.Fatalf("a made id = %q, %v; want n and 8 hex digits", id, err)
	}
	if again, err := resolveNodeID(dir, ""); err != nil || again != id {
		t.Fatalf("the id at the next start = %q, %v; want %q", again, err, id)
	}
	if same, err := resolveNodeID(dir, id); err != nil || same != id {
		t.Fatalf("asking for the directory's own id = %q, %v", same, err)
	}
	if _, err := resolveNodeID(dir, "other"); err == nil || !strings.Contains(err.Error(), "belongs to node") {
		t.Fatalf("another id for the directory: %v, want a refusal", err)
	}
	named := t.TempDir()
	if got, err := resolveNodeID(named, "n7"); err != nil || got != "n7" {
		t.Fatalf("a chosen id = %q, %v", got, err)
	}
	if b, _ := os.ReadFile(filepath.Join(named, nodeIDFile)); strings.TrimSpace(string(b)) != "n7" {
		t.Fatalf("node-id file holds %q", b)
	}
	if _, err := resolveNodeID(t.TempDir(), "bad.id"); err == nil {
		t.Fatal("an id with a dot was accepted")
	}
}

// TestSecondRunOfANodeIDIsRefused starts a node, then a second one with
// the same id through the first one's NATS server (as a node with an
// external NATS): the second is refused, once the first's lease has held
// for twice its time, and the first still serves; a third with another
// id joins as a standby.
func TestSecondRunOfANodeIDIsRefused(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	first, err := Start(context.Background(), Config{DataDir: t.TempDir(), NATSListen: "127.0.0.1:-1", MetricsListen: "off",
		Logger: quiet, NodeID: "a1", LeaseTTL: 600 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = first.Close() })
	if !first.Serving() {
		t.Fatal("the first node of a cluster does not serve the topics")
	}
	_, err = Start(context.Background(), Config{DataDir: t.TempDir(), NATSURL: first.ClientURL(), MetricsListen: "off",
		Logger: quiet, NodeID: "a1", LeaseTTL: 600 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "in use by another running braid serve") {
		t.Fatalf("a second run of a live node id: %v, want a refusal", err)
	}
	standby, err := Start(context.Background(), Config{DataDir: t.TempDir(), NATSURL: first.ClientURL(), MetricsListen: "off",
		Logger: quiet, NodeID: "a2", LeaseTTL: 600 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer standby.Close()
	if standby.Serving() {
		t.Fatal("a second node serves the topics beside the first")
	}
	nodes, err := first.meta.Nodes(context.Background())
	if err != nil || len(nodes) != 2 {
		t.Fatalf("nodes = %+v, %v; want a1 and a2", nodes, err)
	}
	for _, n := range nodes {
		if !n.Live(time.Now()) {
			t.Fatalf("node %s is not live: %+v", n.ID, n)
		}
	}
}
