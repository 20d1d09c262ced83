package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
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

// Every relative link of README.md and docs/*.md names a file or
// directory of the repository, and its #anchor, if any, a heading of the
// Markdown file it points at (anchors as GitHub makes them).
func TestDocsLinksResolve(t *testing.T) {
	pages, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	pages = append([]string{"../../README.md"}, pages...)
	anchors := map[string]map[string]bool{} // Markdown file -> its anchors
	anchorsOf := func(path string) (map[string]bool, error) {
		if a, ok := anchors[path]; ok {
			return a, nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		a := headingAnchors(string(b))
		anchors[path] = a
		return a, nil
	}
	links := 0
	for _, page := range pages {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range markdownLinks(string(b)) {
			if strings.Contains(l.target, "://") || strings.HasPrefix(l.target, "mailto:") {
				continue
			}
			links++
			file, anchor, _ := strings.Cut(l.target, "#")
			path := page
			if file != "" {
				path = filepath.Join(filepath.Dir(page), file)
				if strings.HasPrefix(filepath.Clean(path), "../../../") || filepath.Clean(path) == "../../.." {
					t.Errorf("%s:%d: %s points outside the repository", page, l.line, l.target)
					continue
				}
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s:%d: %s: %v", page, l.line, l.target, err)
					continue
				}
			}
			if anchor == "" {
				continue
			}
			if !strings.HasSuffix(path, ".md") {
				t.Errorf("%s:%d: %s: an anchor into a file that is not Markdown", page, l.line, l.target)
				continue
			}
			a, err := anchorsOf(path)
			if err != nil {
				t.Errorf("%s:%d: %s: %v", page, l.line, l.target, err)
				continue
			}
			if !a[anchor] {
				t.Errorf("%s:%d: %s: %s has no heading with that anchor", page, l.line, l.target, path)
			}
		}
	}
	if links < 50 {
		t.Fatalf("only %d relative links found: is the link parser broken?", links)
	}
}

type mdLink struct {
	target string
	line   int
}

var (
	linkRE       = regexp.MustCompile(`\]\(([^()\s]+)(?:\s+"[^"]*")?\)`)
	inlineCodeRE = regexp.MustCompile("`[^`]*`")
)

// markdownLinks returns the targets of the inline links of a Markdown
// text, outside fenced code blocks and code spans.
func markdownLinks(text string) []mdLink {
	var links []mdLink
	fenced := false
	for n, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		line = inlineCodeRE.ReplaceAllString(line, "")
		for _, m := range linkRE.FindAllStringSubmatch(line, -1) {
			links = append(links, mdLink{target: m[1], line: n + 1})
		}
	}
	return links
}

// headingAnchors returns the anchors GitHub gives the headings of a
// Markdown text: lower case, punctuation dropped, spaces made hyphens, a
// repeated one suffixed -1, -2...
func headingAnchors(text string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	fenced := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced || !strings.HasPrefix(line, "#") {
			continue
		}
		title := strings.TrimLeft(line, "#")
		if len(line)-len(title) > 6 || !strings.HasPrefix(title, " ") {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(title)) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r):
				b.WriteRune(r)
			}
		}
		a := b.String()
		if k := seen[a]; k > 0 {
			anchors[a+"-"+strconv.Itoa(k)] = true
		} else {
			anchors[a] = true
		}
		seen[a]++
	}
	return anchors
}
