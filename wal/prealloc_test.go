package wal

import (
	"os"
	"path/filepath"
	"testing"
)

// fileSizes returns the sizes of a log directory's segment files, by
// first offset.
func fileSizes(t *testing.T, dir string) map[uint64]int64 {
	t.Helper()
	files, err := listSegmentFiles(OSFS, dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[uint64]int64{}
	for _, f := range files {
		info, err := os.Stat(filepath.Join(dir, f.name))
		if err != nil {
			t.Fatal(err)
		}
		out[f.first] = info.Size()
	}
	return out
}

// TestPreallocationAheadOfTheTail: under DurabilityAlways the tail file
// is filled with zeros ahead of its end, in steps from 64 KiB up to
// Options.Preallocate as the log writes more; SizeBytes leaves them out; a
// roll cuts them off the file it leaves and Close off the tail, so a clean
// reopen repairs nothing.
func TestPreallocationAheadOfTheTail(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, Options{SegmentBytes: 2 << 20})
	var want []Record
	data := int64(0)
	for i := range 3000 {
		r := Record{Key: []byte("k"), Payload: make([]byte, 1000)}
		r.Payload[0] = byte(i)
		want = append(want, r)
		data += int64(batchEntryLen([]Record{r}))
		mustAppend(t, l, r)
		if i == 0 {
			if got := fileSizes(t, dir)[0]; got != data+minPreallocate {
				t.Fatalf("after the first append the file is %d bytes, want %d + %d of zeros", got, data, minPreallocate)
			}
		}
	}
	if got := l.SizeBytes(); got != data {
		t.Fatalf("SizeBytes = %d, want %d (the records, not the zeros)", got, data)
	}
	sizes := fileSizes(t, dir)
	if len(sizes) < 2 {
		t.Fatalf("no roll: %v", sizes)
	}
	var onDisk int64
	for first, size := range sizes {
		if first == l.tail.first {
			if ahead := size - l.tail.size; ahead <= 0 || ahead > DefaultPreallocate {
				t.Fatalf("tail file %d bytes for %d of records: %d ahead, want 1 to %d", size, l.tail.size, ahead, DefaultPreallocate)
			}
			continue
		}
		onDisk += size
	}
	if onDisk+l.tail.size != data {
		t.Fatalf("closed files hold %d bytes and the tail %d, want %d in all: a roll left zeros", onDisk, l.tail.size, data)
	}
	closeLog(t, l)
	total := int64(0)
	for _, size := range fileSizes(t, dir) {
		total += size
	}
	if total != data {
		t.Fatalf("after Close the files hold %d bytes, want %d", total, data)
	}
	l = openLog(t, dir, Options{SegmentBytes: 2 << 20})
	defer closeLog(t, l)
	if l.Repair() != (RepairReport{}) {
		t.Fatalf("a clean reopen repaired %+v", l.Repair())
	}
	checkContents(t, l, want, 0, uint64(len(want)))
}

// TestCrashLeavesOnlyZeros copies a log's directory while it is open (as
// a crash leaves it, zeros ahead of the tail): the copy opens with every
// committed record, the zeros cut and reported as ZeroBytes, nothing as
// dropped.
func TestCrashLeavesOnlyZeros(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, Options{})
	defer closeLog(t, l)
	var want []Record
	for i := range 50 {
		want = append(want, testRecord(i))
		mustAppend(t, l, want[i])
	}
	crashed := copyDir(t, dir)
	c := openLog(t, crashed, Options{})
	defer closeLog(t, c)
	r := c.Repair()
	if r.ZeroBytes <= 0 || r.DroppedBytes != 0 || r.DroppedRecords != 0 {
		t.Fatalf("repair after a crash %+v, want only zeros cut", r)
	}
	checkContents(t, c, want, 0, uint64(len(want)))
}

// TestNoPreallocationWhenOff: Preallocate < 0, and DurabilityNone, write
// no zeros.
func TestNoPreallocationWhenOff(t *testing.T) {
	for _, opts := range []Options{{Preallocate: -1}, {Durability: DurabilityNone}} {
		dir := t.TempDir()
		l := openLog(t, dir, opts)
		mustAppend(t, l, testRecord(0))
		if got, want := fileSizes(t, dir)[0], int64(batchEntryLen([]Record{testRecord(0)})); got != want {
			t.Fatalf("%+v: file of %d bytes for %d of records", opts, got, want)
		}
		closeLog(t, l)
	}
}

// TestNoPreallocationForLargeWrites: a write of more than
// maxPreallocatedWrite gets no zeros after it (they would double what it
// puts through the page cache for little gain).
func TestNoPreallocationForLargeWrites(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, Options{})
	defer closeLog(t, l)
	var batch []Record
	size := 0
	for size <= maxPreallocatedWrite {
		r := Record{Key: []byte("k"), Payload: make([]byte, 4000)}
		batch = append(batch, r)
		size += 4000
	}
	mustAppend(t, l, batch...)
	if got, want := fileSizes(t, dir)[0], l.tail.size; got != want {
		t.Fatalf("file of %d bytes after a %d-byte write: zeros written after it", got, want)
	}
	mustAppend(t, l, testRecord(0))
	if got := fileSizes(t, dir)[0]; got <= l.tail.size {
		t.Fatalf("a small write after it got no zeros (file %d bytes, data %d)", got, l.tail.size)
	}
	if got := l.SizeBytes(); got != l.tail.size {
		t.Fatalf("SizeBytes %d, want %d", got, l.tail.size)
	}
}

// TestSizeBytesWhilePreallocating: SizeBytes read while the log writes
// zeros ahead of its tail never counts them: it is never more than the
// records written once the appends are done. (It counted them while they
// were being written, before the log recorded them, and a topic with
// compaction_threshold_bytes was compacted under its threshold.)
func TestSizeBytesWhilePreallocating(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, Options{SegmentBytes: 64 << 20})
	done := make(chan struct{})
	most := make(chan int64)
	go func() {
		var m int64
		for {
			select {
			case <-done:
				most <- m
				return
			default:
				m = max(m, l.SizeBytes())
			}
		}
	}()
	for i := range 2000 {
		r := Record{Key: []byte("k"), Payload: make([]byte, 1000)}
		r.Payload[0] = byte(i)
		mustAppend(t, l, r)
	}
	close(done)
	seen := <-most
	if final := l.SizeBytes(); seen > final {
		t.Fatalf("SizeBytes read %d while appending, more than the %d bytes of the records in the end (the zeros ahead of the tail counted)", seen, final)
	}
}
