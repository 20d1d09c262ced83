package cluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestNodeIDStaysWithItsDataDirectory: a data directory gets an id at its
// first start (made, or the one asked for), keeps it, and refuses another;
// a bad id is refused.
func TestNodeIDStaysWithItsDataDirectory(t *testing.T) {
	dir := t.TempDir()
	id, err := ResolveNodeID(dir, "")
	if err != nil || !strings.HasPrefix(id, "n") || len(id) != 9 {
		t.Fatalf("a made id = %q, %v; want n and 8 hex digits", id, err)
	}
	if again, err := ResolveNodeID(dir, ""); err != nil || again != id {
		t.Fatalf("the id at the next start = %q, %v; want %q", again, err, id)
	}
	if same, err := ResolveNodeID(dir, id); err != nil || same != id {
		t.Fatalf("asking for the directory's own id = %q, %v", same, err)
	}
	if _, err := ResolveNodeID(dir, "other"); err == nil || !strings.Contains(err.Error(), "belongs to node") {
		t.Fatalf("another id for the directory: %v, want a refusal", err)
	}
	named := t.TempDir()
	if got, err := ResolveNodeID(named, "n7"); err != nil || got != "n7" {
		t.Fatalf("a chosen id = %q, %v", got, err)
	}
	if b, _ := os.ReadFile(filepath.Join(named, nodeIDFile)); strings.TrimSpace(string(b)) != "n7" {
		t.Fatalf("node-id file holds %q", b)
	}
	if _, err := ResolveNodeID(t.TempDir(), "bad.id"); err == nil {
		t.Fatal("an id with a dot was accepted")
	}
}
