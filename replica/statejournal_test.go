package replica_test

import (
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/braidmq/braid/replica"
	"github.com/braidmq/braid/wal"
)

// journaledStorage opens the storage of the group in dir/g over journal j
// (made by Bootstrap with voters 1-3 if new).
func journaledStorage(t *testing.T, j *replica.StateJournal, dir, g string) (*replica.Storage, *wal.Log) {
	t.Helper()
	state := filepath.Join(dir, g, "state")
	if _, err := os.Stat(state); os.IsNotExist(err) {
		if err := replica.Bootstrap(nil, state, []uint64{1, 2, 3}); err != nil {
			t.Fatal(err)
		}
	}
	l, err := wal.Open(filepath.Join(dir, g, "log"), wal.Options{Durability: wal.DurabilityAlways})
	if err != nil {
		t.Fatal(err)
	}
	st, err := replica.OpenStorageIn(j, l, nil, state)
	if err != nil {
		l.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return st, l
}

func openStateJournal(t *testing.T, dir string, maxBytes int64) *replica.StateJournal {
	t.Helper()
	j, err := replica.OpenStateJournal(filepath.Join(dir, "journal"), dir, nil, maxBytes)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func hardState(t *testing.T, st *replica.Storage) (term, vote uint64) {
	t.Helper()
	hs, _, err := st.InitialState()
	if err != nil {
		t.Fatal(err)
	}
	return hs.GetTerm(), hs.GetVote()
}

func setHardState(t *testing.T, st *replica.Storage, term, vote uint64) {
	t.Helper()
	if err := st.SetHardState(&pb.HardState{Term: proto.Uint64(term), Vote: proto.Uint64(vote)}); err != nil {
		t.Fatal(err)
	}
}

// What a group's state journal synced is its state after a crash (the
// journal never closed), though its state file never had it; what was
// staged and not synced is not; a mark synced before the frames after it
// keeps them.
func TestStateJournalReplaysAfterACrash(t *testing.T) {
	dir := t.TempDir()
	j := openStateJournal(t, dir, 0)
	a, _ := journaledStorage(t, j, dir, "a")
	b, _ := journaledStorage(t, j, dir, "b")
	setHardState(t, a, 3, 2)
	setHardState(t, b, 5, 1)
	// A new leader's empty entry (a mark), then a record after it.
	if err := b.Append([]*pb.Entry{entry(5, 1), entry(5, 2, wal.Record{Payload: []byte("x")})}); err != nil {
		t.Fatal(err)
	}
	if err := j.Sync(); err != nil {
		t.Fatal(err)
	}
	setHardState(t, a, 4, 0) // staged, never synced: a crash takes it
	// The state file holds the group as made: the changes were in the
	// journal only.
	plain, _ := journaledStorage(t, nil, dir, "a")
	if term, _ := hardState(t, plain); term != 0 {
		t.Fatalf("group a's state file is at term %d: its changes were written there, not journaled", term)
	}
	// The crash: the journal is left as it is, opened again.
	j2 := openStateJournal(t, dir, 0)
	defer j2.Close()
	a2, _ := journaledStorage(t, j2, dir, "a")
	if term, vote := hardState(t, a2); term != 3 || vote != 2 {
		t.Fatalf("after the crash group a is at term %d vote %d, want 3 and 2 (synced; term 4 never was)", term, vote)
	}
	b2, _ := journaledStorage(t, j2, dir, "b")
	if term, vote := hardState(t, b2); term != 5 || vote != 1 {
		t.Fatalf("after the crash group b is at term %d vote %d, want 5 and 1", term, vote)
	}
	if last, _ := b2.LastIndex(); last != 2 {
		t.Fatalf("group b's entries end at %d after the crash, want 2 (its mark and the record after it)", last)
	}
}

// A journal that rolls checkpoints its older files: the latest state of
// each group reaches its state file, and the files go.
func TestStateJournalCheckpoints(t *testing.T) {
	dir := t.TempDir()
	j := openStateJournal(t, dir, 4096)
	a, _ := journaledStorage(t, j, dir, "a")
	for term := uint64(1); term <= 200; term++ {
		setHardState(t, a, term, 1)
		if err := j.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if n := j.Counts().Checkpoints; n == 0 {
		t.Fatal("no checkpoint after rolling past 4 KiB many times")
	}
	files, _ := os.ReadDir(filepath.Join(dir, "journal"))
	if len(files) > 2 {
		t.Fatalf("%d journal files kept after checkpoints", len(files))
	}
	// Opened again, the latest is there (from the file or the journal).
	j2 := openStateJournal(t, dir, 4096)
	a2, _ := journaledStorage(t, j2, dir, "a")
	if term, _ := hardState(t, a2); term != 200 {
		t.Fatalf("group a at term %d after reopening, want 200", term)
	}
	// And its state file alone has a state at least as late as the last
	// checkpoint's: it moved on without the journal's own file.
	if err := j2.Close(); err != nil {
		t.Fatal(err)
	}
	plain, _ := journaledStorage(t, nil, dir, "a")
	if term, _ := hardState(t, plain); term < 100 {
		t.Fatalf("group a's state file is at term %d: the checkpoints did not write it", term)
	}
}

// A group removed and made again at the same path is another instance:
// the journal's records of the old one are neither its state nor
// written over its file.
func TestStateJournalKeepsInstancesApart(t *testing.T) {
	dir := t.TempDir()
	j := openStateJournal(t, dir, 0)
	a, l := journaledStorage(t, j, dir, "a")
	setHardState(t, a, 7, 3)
	if err := j.Sync(); err != nil {
		t.Fatal(err)
	}
	l.Close()
	if err := os.RemoveAll(filepath.Join(dir, "a")); err != nil {
		t.Fatal(err)
	}
	again, _ := journaledStorage(t, j, dir, "a")
	if term, vote := hardState(t, again); term != 0 || vote != 0 {
		t.Fatalf("the group made again at a's path took the old one's state: term %d vote %d", term, vote)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	// At the next open the old records are read again and checkpointed:
	// they must not land in the new group's file.
	j2 := openStateJournal(t, dir, 0)
	if err := j2.Close(); err != nil {
		t.Fatal(err)
	}
	plain, _ := journaledStorage(t, nil, dir, "a")
	if term, _ := hardState(t, plain); term != 0 {
		t.Fatalf("a checkpoint wrote the old group's term %d over the new group's state file", term)
	}
}

// A record a crash cut short ends the replay of its file; the records
// before it stay.
func TestStateJournalStopsAtATornRecord(t *testing.T) {
	dir := t.TempDir()
	j := openStateJournal(t, dir, 0)
	a, _ := journaledStorage(t, j, dir, "a")
	setHardState(t, a, 2, 1)
	if err := j.Sync(); err != nil {
		t.Fatal(err)
	}
	setHardState(t, a, 3, 1)
	if err := j.Sync(); err != nil {
		t.Fatal(err)
	}
	files, err := os.ReadDir(filepath.Join(dir, "journal"))
	if err != nil || len(files) != 1 {
		t.Fatalf("journal files %v, %v", files, err)
	}
	path := filepath.Join(dir, "journal", files[0].Name())
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// The records, then zeros written ahead: cut the second record short.
	end := len(b)
	for end > 0 && b[end-1] == 0 {
		end--
	}
	if err := os.WriteFile(path, b[:end-3], 0o640); err != nil {
		t.Fatal(err)
	}
	j2 := openStateJournal(t, dir, 0)
	defer j2.Close()
	a2, _ := journaledStorage(t, j2, dir, "a")
	if term, _ := hardState(t, a2); term != 2 {
		t.Fatalf("group a at term %d after its last record was cut short, want 2", term)
	}
}

// A journal whose write or sync fails fails the records it took, and
// goes on in a new file once the disk takes writes again: a disk that
// failed a moment (EIO) or filled up (ENOSPC) does not leave every
// replica of the node failing for good (before, the first failure was
// the journal's last word: a node's every new replica failed at once, and
// the fault suite saw a topic relocated 49 times in a minute).
func TestStateJournalGoesOnAfterAFailedSync(t *testing.T) {
	dir := t.TempDir()
	var failing atomic.Bool
	fsys := wal.NewFaultFS(wal.OSFS, func(op, _ string) error {
		if op == "sync" && failing.Load() {
			return syscall.EIO
		}
		return nil
	})
	j, err := replica.OpenStateJournal(filepath.Join(dir, "journal"), dir, fsys, 0)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := journaledStorage(t, j, dir, "a")
	b, _ := journaledStorage(t, j, dir, "b")
	setHardState(t, a, 3, 2)
	if err := j.Sync(); err != nil {
		t.Fatal(err)
	}
	failing.Store(true)
	setHardState(t, a, 4, 1)
	if err := j.Sync(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("a sync on a failing disk: %v, want EIO", err)
	}
	if err := j.Sync(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("the failed records synced again: %v, want their EIO", err)
	}
	failing.Store(false)
	setHardState(t, b, 7, 3)
	if err := j.Sync(); err != nil {
		t.Fatalf("a sync once the disk healed: %v", err)
	}
	// A crash: b's state is what the new file holds.
	j2 := openStateJournal(t, dir, 0)
	defer j2.Close()
	b2, _ := journaledStorage(t, j2, dir, "b")
	if term, vote := hardState(t, b2); term != 7 || vote != 3 {
		t.Fatalf("after the crash group b is at term %d vote %d, want 7 and 3", term, vote)
	}
}
