package wal_test

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/braidmq/braid/wal"
)

// TestJournalRounds commits many logs through a journal on the operating
// system's file system: one sync a round (the journal's), every commit
// visible at once, and the journal's file filled with zeros ahead of what
// it holds. Then it plays a crash that lost every write to the logs' own
// files (a copy of the directories with the log files emptied): the
// journal's replay restores every record.
func TestJournalRounds(t *testing.T) {
	base := t.TempDir()
	root, jdir := filepath.Join(base, "logs"), filepath.Join(base, "journal")
	j, err := wal.OpenJournal(jdir, root, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	g, err := wal.NewCommitGroup(root, wal.SyncFS, j)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	const logs, rounds = 30, 8
	all := make([]*wal.Log, logs)
	for i := range all {
		if all[i], err = wal.Open(filepath.Join(root, fmt.Sprint(i)), wal.Options{Durability: wal.DurabilityAlways, Journal: j}); err != nil {
			t.Fatal(err)
		}
	}
	syncsBefore := wal.Counts().Syncs
	for r := range rounds {
		round := g.NewRound()
		pending := make([]*wal.PendingCommit, logs)
		for i, l := range all {
			if _, err := l.Write(wal.Record{Key: []byte("k"), Payload: fmt.Appendf(nil, "log %d round %d", i, r)}); err != nil {
				t.Fatal(err)
			}
			pending[i] = l.StartCommitIn(round)
		}
		round.Start()
		for i, p := range pending {
			next, err := p.Wait()
			if err != nil || next != uint64(r+1) || all[i].NextOffset() != next {
				t.Fatalf("round %d, log %d: Wait = %d, %v; visible %d", r, i, next, err, all[i].NextOffset())
			}
		}
	}
	if syncs := wal.Counts().Syncs - syncsBefore; syncs != rounds {
		t.Fatalf("%d syncs for %d journaled rounds; want one a round", syncs, rounds)
	}
	if c := j.Counts(); c.Rounds != rounds || c.Entries != rounds*logs {
		t.Fatalf("journal counts %+v; want %d rounds of %d entries", c, rounds, logs)
	}

	// The crash: copies of the directories, the logs' files emptied.
	crashed := t.TempDir()
	copyTree(t, base, crashed)
	croot, cjdir := filepath.Join(crashed, "logs"), filepath.Join(crashed, "journal")
	for i := range all {
		if err := os.Truncate(filepath.Join(croot, fmt.Sprint(i), fmt.Sprintf("%020d", 0)), 0); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := wal.ReplayJournal(cjdir, croot, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Entries != rounds*logs || len(rep.Damaged) > 0 {
		t.Fatalf("replay %+v; want %d entries, no damage", rep, rounds*logs)
	}
	for i := range all {
		l, err := wal.Open(filepath.Join(croot, fmt.Sprint(i)), wal.Options{})
		if err != nil {
			t.Fatal(err)
		}
		for r := range rounds {
			rec, err := l.Read(uint64(r))
			if err != nil || string(rec.Payload) != fmt.Sprintf("log %d round %d", i, r) {
				t.Fatalf("log %d offset %d after replay: %q, %v", i, r, rec.Payload, err)
			}
		}
		l.Close()
	}
	if left, _ := os.ReadDir(cjdir); len(left) != 0 {
		t.Fatalf("the replay left journal files: %v", left)
	}

	// Closed logs synced their files: the checkpoint of Close removes the
	// journal's files but the new one.
	for _, l := range all {
		l.Close()
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if left, _ := os.ReadDir(jdir); len(left) != 1 {
		t.Fatalf("after Close the journal holds %d files, want the empty new one", len(left))
	}
}

// TestJournalReplaySkipsWhatIsGone: entries of a log whose directory was
// removed, or of a file retention removed, are skipped, and replay creates
// nothing.
func TestJournalReplaySkipsWhatIsGone(t *testing.T) {
	base := t.TempDir()
	root, jdir := filepath.Join(base, "logs"), filepath.Join(base, "journal")
	j, err := wal.OpenJournal(jdir, root, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	g, err := wal.NewCommitGroup(root, wal.SyncEach, j)
	if err != nil {
		t.Fatal(err)
	}
	opts := wal.Options{Durability: wal.DurabilityAlways, Journal: j}
	a, _ := wal.Open(filepath.Join(root, "a"), opts)
	b, _ := wal.Open(filepath.Join(root, "b"), opts)
	round := g.NewRound()
	var pending []*wal.PendingCommit
	for _, l := range []*wal.Log{a, b} {
		if _, err := l.Write(wal.Record{Payload: []byte("x")}); err != nil {
			t.Fatal(err)
		}
		pending = append(pending, l.StartCommitIn(round))
	}
	round.Start()
	for _, p := range pending {
		if _, err := p.Wait(); err != nil {
			t.Fatal(err)
		}
	}
	a.Close()
	b.Close()
	crashed := t.TempDir()
	copyTree(t, base, crashed)
	croot := filepath.Join(crashed, "logs")
	if err := os.RemoveAll(filepath.Join(croot, "a")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(croot, "b", fmt.Sprintf("%020d", 0))); err != nil {
		t.Fatal(err)
	}
	rep, err := wal.ReplayJournal(filepath.Join(crashed, "journal"), croot, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Entries != 0 || rep.Skipped != 2 {
		t.Fatalf("replay %+v; want both entries skipped", rep)
	}
	if _, err := os.Stat(filepath.Join(croot, "a")); err == nil {
		t.Fatal("replay created the removed log's directory")
	}
	if _, err := os.Stat(filepath.Join(croot, "b", fmt.Sprintf("%020d", 0))); err == nil {
		t.Fatal("replay created the removed file")
	}
}

// copyTree copies the regular files and directories under src to dst.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o750)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o640)
	})
	if err != nil {
		t.Fatal(err)
	}
}
