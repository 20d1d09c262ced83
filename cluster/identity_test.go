package cluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestADataDirectoryKeepsItsIncarnation: a directory's first use makes an
// incarnation, every later one reads the same; another directory gets
// another; a damaged file is refused, naming it, and left as it was.
func TestADataDirectoryKeepsItsIncarnation(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	inc, err := ResolveIncarnation(dir)
	if err != nil || len(inc) != incarnationLen {
		t.Fatalf("a new directory's incarnation = %q, %v", inc, err)
	}
	if again, err := ResolveIncarnation(dir); err != nil || again != inc {
		t.Fatalf("at the next start = %q, %v; want %q", again, err, inc)
	}
	if other, err := ResolveIncarnation(t.TempDir()); err != nil || other == inc {
		t.Fatalf("another directory's = %q, %v; want a new one", other, err)
	}
	path := filepath.Join(dir, incarnationFile)
	if err := os.WriteFile(path, []byte("not-hex\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ResolveIncarnation(dir); err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("a damaged incarnation file: %v, want a refusal naming it", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "not-hex\n" {
		t.Fatalf("the refused file was changed to %q", b)
	}
}
