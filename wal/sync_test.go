package wal

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/braidmq/braid/internal/poll"
)

func TestDurabilityAlwaysSyncsEveryAppend(t *testing.T) {
	l := openLog(t, t.TempDir(), Options{})
	defer closeLog(t, l)
	for i := range 5 {
		before := l.syncs.Load()
		mustAppend(t, l, testRecord(i), testRecord(i+1))
		if got := l.syncs.Load(); got != before+1 {
			t.Fatalf("append %d: %d fsync passes, want 1", i, got-before)
		}
	}
	if l.stopSyncer != nil {
		t.Fatal("DurabilityAlways started a syncer goroutine")
	}
}

func TestDurabilityIntervalSyncs(t *testing.T) {
	l := openLog(t, t.TempDir(), Options{Durability: DurabilityInterval, SyncInterval: 2 * time.Millisecond})
	for round := range 3 {
		before := l.syncs.Load()
		mustAppend(t, l, testRecord(round))
		if l.syncs.Load() != before {
			t.Fatal("DurabilityInterval synced inside Append")
		}
		poll.Eventually(t, 10*time.Second, fmt.Sprintf("round %d: no background fsync", round), func() bool {
			l.writeMu.Lock()
			unsynced := l.unsynced
			l.writeMu.Unlock()
			return !unsynced && l.syncs.Load() > before
		})
	}
	closeLog(t, l)
	select {
	case <-l.syncerDone:
	default:
		t.Fatal("Close returned with the syncer goroutine still running")
	}
}

// TestIntervalAppendsDoNotWaitForFsync stalls a background fsync, as a slow
// disk does, and expects appends to go on through many sync intervals
// meanwhile: the pass runs without writeMu.
func TestIntervalAppendsDoNotWaitForFsync(t *testing.T) {
	l := openLog(t, t.TempDir(), Options{Durability: DurabilityInterval, SyncInterval: time.Millisecond})
	defer closeLog(t, l)
	inSync, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	// Passes read slowSync holding syncMu (the background one may run
	// already, every millisecond).
	l.syncMu.Lock()
	l.slowSync = func() {
		once.Do(func() {
			close(inSync)
			<-release
		})
	}
	l.syncMu.Unlock()
	mustAppend(t, l, testRecord(0))
	<-inSync // a pass is in flight, and stays there until release
	done := make(chan error)
	go func() {
		// Appends for 50ms, many sync intervals: the workload, not a wait.
		for i, start := 1, time.Now(); time.Since(start) < 50*time.Millisecond; i++ {
			if _, err := l.Append(testRecord(i)); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		close(release)
		t.Fatal("appends waited for an fsync in progress")
	}
	close(release)
}

// TestFailedBackgroundSyncSurfaces: a Sync that comes right after a failed
// background fsync must not report success for the data that pass took.
func TestFailedBackgroundSyncSurfaces(t *testing.T) {
	l := openLog(t, t.TempDir(), Options{Durability: DurabilityInterval, SyncInterval: time.Hour})
	defer l.Close()
	mustAppend(t, l, testRecord(0))
	// The state right after a background pass failed, before it could
	// take writeMu to make the failure sticky.
	l.syncMu.Lock()
	l.syncErr = errors.New("injected fsync failure")
	l.syncMu.Unlock()
	if err := l.Sync(); !errors.Is(err, ErrFailed) {
		t.Fatalf("Sync after a failed background fsync: %v, want ErrFailed", err)
	}
	if _, err := l.Append(testRecord(1)); !errors.Is(err, ErrFailed) {
		t.Fatalf("Append after a failed background fsync: %v, want ErrFailed", err)
	}
}

func TestDurabilityNoneSyncsOnDemand(t *testing.T) {
	l := openLog(t, t.TempDir(), Options{Durability: DurabilityNone})
	if l.stopSyncer != nil {
		t.Fatal("DurabilityNone started a syncer goroutine")
	}
	mustAppend(t, l, testRecord(1))
	if l.syncs.Load() != 0 {
		t.Fatal("DurabilityNone synced inside Append")
	}
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	if l.syncs.Load() != 1 || l.unsynced {
		t.Fatal("Sync did not sync")
	}
	closeLog(t, l)
}

// TestFailureIsSticky breaks the log's writes, then its fsyncs: the append
// fails, every later write reports ErrFailed, reads go on, and a reopen
// works.
func TestFailureIsSticky(t *testing.T) {
	for _, tt := range []struct {
		name string
		// breakLog makes the next append fail; it returns what the next
		// offset is after a reopen.
		breakLog func(t *testing.T, l *Log) uint64
	}{
		{"write", func(t *testing.T, l *Log) uint64 {
			// Writes go through a descriptor that cannot write; readers
			// keep the good one.
			ro, err := os.Open(l.tail.file.Name())
			if err != nil {
				t.Fatal(err)
			}
			l.writeMu.Lock()
			good := l.tail.file
			l.tail.file = ro
			l.writeMu.Unlock()
			t.Cleanup(func() { good.Close() })
			return 1 // the failed append wrote nothing
		}},
		{"fsync", func(t *testing.T, l *Log) uint64 {
			l.syncMu.Lock()
			l.syncErr = errors.New("injected fsync failure")
			l.syncMu.Unlock()
			return 2 // the failed append reached the file before its fsync failed
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			l := openLog(t, dir, Options{})
			mustAppend(t, l, testRecord(0))
			nextAfterReopen := tt.breakLog(t, l)
			if _, err := l.Append(testRecord(1)); !errors.Is(err, ErrFailed) {
				t.Fatalf("Append with a broken file: %v, want ErrFailed", err)
			}
			if _, err := l.Append(testRecord(2)); !errors.Is(err, ErrFailed) {
				t.Fatalf("Append after a failure: %v, want ErrFailed", err)
			}
			if err := l.Sync(); !errors.Is(err, ErrFailed) {
				t.Fatalf("Sync after a failure: %v, want ErrFailed", err)
			}
			if err := l.TruncateHead(1); !errors.Is(err, ErrFailed) {
				t.Fatalf("TruncateHead after a failure: %v, want ErrFailed", err)
			}
			if err := l.TruncateTail(0); !errors.Is(err, ErrFailed) {
				t.Fatalf("TruncateTail after a failure: %v, want ErrFailed", err)
			}
			if l.NextOffset() != 1 {
				t.Fatalf("a failed append became visible: NextOffset %d", l.NextOffset())
			}
			if got, err := l.Read(0); err != nil || !sameRecord(got, testRecord(0)) {
				t.Fatalf("Read after a failure: %v", err)
			}
			l.Close() // may report the broken descriptor; what matters is the reopen

			l = openLog(t, dir, Options{})
			defer closeLog(t, l)
			if next := l.NextOffset(); next != nextAfterReopen {
				t.Fatalf("NextOffset after reopen = %d, want %d", next, nextAfterReopen)
			}
			mustAppend(t, l, testRecord(3))
		})
	}
}
