package wal

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"
)

// testRecord returns a deterministic record for offset-like number i. Its
// bytes are never zero, so that zero fill cannot complete a torn copy, and
// its size varies from about 40 to 190 bytes, so that size prefixes take
// one or two bytes.
func testRecord(i int) Record {
	payload := make([]byte, 20+(i*37)%150)
	for j := range payload {
		payload[j] = byte('a' + (i+j)%26)
	}
	r := Record{
		Timestamp: 1700000000000 + int64(i),
		Key:       []byte(fmt.Sprintf("key-%d", i)),
		Payload:   payload,
	}
	if i%3 == 0 {
		r.Headers = []Header{{Key: "trace", Value: []byte(fmt.Sprintf("t%d", i))}}
	}
	return r
}

// batchEntryLen is the size of the entry one append of recs (within
// maxBatchRecordBytes) stores.
func batchEntryLen(recs []Record) int {
	frameLen := batchHeaderLen
	for _, r := range recs {
		frameLen += storedLen(bodyLen(r))
	}
	return uvarintLen(uint64(frameLen)) + frameLen
}

func fileSize(t testing.TB, path string) int64 {
	t.Helper()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return info.Size()
}

func openLog(t testing.TB, dir string, opts Options) *Log {
	t.Helper()
	l, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	return l
}

func closeLog(t testing.TB, l *Log) {
	t.Helper()
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

func mustAppend(t testing.TB, l *Log, recs ...Record) uint64 {
	t.Helper()
	first, err := l.Append(recs...)
	if err != nil {
		t.Fatalf("Append: %v", err)
	}
	return first
}

// checkContents asserts that l holds exactly want[first:next] at
// [first, next), through Read and through ReadRange.
func checkContents(t testing.TB, l *Log, want []Record, first, next uint64) {
	t.Helper()
	if got := l.FirstOffset(); got != first {
		t.Fatalf("FirstOffset = %d, want %d", got, first)
	}
	if got := l.NextOffset(); got != next {
		t.Fatalf("NextOffset = %d, want %d", got, next)
	}
	for off := first; off < next; off++ {
		got, err := l.Read(off)
		if err != nil {
			t.Fatalf("Read(%d): %v", off, err)
		}
		if !sameRecord(got, want[off]) {
			t.Fatalf("Read(%d) = %s, want %s", off, showRecord(got), showRecord(want[off]))
		}
	}
	var all []Record
	for off := first; off < next; {
		recs, err := l.ReadRange(off, 7, 0)
		if err != nil {
			t.Fatalf("ReadRange(%d): %v", off, err)
		}
		if len(recs) == 0 {
			t.Fatalf("ReadRange(%d) returned nothing before next %d", off, next)
		}
		all = append(all, recs...)
		off += uint64(len(recs))
	}
	for i, got := range all {
		if !sameRecord(got, want[first+uint64(i)]) {
			t.Fatalf("ReadRange record %d differs", first+uint64(i))
		}
	}
	for _, off := range []uint64{first - 1, next, next + 1} {
		if off == first-1 && first == 0 {
			continue
		}
		if _, err := l.Read(off); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Read(%d) outside [%d, %d): %v, want ErrNotFound", off, first, next, err)
		}
	}
}

func TestAppendReadReopen(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, Options{})
	checkContents(t, l, nil, 0, 0)

	var want []Record
	for i := range 10 {
		want = append(want, testRecord(i))
	}
	if got := mustAppend(t, l, want[0]); got != 0 {
		t.Fatalf("first Append at %d, want 0", got)
	}
	if got := mustAppend(t, l, want[1:6]...); got != 1 {
		t.Fatalf("batch Append at %d, want 1", got)
	}
	if got := mustAppend(t, l); got != 6 {
		t.Fatalf("empty Append = %d, want NextOffset 6", got)
	}
	frames := [][]byte{EncodeRecord(nil, want[6]), EncodeRecord(nil, want[7])}
	if got, err := l.AppendEncoded(frames); err != nil || got != 6 {
		t.Fatalf("AppendEncoded = %d, %v; want 6", got, err)
	}
	mustAppend(t, l, want[8:]...)
	checkContents(t, l, want, 0, 10)
	if l.Repair() != (RepairReport{}) {
		t.Fatalf("fresh log reports a repair: %+v", l.Repair())
	}
	closeLog(t, l)

	l = openLog(t, dir, Options{})
	checkContents(t, l, want, 0, 10)
	if l.Repair() != (RepairReport{}) {
		t.Fatalf("clean reopen reports a repair: %+v", l.Repair())
	}
	closeLog(t, l)

	// Every method of a closed log fails with ErrClosed.
	if err := l.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := l.Append(want[0]); !errors.Is(err, ErrClosed) {
		t.Fatalf("Append after Close: %v", err)
	}
	if _, err := l.Read(0); !errors.Is(err, ErrClosed) {
		t.Fatalf("Read after Close: %v", err)
	}
	if _, err := l.ReadRange(0, 1, 0); !errors.Is(err, ErrClosed) {
		t.Fatalf("ReadRange after Close: %v", err)
	}
	for name, err := range map[string]error{
		"Sync": l.Sync(), "TruncateHead": l.TruncateHead(1), "TruncateTail": l.TruncateTail(1),
	} {
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("%s after Close: %v", name, err)
		}
	}
}

func TestAppendEncodedRejectsBadFrames(t *testing.T) {
	l := openLog(t, t.TempDir(), Options{Durability: DurabilityNone})
	defer closeLog(t, l)
	good := EncodeRecord(nil, testRecord(1))
	bad := bytes.Clone(good)
	bad[len(bad)-1] ^= 0xff
	for _, frames := range [][][]byte{{good, bad}, {good, {}}, {nil}, {{9, 0, 0, 0, 0}}} {
		if _, err := l.AppendEncoded(frames); err == nil {
			t.Fatalf("AppendEncoded accepted a bad frame")
		}
	}
	if l.NextOffset() != 0 {
		t.Fatalf("a rejected batch was written: NextOffset %d", l.NextOffset())
	}
}

func TestReadRangeLimits(t *testing.T) {
	l := openLog(t, t.TempDir(), Options{Durability: DurabilityNone, SegmentBytes: 1024})
	defer closeLog(t, l)
	var want []Record
	for i := range 50 {
		want = append(want, testRecord(i))
	}
	for i := 0; i < len(want); i += 7 {
		mustAppend(t, l, want[i:min(i+7, len(want))]...)
	}
	if files, _ := listSegmentFiles(OSFS, l.Dir()); len(files) < 3 {
		t.Fatalf("want several files, got %d", len(files))
	}
	frameLen := func(i int) int { return encodedLen(want[i]) }

	recs, err := l.ReadRange(10, 5, 0)
	if err != nil || len(recs) != 5 {
		t.Fatalf("ReadRange(10, 5, 0) = %d records, %v", len(recs), err)
	}
	// A byte limit below one record still returns one.
	if recs, err = l.ReadRange(10, 0, 1); err != nil || len(recs) != 1 || !sameRecord(recs[0], want[10]) {
		t.Fatalf("ReadRange(10, 0, 1) = %d records, %v", len(recs), err)
	}
	// A byte limit that fits exactly three frames returns three.
	limit := frameLen(20) + frameLen(21) + frameLen(22)
	if recs, err = l.ReadRange(20, 0, limit); err != nil || len(recs) != 3 {
		t.Fatalf("ReadRange(20, 0, %d) = %d records, %v", limit, len(recs), err)
	}
	if recs, err = l.ReadRange(20, 0, limit-1); err != nil || len(recs) != 2 {
		t.Fatalf("ReadRange(20, 0, %d) = %d records, %v", limit-1, len(recs), err)
	}
	// No limits: everything to the end, across files.
	if recs, err = l.ReadRange(3, 0, 0); err != nil || len(recs) != 47 {
		t.Fatalf("ReadRange(3, 0, 0) = %d records, %v", len(recs), err)
	}
	for i, r := range recs {
		if !sameRecord(r, want[3+i]) {
			t.Fatalf("record %d differs", 3+i)
		}
	}
	// At the end: nothing, no error. Beyond: ErrNotFound.
	if recs, err = l.ReadRange(50, 10, 0); err != nil || len(recs) != 0 {
		t.Fatalf("ReadRange(next) = %d records, %v", len(recs), err)
	}
	if _, err = l.ReadRange(51, 10, 0); !errors.Is(err, ErrNotFound) {
		t.Fatalf("ReadRange(next+1): %v", err)
	}
	if err := l.TruncateHead(5); err != nil {
		t.Fatal(err)
	}
	if _, err = l.ReadRange(4, 10, 0); !errors.Is(err, ErrNotFound) {
		t.Fatalf("ReadRange below first: %v", err)
	}
}

func TestTruncateHead(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SegmentBytes: 600}
	l := openLog(t, dir, opts)
	var want []Record
	for i := range 40 {
		want = append(want, testRecord(i))
		mustAppend(t, l, want[i])
	}
	sizeBefore := l.SizeBytes()
	for _, before := range []uint64{0, 1, 7, 7, 3, 22, 39} {
		if err := l.TruncateHead(before); err != nil {
			t.Fatalf("TruncateHead(%d): %v", before, err)
		}
	}
	checkContents(t, l, want, 39, 40)
	if l.SizeBytes() >= sizeBefore {
		t.Fatalf("SizeBytes did not shrink: %d -> %d", sizeBefore, l.SizeBytes())
	}
	if err := l.TruncateHead(41); !errors.Is(err, ErrNotFound) {
		t.Fatalf("TruncateHead beyond next: %v", err)
	}
	closeLog(t, l)

	l = openLog(t, dir, opts)
	checkContents(t, l, want, 39, 40)
	// Empty the log, then append after it: offsets continue.
	if err := l.TruncateHead(40); err != nil {
		t.Fatalf("TruncateHead(next): %v", err)
	}
	checkContents(t, l, want, 40, 40)
	if _, err := l.ReadRange(40, 1, 0); err != nil {
		t.Fatalf("ReadRange on an empty log: %v", err)
	}
	closeLog(t, l)

	l = openLog(t, dir, opts)
	checkContents(t, l, want, 40, 40)
	for i := 40; i < 45; i++ {
		want = append(want, testRecord(i))
	}
	if got := mustAppend(t, l, want[40:]...); got != 40 {
		t.Fatalf("append after emptying at %d, want 40", got)
	}
	checkContents(t, l, want, 40, 45)
	closeLog(t, l)

	l = openLog(t, dir, opts)
	defer closeLog(t, l)
	checkContents(t, l, want, 40, 45)
}

func TestTruncateTail(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Durability: DurabilityInterval, SegmentBytes: 600}
	l := openLog(t, dir, opts)
	var want []Record
	for i := range 40 {
		want = append(want, testRecord(i))
	}
	mustAppend(t, l, want[:20]...)
	mustAppend(t, l, want[20:]...)

	for _, from := range []uint64{40, 100, 33, 33, 12} {
		if err := l.TruncateTail(from); err != nil {
			t.Fatalf("TruncateTail(%d): %v", from, err)
		}
	}
	checkContents(t, l, want, 0, 12)
	// The next append reuses the dropped offsets, with new contents.
	for i := 12; i < 20; i++ {
		want[i] = testRecord(1000 + i)
	}
	if got := mustAppend(t, l, want[12:20]...); got != 12 {
		t.Fatalf("append after TruncateTail at %d, want 12", got)
	}
	checkContents(t, l, want, 0, 20)
	closeLog(t, l)

	l = openLog(t, dir, opts)
	checkContents(t, l, want, 0, 20)
	if err := l.TruncateHead(5); err != nil {
		t.Fatal(err)
	}
	if err := l.TruncateTail(4); !errors.Is(err, ErrNotFound) {
		t.Fatalf("TruncateTail below first: %v", err)
	}
	// Drop everything that is left: the log is empty at 5.
	if err := l.TruncateTail(5); err != nil {
		t.Fatalf("TruncateTail(first): %v", err)
	}
	checkContents(t, l, want, 5, 5)
	closeLog(t, l)

	l = openLog(t, dir, opts)
	checkContents(t, l, want, 5, 5)
	want[5] = testRecord(5555)
	if got := mustAppend(t, l, want[5]); got != 5 {
		t.Fatalf("append to emptied log at %d, want 5", got)
	}
	closeLog(t, l)

	l = openLog(t, dir, opts)
	defer closeLog(t, l)
	checkContents(t, l, want, 5, 6)
}

// TestRollBySize checks where files roll, through random batch sizes,
// truncations and reopens with other roll sizes: every file is named by the
// offset of its first record, holds exactly the records up to the next
// file's, and a file other than the last one reached SegmentBytes only with
// its last frame (a file rolls before a frame once it has reached
// SegmentBytes). The writer's idea of the tail matches the directory.
func TestRollBySize(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(1, 2))
	var want []Record
	// tailIn[first] is the last round in which the file was seen as the
	// tail; openTail is the tail when the round opened the log. A file
	// that became the tail in this round and rolled must have rolled by
	// this round's size.
	tailIn := map[uint64]int{}
	var openTail uint64
	check := func(l *Log, round, segBytes int) {
		t.Helper()
		files, err := listSegmentFiles(OSFS, dir)
		if err != nil {
			t.Fatal(err)
		}
		l.writeMu.Lock()
		tail := l.tail
		l.writeMu.Unlock()
		last := files[len(files)-1]
		if last.first != tail.first || fileSize(t, filepath.Join(dir, last.name)) != tail.size {
			t.Fatalf("round %d: tail followed as %d (%d bytes), directory has %s", round, tail.first, tail.size, last.name)
		}
		tailIn[last.first] = round
		for i, f := range files {
			if f.kind != plainFile {
				t.Fatalf("round %d: %s left behind", round, f.name)
			}
			data := readFile(t, filepath.Join(dir, f.name))
			index, _ := validPrefix(data, f.first)
			if index.end != int64(len(data)) {
				t.Fatalf("round %d: %s is not made of whole frames", round, f.name)
			}
			if i == len(files)-1 {
				if index.next != l.NextOffset() {
					t.Fatalf("round %d: last file ends at %d, NextOffset %d", round, index.next, l.NextOffset())
				}
				continue
			}
			if index.next != files[i+1].first {
				t.Fatalf("round %d: %s ends at offset %d, next file starts at %d", round, f.name, index.next, files[i+1].first)
			}
			if tailIn[f.first] != round || f.first == openTail {
				continue
			}
			lastFrame := index.frames[len(index.frames)-1].pos
			if index.end < int64(segBytes) || lastFrame >= int64(segBytes) {
				t.Fatalf("round %d: %s rolled at %d bytes (last frame at %d), roll size %d", round, f.name, index.end, lastFrame, segBytes)
			}
		}
	}
	for round, segBytes := range []int{700, 3000, 300} {
		l := openLog(t, dir, Options{Durability: DurabilityNone, SegmentBytes: segBytes})
		openTail = l.tail.first
		for range 60 {
			batch := make([]Record, 1+rng.IntN(12))
			for i := range batch {
				batch[i] = testRecord(len(want) + i)
			}
			mustAppend(t, l, batch...)
			want = append(want, batch...)
			check(l, round, segBytes)
		}
		if err := l.TruncateTail(l.NextOffset() - 3); err != nil {
			t.Fatal(err)
		}
		want = want[:l.NextOffset()]
		if err := l.TruncateHead(l.FirstOffset() + 10); err != nil {
			t.Fatal(err)
		}
		checkContents(t, l, want, l.FirstOffset(), l.NextOffset())
		closeLog(t, l)
	}
}

// TestRollExactBoundary fills files to exactly SegmentBytes, where the log
// rolls (">=", not ">"), in single appends and in batches.
func TestRollExactBoundary(t *testing.T) {
	rec := testRecord(4)
	entry := batchEntryLen([]Record{rec})
	for _, batch := range []int{1, 2, 3, 7} {
		dir := t.TempDir()
		l := openLog(t, dir, Options{Durability: DurabilityNone, SegmentBytes: 3 * entry})
		var want []Record
		for range 5 {
			recs := make([]Record, batch)
			for i := range recs {
				recs[i] = rec
			}
			mustAppend(t, l, recs...)
			want = append(want, recs...)
		}
		files, _ := listSegmentFiles(OSFS, dir)
		for _, f := range files[:len(files)-1] {
			size := fileSize(t, filepath.Join(dir, f.name))
			if batch == 1 && size != int64(3*entry) {
				t.Fatalf("batch 1: %s is %d bytes, want exactly %d", f.name, size, 3*entry)
			}
		}
		checkContents(t, l, want, 0, uint64(len(want)))
		closeLog(t, l)
	}
}

// TestLargeAppendIsCutIntoFrames appends more than maxBatchRecordBytes at
// once, and records larger than it: they are stored in several frames, and
// read back across them.
func TestLargeAppendIsCutIntoFrames(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Durability: DurabilityNone, SegmentBytes: 256 << 10}
	l := openLog(t, dir, opts)
	var want []Record
	for i := range 1500 {
		r := testRecord(i)
		r.Payload = bytes.Repeat(r.Payload, 6) // about 1 KiB
		want = append(want, r)
	}
	big := Record{Key: []byte("big"), Payload: bytes.Repeat([]byte("z"), 3*maxBatchRecordBytes)}
	want = append(want, big, testRecord(1500), big)
	mustAppend(t, l, want...)
	l.writeMu.Lock()
	frames := len(l.tail.frames)
	l.writeMu.Unlock()
	if files, _ := listSegmentFiles(OSFS, dir); len(files) < 3 || frames < 2 {
		t.Fatalf("one append of %d records: %d files, %d frames in the last", len(want), len(files), frames)
	}
	checkContents(t, l, want, 0, uint64(len(want)))
	closeLog(t, l)
	l = openLog(t, dir, opts)
	defer closeLog(t, l)
	checkContents(t, l, want, 0, uint64(len(want)))
}

func TestConcurrentAppendAndRead(t *testing.T) {
	for _, d := range []Durability{DurabilityAlways, DurabilityInterval, DurabilityNone} {
		t.Run(d.String(), func(t *testing.T) {
			l := openLog(t, t.TempDir(), Options{Durability: d, SyncInterval: time.Millisecond, SegmentBytes: 8 << 10})
			defer closeLog(t, l)
			batches := 60
			if d == DurabilityAlways {
				batches = 12 // an fsync each
			}
			testConcurrentAppendAndRead(t, l, batches)
		})
	}
}

// testConcurrentAppendAndRead appends from several goroutines while others
// tail the log with ReadRange, then checks offsets are dense and each holds
// what its Append wrote.
func testConcurrentAppendAndRead(t *testing.T, l *Log, batches int) {

	const writers, batchLen = 4, 5
	var wg sync.WaitGroup
	var mu sync.Mutex
	written := map[uint64]Record{} // offset -> what its Append wrote
	for w := range writers {
		wg.Go(func() {
			for b := range batches {
				batch := make([]Record, batchLen)
				for i := range batch {
					batch[i] = testRecord(w*100000 + b*batchLen + i)
				}
				first, err := l.Append(batch...)
				if err != nil {
					t.Errorf("Append: %v", err)
					return
				}
				mu.Lock()
				for i, r := range batch {
					written[first+uint64(i)] = r
				}
				mu.Unlock()
			}
		})
	}
	total := uint64(writers * batches * batchLen)
	writersDone := make(chan struct{})
	var readers sync.WaitGroup
	for range 3 {
		readers.Go(func() {
			for off := uint64(0); off < total; {
				recs, err := l.ReadRange(off, 16, 4096)
				if err != nil {
					t.Errorf("ReadRange(%d): %v", off, err)
					return
				}
				for _, r := range recs {
					if len(r.Key) == 0 {
						t.Errorf("offset %d: empty record", off)
					}
					off++
				}
				if len(recs) == 0 {
					select {
					case <-writersDone:
						if l.NextOffset() == off {
							return // the writers failed short of total
						}
					default:
						runtime.Gosched() // caught up: poll again
					}
				}
			}
		})
	}
	wg.Wait()
	close(writersDone)
	readers.Wait()

	if got := l.NextOffset(); got != total {
		t.Fatalf("NextOffset = %d, want %d", got, total)
	}
	// Offsets are dense and each holds what its Append wrote.
	for off := range total {
		want, ok := written[off]
		if !ok {
			t.Fatalf("no Append returned offset %d", off)
		}
		got, err := l.Read(off)
		if err != nil || !sameRecord(got, want) {
			t.Fatalf("Read(%d) = %s, %v; want %s", off, showRecord(got), err, showRecord(want))
		}
	}
}

// TestConcurrentReadsOfOlderFiles reads random offsets of many files from
// several goroutines: the cache of older files churns under them.
func TestConcurrentReadsOfOlderFiles(t *testing.T) {
	l := openLog(t, t.TempDir(), Options{Durability: DurabilityNone, SegmentBytes: 400})
	defer closeLog(t, l)
	var want []Record
	for i := range 300 {
		want = append(want, testRecord(i))
		if i%3 == 2 {
			mustAppend(t, l, want[i-2:]...)
		}
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 3))
			for range 400 {
				off := rng.Uint64N(uint64(len(want)))
				if g%2 == 0 {
					got, err := l.Read(off)
					if err != nil || !sameRecord(got, want[off]) {
						t.Errorf("Read(%d): %v", off, err)
						return
					}
					continue
				}
				recs, err := l.ReadRange(off, 3, 0)
				if err != nil || len(recs) == 0 || !sameRecord(recs[0], want[off]) {
					t.Errorf("ReadRange(%d): %d records, %v", off, len(recs), err)
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestOpenCreatesNestedDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tenant", "ns", "topic", "seg-1", "bucket-0")
	l := openLog(t, dir, Options{})
	mustAppend(t, l, testRecord(0))
	closeLog(t, l)
	l = openLog(t, dir, Options{})
	defer closeLog(t, l)
	checkContents(t, l, []Record{testRecord(0)}, 0, 1)
	if l.Dir() != dir {
		t.Fatalf("Dir() = %s, want %s", l.Dir(), dir)
	}
}

func TestOpenRemovesStaleTemps(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, Options{})
	mustAppend(t, l, testRecord(0))
	closeLog(t, l)
	stale := []string{segmentName(1) + startSuffix + tempSuffix, segmentName(1) + endSuffix + tempSuffix}
	for _, name := range stale {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("junk"), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	keep := filepath.Join(dir, "unrelated.TEMP")
	if err := os.WriteFile(keep, nil, 0o640); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, dir, Options{})
	defer closeLog(t, l)
	for _, name := range stale {
		if _, err := os.Stat(filepath.Join(dir, name)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s survived Open: %v", name, err)
		}
	}
	if _, err := os.Stat(keep); err != nil {
		t.Fatalf("Open removed a file it does not own: %v", err)
	}
	checkContents(t, l, []Record{testRecord(0)}, 0, 1)
}

func TestSizeBytes(t *testing.T) {
	l := openLog(t, t.TempDir(), Options{Durability: DurabilityNone, SegmentBytes: 1000})
	defer closeLog(t, l)
	if got := l.SizeBytes(); got != 0 {
		t.Fatalf("empty log SizeBytes = %d", got)
	}
	want := int64(0)
	for i := range 30 {
		batch := []Record{testRecord(i)}
		if i%4 == 0 {
			batch = append(batch, testRecord(i+100))
		}
		mustAppend(t, l, batch...)
		want += int64(batchEntryLen(batch))
	}
	if got := l.SizeBytes(); got != want {
		t.Fatalf("SizeBytes = %d, want %d", got, want)
	}
}
