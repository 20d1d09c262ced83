// Package layers holds the test that keeps Braid's dependencies pointing
// one way (docs/design.md, Packages): a package may import only packages
// of its own floor or of the floors under it, never one above, and the
// pure core reaches no actor, NATS, network or disk code even indirectly.
package layers

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/braidmq/braid/"

// floors lists Braid's packages from the bottom up. A package imports,
// directly or not, only packages of earlier floors or of its own floor's
// earlier entries.
var floors = []struct {
	name     string
	packages []string
}{
	{"leaves", []string{"api", "clock", "internal/poll", "cluster/clusterpb"}},
	{"pure core", []string{"routing", "topology", "scaling", "placement", "authz"}},
	{"storage", []string{"wal", "wal/crashfs", "wal/tier", "compaction", "meta", "logstore", "replica"}},
	{"runtime", []string{"internal/labels", "actors", "lifecycle", "consumers"}},
	{"node edge", []string{"internal/faultnet", "cluster/natsio", "frontend/natsio", "cluster", "frontend", "node"}},
	{"client", []string{"client"}},
}

// apps may import anything (they sit on top of everything).
var apps = []string{"ui", "cmd/", "benchmarks/", "specs", "clustertest", "crashtest", "examples/", "internal/layers"}

// pureForbidden are what no package of the leaves or the pure core may
// depend on, even indirectly: actors, NATS, Braid's storage. pureNoImport
// are what they may not import themselves: the network and the disk (fmt
// and the like reach os underneath).
var (
	pureForbidden = []string{"github.com/asynkron/", "github.com/nats-io/", "github.com/braidmq/braid/wal", "github.com/braidmq/braid/meta"}
	pureNoImport  = []string{"net", "os", "os/exec", "net/http", "syscall"}
)

// apart are pairs of the same floor that must not import each other.
var apart = [][2]string{{"actors", "consumers"}, {"consumers", "actors"}, {"consumers", "lifecycle"}}

// clientMay is all of Braid the Go client may import.
var clientMay = []string{"api", "routing", "topology"}

func TestDependenciesPointDown(t *testing.T) {
	out, err := exec.Command("go", "list", "-e", "-f", "{{.ImportPath}}|{{join .Imports \" \"}}|{{join .Deps \" \"}}", "github.com/braidmq/braid/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	rank := map[string]int{}
	floorOf := map[string]string{}
	r := 0
	for _, f := range floors {
		for _, p := range f.packages {
			rank[p] = r
			floorOf[p] = f.name
			r++
		}
	}
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		parts := strings.Split(line, "|")
		pkg := strings.TrimPrefix(parts[0], module)
		imports, deps := strings.Fields(parts[1]), strings.Fields(parts[2])
		if isApp(pkg) {
			continue
		}
		own, known := rank[pkg]
		if !known {
			t.Errorf("package %s is on no floor: add it to layers_test.go's floors (and docs/design.md)", pkg)
			continue
		}
		checked++
		pure := floorOf[pkg] == "leaves" || floorOf[pkg] == "pure core"
		for _, imp := range imports {
			if pure && contains(pureNoImport, imp) && pkg != "internal/poll" {
				t.Errorf("%s (%s) imports %s: the pure core does no network or disk I/O", pkg, floorOf[pkg], imp)
			}
		}
		reported := false // one forbidden dependency of a pure package says enough
		for _, dep := range deps {
			if pure && !reported {
				for _, bad := range pureForbidden {
					if dep == bad || strings.HasPrefix(dep, bad) && (strings.HasSuffix(bad, "/") || strings.HasPrefix(dep, bad+"/")) {
						t.Errorf("%s (%s) depends on %s: the pure core reaches no actor, NATS or storage code", pkg, floorOf[pkg], dep)
						reported = true
						break
					}
				}
			}
			if !strings.HasPrefix(dep, module) {
				continue
			}
			d := strings.TrimPrefix(dep, module)
			dr, ok := rank[d]
			if !ok {
				if !isApp(d) {
					continue // reported as its own package
				}
				t.Errorf("%s depends on %s, an application", pkg, d)
				continue
			}
			if dr >= own {
				t.Errorf("%s (%s) depends on %s (%s): dependencies point down the floors", pkg, floorOf[pkg], d, floorOf[d])
			}
			for _, a := range apart {
				if pkg == a[0] && d == a[1] {
					t.Errorf("%s depends on %s: they never import each other", pkg, d)
				}
			}
			if pkg == "client" && !contains(clientMay, d) {
				t.Errorf("client depends on %s: it imports only %v of Braid", d, clientMay)
			}
		}
	}
	if checked < 15 {
		t.Fatalf("only %d packages checked", checked)
	}
}

func isApp(pkg string) bool {
	for _, a := range apps {
		if pkg == strings.TrimSuffix(a, "/") || strings.HasSuffix(a, "/") && strings.HasPrefix(pkg, a) {
			return true
		}
	}
	return false
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
