package wal_test

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/braidmq/braid/wal"
	"github.com/braidmq/braid/wal/crashfs"
)

// TestCommitGroupRounds writes many logs and commits them in rounds of a
// CommitGroup, in each sync mode and on the operating system's file system
// and the crash file system (whose files sync one by one): every commit
// returns the offset after its record, what a round committed is visible
// at once, and what was committed reads back after a reopen (after a crash
// of the crash file system).
func TestCommitGroupRounds(t *testing.T) {
	for _, mode := range []wal.SyncMode{wal.SyncFS, wal.SyncEach} {
		for _, fsName := range []string{"os", "crash"} {
			t.Run(mode.String()+"/"+fsName, func(t *testing.T) {
				dir := t.TempDir()
				var fsys wal.FS = wal.OSFS
				var mem *crashfs.Mem
				if fsName == "crash" {
					mem = crashfs.NewMem()
					fsys = mem
				}
				g, err := wal.NewCommitGroup(dir, mode, nil)
				if err != nil {
					t.Fatal(err)
				}
				defer g.Close()
				const logs, rounds = 40, 6
				opts := wal.Options{Durability: wal.DurabilityAlways, FS: fsys}
				if mem != nil {
					opts.SegmentBytes = 256 // files roll between rounds
				}
				all := make([]*wal.Log, logs)
				for i := range all {
					if all[i], err = wal.Open(filepath.Join(dir, fmt.Sprint(i)), opts); err != nil {
						t.Fatal(err)
					}
				}
				syncsBefore := wal.Counts().Syncs
				for r := range rounds {
					round := g.NewRound()
					pending := make([]*wal.PendingCommit, logs)
					for i, l := range all {
						// Logs written in some rounds only: a round holds
						// what was written, not every log.
						if (i+r)%3 == 0 {
							continue
						}
						if _, err := l.Write(wal.Record{Payload: fmt.Appendf(nil, "log %d round %d", i, r)}); err != nil {
							t.Fatal(err)
						}
						pending[i] = l.StartCommitIn(round)
					}
					round.Start()
					for i, p := range pending {
						if p == nil {
							continue
						}
						next, err := p.Wait()
						if err != nil {
							t.Fatalf("round %d, log %d: %v", r, i, err)
						}
						if got := all[i].NextOffset(); got != next {
							t.Fatalf("round %d, log %d: committed up to %d but %d visible", r, i, next, got)
						}
					}
				}
				counts := g.Counts()
				if counts.Rounds != rounds || counts.Commits < rounds*logs/2 {
					t.Fatalf("counts %+v: want %d rounds covering over %d commits", counts, rounds, rounds*logs/2)
				}
				// On the operating system's files, a syncfs round is one
				// sync; an fdatasync round one per log.
				syncs := wal.Counts().Syncs - syncsBefore
				switch {
				case mem == nil && mode == wal.SyncFS && syncs != rounds:
					t.Fatalf("%d syncs for %d syncfs rounds", syncs, rounds)
				case mem == nil && mode == wal.SyncEach && syncs != counts.Commits:
					t.Fatalf("%d syncs for %d commits in fdatasync rounds", syncs, counts.Commits)
				}
				if mem != nil {
					mem.Crash()
				} else {
					for _, l := range all {
						if err := l.Close(); err != nil {
							t.Fatal(err)
						}
					}
				}
				for i := range all {
					l, err := wal.Open(filepath.Join(dir, fmt.Sprint(i)), wal.Options{FS: fsys})
					if err != nil {
						t.Fatal(err)
					}
					want := uint64(0)
					for r := range rounds {
						if (i+r)%3 != 0 {
							want++
						}
					}
					if got := l.NextOffset(); got != want {
						t.Fatalf("log %d holds %d records after reopening, want %d", i, got, want)
					}
					l.Close()
				}
			})
		}
	}
}

// TestRoundWithNothing: a round with no commits is done at once, and a
// log with nothing written adds nothing to a round.
func TestRoundWithNothing(t *testing.T) {
	dir := t.TempDir()
	g, err := wal.NewCommitGroup(dir, wal.SyncFS, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	l, err := wal.Open(filepath.Join(dir, "a"), wal.Options{Durability: wal.DurabilityAlways})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	round := g.NewRound()
	p := l.StartCommitIn(round)
	if round.Len() != 0 {
		t.Fatalf("a log with nothing written put %d commits in the round", round.Len())
	}
	round.Start()
	if next, err := p.Wait(); err != nil || next != 0 {
		t.Fatalf("Wait = %d, %v; want 0, nil", next, err)
	}
	if c := g.Counts(); c.Rounds != 0 {
		t.Fatalf("an empty round was counted: %+v", c)
	}
}

func TestParseSyncMode(t *testing.T) {
	for _, m := range []wal.SyncMode{wal.SyncFS, wal.SyncEach} {
		got, err := wal.ParseSyncMode(m.String())
		if err != nil || got != m {
			t.Fatalf("ParseSyncMode(%q) = %v, %v", m, got, err)
		}
	}
	if _, err := wal.ParseSyncMode("sometimes"); err == nil {
		t.Fatal("ParseSyncMode accepted sometimes")
	}
}

// TestRoundsOfMoreFilesThanTheRing: rounds of fdatasyncs over more files
// than the io_uring has slots, two at once, finish (a round that held
// slots while it waited for more hung for ever).
func TestRoundsOfMoreFilesThanTheRing(t *testing.T) {
	dir := t.TempDir()
	g, err := wal.NewCommitGroup(dir, wal.SyncEach, nil)
	if err != nil {
		t.Fatal(err)
	}
	const logs = 300
	all := make([]*wal.Log, logs)
	for i := range all {
		if all[i], err = wal.Open(filepath.Join(dir, fmt.Sprint(i)), wal.Options{Durability: wal.DurabilityAlways}); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan error, 2)
	for half := range 2 {
		go func() {
			round := g.NewRound()
			var pending []*wal.PendingCommit
			for i := half; i < logs; i += 2 {
				if _, err := all[i].Write(wal.Record{Payload: []byte("x")}); err != nil {
					done <- err
					return
				}
				pending = append(pending, all[i].StartCommitIn(round))
			}
			round.Start()
			for _, p := range pending {
				if _, err := p.Wait(); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
	}
	timeout := time.After(60 * time.Second)
	for range 2 {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-timeout:
			// The logs stay open: closing one would wait for the hung sync.
			t.Fatal("rounds of 150 fdatasyncs each did not finish in 60s")
		}
	}
	for _, l := range all {
		l.Close()
	}
}
