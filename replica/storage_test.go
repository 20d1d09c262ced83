package replica_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/braidmq/braid/replica"
	"github.com/braidmq/braid/wal"
)

func entry(term, index uint64, recs ...wal.Record) *pb.Entry {
	e := &pb.Entry{Term: proto.Uint64(term), Index: proto.Uint64(index), Type: pb.EntryNormal.Enum()}
	if len(recs) > 0 {
		e.Data = wal.EncodeEntryData(nil, recs)
	}
	return e
}

func openStorage(t *testing.T, dir string) (*replica.Storage, *wal.Log) {
	t.Helper()
	l, err := wal.Open(filepath.Join(dir, "log"), wal.Options{Durability: wal.DurabilityAlways})
	if err != nil {
		t.Fatal(err)
	}
	st, err := replica.OpenStorage(l, nil, filepath.Join(dir, "state"))
	if err != nil {
		l.Close()
		t.Fatal(err)
	}
	return st, l
}

func terms(t *testing.T, st *replica.Storage) []uint64 {
	t.Helper()
	first, _ := st.FirstIndex()
	last, _ := st.LastIndex()
	var out []uint64
	for i := first; i <= last; i++ {
		term, err := st.Term(i)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, term)
	}
	return out
}

// The storage keeps entries that carry records in the log and the others
// (a new leader's empty entry) in the state file; a conflicting suffix is
// cut from both; everything reads back the same after a reopen.
func TestStorageAppendConflictReopen(t *testing.T) {
	dir := t.TempDir()
	if err := replica.Bootstrap(nil, filepath.Join(dir, "state"), []uint64{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	if err := replica.Bootstrap(nil, filepath.Join(dir, "state"), []uint64{1, 2, 3}); err == nil {
		t.Fatal("a second Bootstrap over a made group succeeded")
	}
	st, l := openStorage(t, dir)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(st.Append([]*pb.Entry{entry(1, 1), entry(1, 2, rec(1), rec(2)), entry(1, 3, rec(3)), entry(2, 4), entry(2, 5, rec(4))}))
	must(st.Commit())
	// A new leader at term 3 replaces entries 3 on: a mark and a record.
	must(st.Append([]*pb.Entry{entry(3, 3), entry(3, 4, rec(30), rec(31), rec(32))}))
	must(st.Commit())
	must(st.SetHardState(&pb.HardState{Term: proto.Uint64(3), Vote: proto.Uint64(2), Commit: proto.Uint64(4)}))
	check := func(st *replica.Storage, l *wal.Log) {
		t.Helper()
		if got := terms(t, st); len(got) != 4 || got[0] != 1 || got[1] != 1 || got[2] != 3 || got[3] != 3 {
			t.Fatalf("terms %v, want [1 1 3 3]", got)
		}
		if l.NextOffset() != 5 {
			t.Fatalf("the log ends at %d, want 5 (2 records, then 3)", l.NextOffset())
		}
		ents, err := st.Entries(1, 5, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		if len(ents) != 4 || len(ents[0].Data) != 0 || len(ents[2].Data) != 0 {
			t.Fatalf("entries %v", ents)
		}
		recs, err := wal.DecodeEntryData(ents[3].Data)
		if err != nil || len(recs) != 3 || !sameRecord(recs[0], rec(30)) {
			t.Fatalf("entry 4 reads back %v, %v", recs, err)
		}
		if first, count, ok := st.EntryAt(4); !ok || first != 2 || count != 3 {
			t.Fatalf("entry 4 at [%d, +%d) %v", first, count, ok)
		}
		if next := st.Offsets(4); next != 5 {
			t.Fatalf("offsets up to entry 4 end at %d", next)
		}
		if next := st.Offsets(3); next != 2 {
			t.Fatalf("offsets up to entry 3 (a mark) end at %d", next)
		}
		if _, err := st.Entries(0, 2, 1<<20); err != raft.ErrCompacted {
			t.Fatalf("entries from 0: %v", err)
		}
		if _, err := st.Term(9); err != raft.ErrUnavailable {
			t.Fatalf("term past the end: %v", err)
		}
	}
	check(st, l)
	hs, cs, _ := st.InitialState()
	if hs.GetTerm() != 3 || hs.GetVote() != 2 || len(cs.Voters) != 3 {
		t.Fatalf("initial state %v %v", hs, cs)
	}
	l.Close()
	st, l = openStorage(t, dir)
	defer l.Close()
	check(st, l)
	if hs, _, _ := st.InitialState(); hs.GetTerm() != 3 || hs.GetVote() != 2 {
		t.Fatalf("the hard state did not survive: %v", hs)
	}
	// A gap is refused.
	if err := st.Append([]*pb.Entry{entry(3, 7, rec(1))}); err == nil {
		t.Fatal("an append after a gap succeeded")
	}
}

// A crash between a cut of the marks and the frames after them leaves
// frames that do not follow the entries: Open cuts them. A log whose
// first frame does not follow anything is refused, not cut.
func TestStorageOpenCutsWhatACrashLeft(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	if err := replica.Bootstrap(nil, state, []uint64{1}); err != nil {
		t.Fatal(err)
	}
	st, l := openStorage(t, dir)
	if err := st.Append([]*pb.Entry{entry(1, 1), entry(1, 2, rec(1)), entry(2, 3), entry(2, 4, rec(2))}); err != nil {
		t.Fatal(err)
	}
	if err := st.Commit(); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(state)
	if err != nil {
		t.Fatal(err)
	}
	// Entry 5 is a mark, entry 6 records: then the state file goes back to
	// before the mark, as if it never reached the disk.
	if err := st.Append([]*pb.Entry{entry(2, 5), entry(2, 6, rec(3))}); err != nil {
		t.Fatal(err)
	}
	if err := st.Commit(); err != nil {
		t.Fatal(err)
	}
	l.Close()
	if err := os.WriteFile(state, before, 0o600); err != nil {
		t.Fatal(err)
	}
	st, l = openStorage(t, dir)
	if last, _ := st.LastIndex(); last != 4 || l.NextOffset() != 2 {
		t.Fatalf("after the cut: last entry %d, log end %d; want 4 and 2", last, l.NextOffset())
	}
	l.Close()

	// The head of the log dropped with no compaction point: refused.
	hd := t.TempDir()
	if err := replica.Bootstrap(nil, filepath.Join(hd, "state"), []uint64{1}); err != nil {
		t.Fatal(err)
	}
	hl, err := wal.Open(filepath.Join(hd, "log"), wal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hl.AppendEntry(wal.EntryID{Term: 1, Index: 7}, rec(1)); err != nil {
		t.Fatal(err)
	}
	if _, err := replica.OpenStorage(hl, nil, filepath.Join(hd, "state")); err == nil || !strings.Contains(err.Error(), "starts at entry 7") {
		t.Fatalf("open over a log that starts at entry 7: %v", err)
	}
	if hl.NextOffset() != 1 {
		t.Fatal("the refused log was cut")
	}
	hl.Close()
}

func TestStorageRefusesABadStateFile(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	if err := replica.Bootstrap(nil, state, []uint64{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	good, _ := os.ReadFile(state)
	l, err := wal.Open(filepath.Join(dir, "log"), wal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for name, b := range map[string][]byte{
		"empty":       {},
		"no magic":    append([]byte("XXXX"), good[4:]...),
		"flipped bit": append(append([]byte{}, good[:len(good)-1]...), good[len(good)-1]^1),
		"torn":        good[:len(good)-2],
		"version 9":   append(append([]byte("BRRS"), 9), good[5:]...),
	} {
		if err := os.WriteFile(state, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := replica.OpenStorage(l, nil, state); err == nil {
			t.Errorf("%s: opened", name)
		}
	}
	os.Remove(state)
	if _, err := replica.OpenStorage(l, nil, state); err == nil {
		t.Error("opened a group with no state file")
	}
	if err := replica.Bootstrap(nil, state, nil); err == nil {
		t.Error("bootstrapped a group of no voter")
	}
}
