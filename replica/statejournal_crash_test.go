package replica_test

import (
	"fmt"
	"path/filepath"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/braidmq/braid/replica"
	"github.com/braidmq/braid/wal"
	"github.com/braidmq/braid/wal/crashfs"
)

// The state journal's crash test: three groups change their hard state
// and append a mark and a record after it at each step, their states going
// to one state journal that rolls every few steps (and checkpoints the
// older files into the state files in the background), on the crash file
// system, crashed before each of its changing operations. After each
// crash every group opens, at a term no lower than the last it had
// acknowledged (its state journal and its log synced), with every entry it
// had acknowledged, at the term it was written in.

const crashStateRoot = "/data"

var crashGroups = []string{"a", "b", "c"}

// crashAcked is what a group had acknowledged: its term and last entry.
type crashAcked struct{ term, last uint64 }

// runStateWorkload runs the workload until it is done or the file system
// dies, and returns what each group acknowledged.
func runStateWorkload(fs *crashfs.Mem) (map[string]crashAcked, error) {
	acked := map[string]crashAcked{}
	j, err := replica.OpenStateJournal(crashStateRoot+"/raft-state", crashStateRoot, fs, 600)
	if err != nil {
		return acked, err
	}
	defer j.Close() // waits for the checkpoints under way
	type open struct {
		st *replica.Storage
		l  *wal.Log
	}
	groups := map[string]open{}
	defer func() {
		for _, g := range groups {
			g.l.Close()
		}
	}()
	for _, name := range crashGroups {
		state := filepath.Join(crashStateRoot, name, "raft.state")
		if err := replica.Bootstrap(fs, state, []uint64{1, 2, 3}); err != nil {
			return acked, err
		}
		l, err := wal.Open(filepath.Join(crashStateRoot, name), wal.Options{Durability: wal.DurabilityAlways, FS: fs})
		if err != nil {
			return acked, err
		}
		st, err := replica.OpenStorageIn(j, l, fs, state)
		if err != nil {
			l.Close()
			return acked, err
		}
		groups[name] = open{st, l}
	}
	for step := uint64(1); step <= 12; step++ {
		for k, name := range crashGroups {
			if (int(step)+k)%3 == 0 {
				continue // not every group changes every step
			}
			g := groups[name]
			term := step
			last, _ := g.st.LastIndex()
			if err := g.st.SetHardState(&pb.HardState{Term: proto.Uint64(term), Vote: proto.Uint64(1)}); err != nil {
				return acked, err
			}
			rec := wal.Record{Key: []byte(name), Payload: []byte(fmt.Sprintf("%s-%d", name, step))}
			if err := g.st.Append([]*pb.Entry{entry(term, last+1), entry(term, last+2, rec)}); err != nil {
				return acked, err
			}
			if err := j.Sync(); err != nil {
				return acked, err
			}
			if err := g.st.Commit(); err != nil {
				return acked, err
			}
			acked[name] = crashAcked{term: term, last: last + 2}
		}
	}
	return acked, nil
}

func TestStateJournalCrashAtEveryOperation(t *testing.T) {
	whole := crashfs.NewMem()
	if _, err := runStateWorkload(whole); err != nil {
		t.Fatal(err)
	}
	total := whole.Ops()
	if total < 50 {
		t.Fatalf("the workload made %d changing operations: too few to be this test", total)
	}
	for n := 0; n < total; n++ {
		fs := crashfs.NewMem()
		fs.DieAfter(n)
		acked, _ := runStateWorkload(fs)
		fs.Crash()
		fs.DieAfter(-1)
		j, err := replica.OpenStateJournal(crashStateRoot+"/raft-state", crashStateRoot, fs, 600)
		if err != nil {
			t.Fatalf("crash before operation %d: the state journal does not open: %v", n, err)
		}
		for _, name := range crashGroups {
			a, ok := acked[name]
			if !ok {
				continue // it may not even have been made
			}
			l, err := wal.Open(filepath.Join(crashStateRoot, name), wal.Options{Durability: wal.DurabilityAlways, FS: fs})
			if err != nil {
				t.Fatalf("crash before operation %d: group %s's log: %v", n, name, err)
			}
			st, err := replica.OpenStorageIn(j, l, fs, filepath.Join(crashStateRoot, name, "raft.state"))
			if err != nil {
				t.Fatalf("crash before operation %d: group %s does not open: %v", n, name, err)
			}
			hs, _, _ := st.InitialState()
			last, _ := st.LastIndex()
			if hs.GetTerm() < a.term || last < a.last {
				t.Fatalf("crash before operation %d: group %s is at term %d with entries to %d, but it acknowledged term %d and entries to %d", n, name, hs.GetTerm(), last, a.term, a.last)
			}
			for i := uint64(1); i <= a.last; i++ {
				term, err := st.Term(i)
				if err != nil || term == 0 {
					t.Fatalf("crash before operation %d: group %s's acknowledged entry %d: term %d, %v", n, name, i, term, err)
				}
			}
			l.Close()
		}
		_ = j.Close()
	}
	t.Logf("crashed before each of %d operations", total)
}
