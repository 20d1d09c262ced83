package wal

import (
	"errors"
	"sync"
	"testing"
	"time"
)

func mustWrite(t testing.TB, l *Log, recs ...Record) uint64 {
	t.Helper()
	first, err := l.Write(recs...)
	if err != nil {
		t.Fatalf("Write: %v", err)
	}
	return first
}

func TestWriteIsHiddenUntilCommit(t *testing.T) {
	l := openLog(t, t.TempDir(), Options{})
	defer closeLog(t, l)
	want := []Record{testRecord(0), testRecord(1), testRecord(2)}
	mustAppend(t, l, want[0])
	syncs := l.syncs.Load()
	if first := mustWrite(t, l, want[1], want[2]); first != 1 {
		t.Fatalf("Write returned first %d, want 1", first)
	}
	if l.syncs.Load() != syncs {
		t.Fatal("Write fsynced under DurabilityAlways")
	}
	checkContents(t, l, want, 0, 1)
	next, err := l.Commit()
	if err != nil || next != 3 {
		t.Fatalf("Commit = %d, %v; want 3, nil", next, err)
	}
	if l.syncs.Load() != syncs+1 {
		t.Fatalf("Commit made %d fsync passes, want 1", l.syncs.Load()-syncs)
	}
	checkContents(t, l, want, 0, 3)
	// Nothing new: Commit returns the same point without an fsync.
	if next, err := l.Commit(); err != nil || next != 3 {
		t.Fatalf("second Commit = %d, %v", next, err)
	}
}

func TestWriteUnderNoneIsAppend(t *testing.T) {
	l := openLog(t, t.TempDir(), Options{Durability: DurabilityNone})
	defer closeLog(t, l)
	want := []Record{testRecord(0), testRecord(1)}
	mustWrite(t, l, want...)
	checkContents(t, l, want, 0, 2)
	if next, err := l.Commit(); err != nil || next != 2 {
		t.Fatalf("Commit = %d, %v; want 2, nil", next, err)
	}
}

// TestWriteGoesOnDuringCommit stalls a Commit's fsync, as a slow disk
// does, and expects Write to go on meanwhile.
func TestWriteGoesOnDuringCommit(t *testing.T) {
	l := openLog(t, t.TempDir(), Options{})
	defer closeLog(t, l)
	mustWrite(t, l, testRecord(0))
	inSync, release := make(chan struct{}), make(chan struct{})
	l.slowSync = func() {
		close(inSync)
		<-release
	}
	committed := make(chan uint64)
	go func() {
		next, err := l.Commit()
		if err != nil {
			t.Error(err)
		}
		committed <- next
	}()
	<-inSync
	wrote := make(chan error)
	go func() {
		for i := 1; i < 20; i++ {
			if _, err := l.Write(testRecord(i)); err != nil {
				wrote <- err
				return
			}
		}
		wrote <- nil
	}()
	select {
	case err := <-wrote:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Write waited for the fsync of a Commit")
	}
	close(release)
	if next := <-committed; next != 1 {
		t.Fatalf("Commit covered up to %d, want 1 (what was written before it)", next)
	}
	if got := l.NextOffset(); got != 1 {
		t.Fatalf("NextOffset = %d after the first Commit, want 1", got)
	}
	l.slowSync = nil
	if next, err := l.Commit(); err != nil || next != 20 {
		t.Fatalf("Commit = %d, %v; want 20", next, err)
	}
}

// TestConcurrentWriteCommitRead: one writer writes, one committer commits,
// readers read whatever is visible; everything visible is what was written,
// and in the end everything is there, across rolls and a reopen.
func TestConcurrentWriteCommitRead(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, Options{SegmentBytes: 4 << 10})
	const n = 600
	want := make([]Record, n)
	for i := range want {
		want[i] = testRecord(i)
	}
	var wg sync.WaitGroup
	written := make(chan struct{}, 1)
	done := make(chan struct{})
	wg.Add(1)
	go func() { // the committer
		defer wg.Done()
		last := uint64(0)
		for {
			select {
			case <-written:
			case <-done:
				return
			}
			next, err := l.Commit()
			if err != nil {
				t.Error(err)
				return
			}
			if next < last {
				t.Errorf("Commit went back from %d to %d", last, next)
			}
			last = next
		}
	}()
	for range 2 { // readers
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				next := l.NextOffset()
				if next == 0 {
					continue
				}
				r, err := l.Read(next - 1)
				if err != nil {
					t.Errorf("Read(%d) below NextOffset: %v", next-1, err)
					return
				}
				if !sameRecord(r, want[next-1]) {
					t.Errorf("Read(%d) = %s", next-1, showRecord(r))
					return
				}
			}
		}()
	}
	for i := 0; i < n; i += 3 {
		mustWrite(t, l, want[i:i+3]...)
		select {
		case written <- struct{}{}:
		default:
		}
	}
	if next, err := l.Commit(); err != nil || next != n {
		t.Fatalf("final Commit = %d, %v", next, err)
	}
	close(done)
	wg.Wait()
	checkContents(t, l, want, 0, n)
	closeLog(t, l)
	l = openLog(t, dir, Options{})
	defer closeLog(t, l)
	checkContents(t, l, want, 0, n)
}

func TestTruncateCommitsWhatWasWritten(t *testing.T) {
	l := openLog(t, t.TempDir(), Options{})
	defer closeLog(t, l)
	want := []Record{testRecord(0), testRecord(1), testRecord(2), testRecord(3)}
	mustAppend(t, l, want[0])
	mustWrite(t, l, want[1:]...)
	if err := l.TruncateTail(3); err != nil {
		t.Fatal(err)
	}
	checkContents(t, l, want, 0, 3)
	mustWrite(t, l, want[3])
	if err := l.TruncateHead(2); err != nil {
		t.Fatal(err)
	}
	checkContents(t, l, want, 2, 4)
}

func TestCommitAfterFailedSync(t *testing.T) {
	l := openLog(t, t.TempDir(), Options{})
	mustWrite(t, l, testRecord(0))
	// Close the descriptor under the log: the fsync fails.
	l.writeMu.Lock()
	_ = l.tail.file.Close()
	l.writeMu.Unlock()
	if _, err := l.Commit(); !errors.Is(err, ErrFailed) {
		t.Fatalf("Commit with a failing fsync = %v, want ErrFailed", err)
	}
	if got := l.NextOffset(); got != 0 {
		t.Fatalf("NextOffset = %d after a failed Commit: an unsynced record became visible", got)
	}
	if _, err := l.Write(testRecord(1)); !errors.Is(err, ErrFailed) {
		t.Fatalf("Write after a failed Commit = %v, want ErrFailed", err)
	}
	_ = l.Close()
}

// TestStartCommitCoversWhatWasWrittenBefore: a commit started, then
// waited for, makes durable and visible what was written before it
// started, not what was written while it ran; the next commit covers that.
func TestStartCommitCoversWhatWasWrittenBefore(t *testing.T) {
	l := openLog(t, t.TempDir(), Options{})
	defer closeLog(t, l)
	want := []Record{testRecord(0), testRecord(1), testRecord(2)}
	mustWrite(t, l, want[0], want[1])
	pending := l.StartCommit()
	mustWrite(t, l, want[2]) // while the fsync runs
	next, err := pending.Wait()
	if err != nil || next != 2 {
		t.Fatalf("Wait = %d, %v; want 2, nil", next, err)
	}
	checkContents(t, l, want, 0, 2)
	if next, err := l.StartCommit().Wait(); err != nil || next != 3 {
		t.Fatalf("second commit = %d, %v; want 3, nil", next, err)
	}
	checkContents(t, l, want, 0, 3)
}

// TestStartCommitOfAClosedLogFails: the failure comes back from Wait.
func TestStartCommitOfAClosedLogFails(t *testing.T) {
	l := openLog(t, t.TempDir(), Options{})
	mustWrite(t, l, testRecord(0))
	closeLog(t, l)
	if _, err := l.StartCommit().Wait(); !errors.Is(err, ErrClosed) {
		t.Fatalf("commit of a closed log: %v, want ErrClosed", err)
	}
}
