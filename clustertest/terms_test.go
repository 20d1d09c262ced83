package clustertest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/braidmq/braid/logstore"
	"github.com/braidmq/braid/routing"
	"github.com/braidmq/braid/wal"
)

// At most one leader per term per unit, from the logs: a raft entry is
// named by its term and index, and only the one leader of a term writes
// entries of that term, so wherever two copies of a unit hold an entry
// of the same term and index, they hold the same records. Two leaders in
// one term (or a copy that wrote records at another entry's name) show
// as two different entries under one name. Each copy is read from a copy
// of its files (a log opened writes: it cuts a torn tail), taken while
// the nodes run, with the node's journal replayed into it (the commit
// rounds write records to the journal first, and to the logs' files
// later): a torn tail of the copy is left out, what is whole is compared.

// entryKey names a raft entry of a unit: its log's path under the
// topic's directory, term and index.
type entryKey struct {
	unit        string
	term, index uint64
}

// oneLeaderPerTerm compares every entry of topic uri's units across the
// copies on the nodes, failing on two entries under one name, and
// returns how many names it found on two copies or more.
func oneLeaderPerTerm(c *chaosCluster, uri string) int {
	GinkgoHelper()
	name, err := routing.ParseTopic(uri)
	Expect(err).NotTo(HaveOccurred())
	dirs := map[string]string{}
	for _, nd := range c.nodes {
		dirs[nd.id] = nd.dataDir
	}
	shared, err := sameEntryUnderOneName(dirs, filepath.Join(name.Tenant, name.Namespace, name.Name))
	Expect(err).NotTo(HaveOccurred())
	return shared
}

// sameEntryUnderOneName reads copies of the unit logs (those with a raft
// state file) of topic directory topic (tenant/namespace/name) in each
// node's data directory (by node id), and returns how many entry names
// it found on two copies or more, or the first two copies found to hold
// different records under one name.
func sameEntryUnderOneName(dataDirs map[string]string, topic string) (int, error) {
	seen := map[entryKey][]byte{}
	where := map[entryKey]string{}
	shared := 0
	for node, data := range dataDirs {
		dir := filepath.Join(data, "topics", topic)
		if _, err := os.Stat(dir); err != nil {
			continue
		}
		snap, err := os.MkdirTemp("", "terms-")
		if err != nil {
			return 0, err
		}
		defer os.RemoveAll(snap)
		root := filepath.Join(snap, "topics", topic)
		if err := os.MkdirAll(filepath.Dir(root), 0o755); err != nil {
			return 0, err
		}
		if out, err := exec.Command("cp", "-r", dir, root).CombinedOutput(); err != nil {
			return 0, fmt.Errorf("copying %s: %v: %s", dir, err, out)
		}
		if _, err := os.Stat(filepath.Join(data, "journal")); err == nil {
			if out, err := exec.Command("cp", "-r", filepath.Join(data, "journal"), snap).CombinedOutput(); err != nil {
				return 0, fmt.Errorf("copying %s's journal: %v: %s", node, err, out)
			}
			if _, err := wal.ReplayJournal(filepath.Join(snap, "journal"), filepath.Join(snap, "topics"), nil); err != nil {
				return 0, fmt.Errorf("replaying %s's journal into its copy: %v", node, err)
			}
		}
		var units []string
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() && d.Name() == logstore.RaftStateFile {
				units = append(units, filepath.Dir(p))
			}
			return nil
		})
		for _, u := range units {
			rel, _ := filepath.Rel(root, u)
			l, err := wal.Open(u, wal.Options{Preallocate: -1})
			if err != nil {
				continue // damaged past opening: the damage faults say so
			}
			refs, err := l.Entries(0)
			if err != nil {
				l.Close()
				continue
			}
			for _, ref := range refs {
				recs, err := l.ReadRangeDurable(ref.First, int(ref.Count), 0)
				if err != nil || uint64(len(recs)) != ref.Count {
					continue // a hole: damage, said elsewhere
				}
				var b bytes.Buffer
				for _, r := range recs {
					fmt.Fprintf(&b, "%q=%q;", r.Key, r.Payload)
				}
				k := entryKey{unit: rel, term: ref.Term, index: ref.Index}
				if prev, ok := seen[k]; ok {
					shared++
					if !bytes.Equal(prev, b.Bytes()) {
						l.Close()
						return shared, fmt.Errorf("unit %s: entry %d of term %d differs on %s (%s) and %s (%s): two leaders in one term",
							rel, ref.Index, ref.Term, where[k], prev, node, b.Bytes())
					}
					continue
				}
				seen[k], where[k] = b.Bytes(), node
			}
			l.Close()
		}
	}
	return shared, nil
}

// TestTwoLeadersInOneTermAreFound: the check fails on two copies that hold
// different records under one entry name, and passes on copies that
// agree (a check that cannot fail checks nothing).
func TestTwoLeadersInOneTermAreFound(t *testing.T) {
	write := func(data string, payloads ...string) {
		unit := filepath.Join(data, "topics", "t", "ns", "topic", "inc", "seg-0", "b-0")
		l, err := wal.Open(unit, wal.Options{})
		if err != nil {
			t.Fatal(err)
		}
		for i, p := range payloads {
			if _, err := l.AppendEntry(wal.EntryID{Term: 2, Index: uint64(i + 1)}, wal.Record{Key: []byte("k"), Payload: []byte(p)}); err != nil {
				t.Fatal(err)
			}
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(unit, logstore.RaftStateFile), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	a, b, c := t.TempDir(), t.TempDir(), t.TempDir()
	write(a, "x", "y")
	write(b, "x", "y", "z")
	write(c, "x", "w")
	if shared, err := sameEntryUnderOneName(map[string]string{"a": a, "b": b}, "t/ns/topic"); err != nil || shared != 2 {
		t.Fatalf("copies that agree: %d shared, %v", shared, err)
	}
	if _, err := sameEntryUnderOneName(map[string]string{"a": a, "c": c}, "t/ns/topic"); err == nil {
		t.Fatal("two copies with different records under entry 2 of term 2 passed")
	}
}
