package wal

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/braidmq/braid/internal/poll"
)

func appendN(t *testing.T, l *Log, n int, ts int64, size int) {
	t.Helper()
	for i := 0; i < n; i++ {
		if _, err := l.Append(Record{Timestamp: ts, Key: []byte("k"), Payload: make([]byte, size)}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSetSegmentBytesRollsBySize: a smaller segment size set on an open log
// rolls it at the next writes; Unlimited stops rolling.
func TestSetSegmentBytesRollsBySize(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir, Options{Durability: DurabilityNone})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	appendN(t, l, 10, 1, 100)
	if files, _ := l.ClosedFiles(); len(files) != 0 {
		t.Fatalf("closed files before any roll: %+v", files)
	}
	l.SetSegmentBytes(500)
	appendN(t, l, 20, 1, 100)
	files, err := l.ClosedFiles()
	if err != nil || len(files) < 2 {
		t.Fatalf("after a 500-byte segment size: %d closed files, %v", len(files), err)
	}
	l.SetSegmentBytes(Unlimited)
	before := len(files)
	appendN(t, l, 50, 1, 100)
	// The frame that had crossed 500 bytes closes one more at most.
	if files, _ := l.ClosedFiles(); len(files) > before+1 {
		t.Fatalf("an unlimited segment size rolled: %d closed files, had %d", len(files), before)
	}
}

// TestRollStartsANewFile: Roll closes a tail that holds records and not
// an empty one; the records stay readable, before and after a reopen.
func TestRollStartsANewFile(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if rolled, err := l.Roll(); err != nil || rolled {
		t.Fatalf("roll of an empty tail: %v %v", rolled, err)
	}
	appendN(t, l, 5, 1000, 10)
	started := l.TailStarted()
	if rolled, err := l.Roll(); err != nil || !rolled {
		t.Fatalf("roll: %v %v", rolled, err)
	}
	if !l.TailStarted().After(started) {
		t.Fatal("the new tail's start was not recorded")
	}
	if rolled, _ := l.Roll(); rolled {
		t.Fatal("rolled a tail with no record")
	}
	appendN(t, l, 3, 2000, 10)
	files, err := l.ClosedFiles()
	if err != nil || len(files) != 1 || files[0].First != 0 || files[0].Next != 5 || files[0].Newest != 1000 || files[0].Bytes == 0 {
		t.Fatalf("closed files: %+v, %v", files, err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l, err = Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	recs, err := l.ReadRange(0, 100, 0)
	if err != nil || len(recs) != 8 || recs[7].Timestamp != 2000 {
		t.Fatalf("after reopen: %d records, %v", len(recs), err)
	}
}

// TestDropFilesBeforeNeverTheOpenFile: retention removes whole closed
// files from the head, never the open one, and the first offset stays
// moved after a reopen; a bound that is not a file's first offset, or is
// past the open file's, is refused.
func TestDropFilesBeforeNeverTheOpenFile(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for f := 0; f < 3; f++ {
		appendN(t, l, 4, int64(f+1)*1000, 10)
		if _, err := l.Roll(); err != nil {
			t.Fatal(err)
		}
	}
	appendN(t, l, 2, 9000, 10) // the open file: offsets 12, 13
	files, _ := l.ClosedFiles()
	if len(files) != 3 || files[1].First != 4 || files[2].Newest != 3000 {
		t.Fatalf("closed files: %+v", files)
	}
	if err := l.DropFilesBefore(6); !errors.Is(err, ErrNotFound) {
		t.Fatalf("drop inside a file: %v", err)
	}
	if err := l.DropFilesBefore(14); !errors.Is(err, ErrNotFound) {
		t.Fatalf("drop past the open file: %v", err)
	}
	if err := l.DropFilesBefore(8); err != nil {
		t.Fatal(err)
	}
	if l.FirstOffset() != 8 {
		t.Fatalf("first offset %d, want 8", l.FirstOffset())
	}
	if files, _ := l.ClosedFiles(); len(files) != 1 || files[0].First != 8 {
		t.Fatalf("closed files after the drop: %+v", files)
	}
	// Everything closed goes; the open file stays.
	if err := l.DropFilesBefore(12); err != nil {
		t.Fatal(err)
	}
	recs, err := l.ReadRange(12, 10, 0)
	if err != nil || len(recs) != 2 {
		t.Fatalf("the open file's records: %d, %v", len(recs), err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l, err = Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if l.FirstOffset() != 12 || l.NextOffset() != 14 {
		t.Fatalf("after reopen: [%d, %d), want [12, 14)", l.FirstOffset(), l.NextOffset())
	}
}

// TestRollAndDropDuringAppends: rolls and drops while a writer appends
// lose nothing the writer was told is stored and leave the offsets
// contiguous.
func TestRollAndDropDuringAppends(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var wg sync.WaitGroup
	wg.Add(1)
	stop := make(chan struct{})
	var last atomic.Uint64
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			off, err := l.Append(Record{Timestamp: int64(i), Payload: []byte(fmt.Sprint(i))})
			if err != nil {
				t.Error(err)
				return
			}
			last.Store(off)
		}
	}()
	for i := 0; i < 50; i++ {
		// Some appends at each step.
		want := l.NextOffset() + 10
		poll.Eventually(t, 10*time.Second, "the writer appends nothing", func() bool { return l.NextOffset() >= want })
		if _, err := l.Roll(); err != nil {
			t.Fatal(err)
		}
		if files, _ := l.ClosedFiles(); len(files) > 3 {
			if err := l.DropFilesBefore(files[len(files)-3].First); err != nil {
				t.Fatal(err)
			}
		}
	}
	close(stop)
	wg.Wait()
	first, end := l.FirstOffset(), last.Load()
	recs, err := l.ReadRange(first, int(end-first+1), 0)
	if err != nil || uint64(len(recs)) != end-first+1 {
		t.Fatalf("read [%d, %d]: %d records, %v", first, end, len(recs), err)
	}
	for i, r := range recs {
		if r.Timestamp != int64(first)+int64(i) {
			t.Fatalf("record %d has time %d", first+uint64(i), r.Timestamp)
		}
	}
}

// TestTailStartedAtReopenIsItsFirstRecord: a tail found on disk started
// no later than its first record: a file of old records is due to roll by
// age at once, not a segment_ms after the reopen.
func TestTailStartedAtReopenIsItsFirstRecord(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-365 * 24 * time.Hour).UnixMilli()
	appendN(t, l, 3, old, 10)
	l.Close()
	if l, err = Open(dir, Options{}); err != nil {
		t.Fatal(err)
	}
	if got := l.TailStarted().UnixMilli(); got != old {
		t.Fatalf("a reopened tail of a year-old record started at %d, want %d", got, old)
	}
	l.Close()
	// An empty tail, or records stamped in the future, start at the open.
	dir = t.TempDir()
	if l, err = Open(dir, Options{}); err != nil {
		t.Fatal(err)
	}
	appendN(t, l, 1, time.Now().Add(time.Hour).UnixMilli(), 10)
	l.Close()
	before := time.Now()
	if l, err = Open(dir, Options{}); err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if l.TailStarted().Before(before) {
		t.Fatalf("a tail of a record from the future started at %v, before the open", l.TailStarted())
	}
}

// A closed file's newest time is its largest timestamp, not its last
// record's: producers set times in any order, and a file whose last record
// came with an old time must not be removed with it (it once was: a file
// of a thousand records written a minute earlier went at the next pass).
// Counted as written for a file rolled here; for one closed before the log
// was opened, and a tail reopened and rolled, ClosedFiles gives the last
// record's (a lower bound) and ExactNewest reads the file through.
func TestClosedFileNewestIsTheLargestTimestamp(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, l, 3, 5000, 10)
	appendN(t, l, 1, 1000, 10) // an old time, last
	if _, err := l.Roll(); err != nil {
		t.Fatal(err)
	}
	appendN(t, l, 2, 7000, 10)
	appendN(t, l, 1, 3000, 10)
	newest := func(l *Log) []int64 {
		t.Helper()
		files, err := l.ClosedFiles()
		if err != nil {
			t.Fatal(err)
		}
		var out []int64
		for _, f := range files {
			out = append(out, f.Newest)
		}
		return out
	}
	if m, ok := l.maxTimes[0]; !ok || m != 5000 {
		t.Fatalf("the roll counted %d (%v), want 5000", m, ok)
	}
	if files, _ := l.ClosedFiles(); len(files) != 1 || files[0].Newest != 5000 || !files[0].Exact {
		t.Fatalf("rolled here: %+v, want newest 5000, exact", files)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// Reopened: the closed file is read through; the tail, written before,
	// is not counted whole, so it is read through once rolled.
	l, err = Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	appendN(t, l, 1, 2000, 10)
	if _, err := l.Roll(); err != nil {
		t.Fatal(err)
	}
	appendN(t, l, 1, 100, 10)
	// ClosedFiles reads only the last record of each (a lower bound);
	// ExactNewest reads them through, once.
	if got := newest(l); len(got) != 2 || got[0] != 1000 || got[1] != 2000 {
		t.Fatalf("after a reopen: newest %v, want the last records' [1000 2000]", got)
	}
	files, err := l.ClosedFiles()
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []int64{5000, 7000} {
		if f := l.ExactNewest(files[i]); !f.Exact || f.Newest != want || files[i].Exact {
			t.Fatalf("file %d: exact newest %+v (listed %+v), want %d", i, f, files[i], want)
		}
	}
	if got := newest(l); len(got) != 2 || got[0] != 5000 || got[1] != 7000 {
		t.Fatalf("after ExactNewest: newest %v, want [5000 7000] remembered", got)
	}
}
