package wal

import (
	"fmt"
	"sync"
	"testing"
)

// TestSharedSyncCommitsManyLogsTogether commits many logs at once through
// one SharedSync: every commit returns, everything committed reads back
// after a reopen, and the rounds cover more than one log each.
func TestSharedSyncCommitsManyLogsTogether(t *testing.T) {
	shared := NewSharedSync()
	dir := t.TempDir()
	const logs, commits = 32, 20
	all := make([]*Log, logs)
	for i := range all {
		l, err := Open(fmt.Sprintf("%s/%d", dir, i), Options{Durability: DurabilityAlways, SharedSync: shared})
		if err != nil {
			t.Fatal(err)
		}
		all[i] = l
	}
	var wg sync.WaitGroup
	errs := make(chan error, logs)
	for i, l := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := range commits {
				if _, err := l.Write(Record{Payload: []byte(fmt.Sprintf("%d-%d", i, c))}); err != nil {
					errs <- err
					return
				}
				if _, err := l.Commit(); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	got := shared.Counts()
	if got.Commits != logs*commits {
		t.Fatalf("the shared sync covered %d commits, want %d", got.Commits, logs*commits)
	}
	if got.Rounds >= got.Commits {
		t.Fatalf("%d rounds for %d commits: no round covered two logs", got.Rounds, got.Commits)
	}
	for i, l := range all {
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		l, err := Open(fmt.Sprintf("%s/%d", dir, i), Options{})
		if err != nil {
			t.Fatal(err)
		}
		if n := l.NextOffset(); n != commits {
			t.Fatalf("log %d holds %d records, want %d", i, n, commits)
		}
		l.Close()
	}
	t.Logf("%d commits in %d rounds", got.Commits, got.Rounds)
}
