package main

import (
	"os"
	"strings"
	"testing"
)

const (
	refBegin = "<!-- cli-reference:begin (make cli-docs writes this from the commands' help) -->\n"
	refEnd   = "<!-- cli-reference:end -->"
	// cliDocs holds the CLI reference, between refBegin and refEnd.
	cliDocs = "../../docs/cli.md"
)

// docs/cli.md's reference is the commands' own help: a flag, a default or
// a command changed without `make cli-docs` (BRAID_UPDATE_DOCS=1) fails
// here.
func TestCLIReference(t *testing.T) {
	b, err := os.ReadFile(cliDocs)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i, j := strings.Index(doc, refBegin), strings.Index(doc, refEnd)
	if i < 0 || j < i {
		t.Fatalf("%s has no CLI reference between %q and %q", cliDocs, refBegin, refEnd)
	}
	want := cliReference(newRoot())
	if got := doc[i+len(refBegin) : j]; got != want {
		if os.Getenv("BRAID_UPDATE_DOCS") != "" {
			if err := os.WriteFile(cliDocs, []byte(doc[:i+len(refBegin)]+want+doc[j:]), 0o644); err != nil {
				t.Fatal(err)
			}
			return
		}
		t.Fatalf("%s's CLI reference is not the commands' help: run make cli-docs", cliDocs)
	}
}
