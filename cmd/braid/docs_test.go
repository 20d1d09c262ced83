package main

import (
	"os"
	"strings"
	"testing"
)

const (
	refBegin = "<!-- cli-reference:begin (make cli-docs writes this from the commands' help) -->\n"
	refEnd   = "<!-- cli-reference:end -->"
)

// README's CLI reference is the commands' own help: a flag, a default or
// a command changed without `make cli-docs` fails here.
func TestREADMECLIReference(t *testing.T) {
	const path = "../../README.md"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	i, j := strings.Index(readme, refBegin), strings.Index(readme, refEnd)
	if i < 0 || j < i {
		t.Fatalf("README has no CLI reference between %q and %q", refBegin, refEnd)
	}
	want := cliReference(newRoot())
	if got := readme[i+len(refBegin) : j]; got != want {
		if os.Getenv("BRAID_UPDATE_README") != "" {
			if err := os.WriteFile(path, []byte(readme[:i+len(refBegin)]+want+readme[j:]), 0o644); err != nil {
				t.Fatal(err)
			}
			return
		}
		t.Fatalf("README's CLI reference is not the commands' help: run make cli-docs")
	}
}
