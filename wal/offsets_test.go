package wal

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestOffsetsAcrossBatches appends batches of random sizes over small and
// large files, then reads every offset and every range against a reference,
// before and after a reopen.
func TestOffsetsAcrossBatches(t *testing.T) {
	for _, segBytes := range []int{300, 2000, 1 << 20} {
		t.Run(fmt.Sprint(segBytes), func(t *testing.T) {
			dir := t.TempDir()
			opts := Options{Durability: DurabilityNone, SegmentBytes: segBytes}
			l := openLog(t, dir, opts)
			rng := rand.New(rand.NewPCG(uint64(segBytes), 5))
			var want []Record
			for range 40 {
				batch := make([]Record, 1+rng.IntN(40))
				for i := range batch {
					batch[i] = testRecord(len(want) + i)
				}
				if got := mustAppend(t, l, batch...); got != uint64(len(want)) {
					t.Fatalf("Append at %d, want %d", got, len(want))
				}
				want = append(want, batch...)
			}
			checkRanges(t, l, want, rng)
			closeLog(t, l)
			l = openLog(t, dir, opts)
			defer closeLog(t, l)
			checkRanges(t, l, want, rng)
		})
	}
}

// checkRanges checks every offset of l against want with Read, and
// ReadRange from every offset with random limits.
func checkRanges(t *testing.T, l *Log, want []Record, rng *rand.Rand) {
	t.Helper()
	checkContents(t, l, want, l.FirstOffset(), l.NextOffset())
	next := l.NextOffset()
	for from := l.FirstOffset(); from < next; from++ {
		maxRecords, maxBytes := rng.IntN(60)-5, rng.IntN(3000)-500
		recs, err := l.ReadRange(from, maxRecords, maxBytes)
		if err != nil || len(recs) == 0 {
			t.Fatalf("ReadRange(%d, %d, %d) = %d records, %v", from, maxRecords, maxBytes, len(recs), err)
		}
		if maxRecords > 0 && len(recs) > maxRecords {
			t.Fatalf("ReadRange(%d, %d, %d) = %d records", from, maxRecords, maxBytes, len(recs))
		}
		total := 0
		for i, r := range recs {
			if !sameRecord(r, want[from+uint64(i)]) {
				t.Fatalf("ReadRange(%d, ...) record %d differs", from, i)
			}
			total += encodedLen(r)
		}
		more := from+uint64(len(recs)) < next && (maxRecords <= 0 || len(recs) < maxRecords)
		if maxBytes > 0 && len(recs) > 1 && total > maxBytes ||
			more && maxBytes > 0 && total+encodedLen(want[from+uint64(len(recs))]) <= maxBytes ||
			more && maxBytes <= 0 {
			t.Fatalf("ReadRange(%d, %d, %d) = %d records of %d bytes: limits not honoured", from, maxRecords, maxBytes, len(recs), total)
		}
	}
}

// TestRecordsOwnTheirMemory: changing what Read and ReadRange return,
// appending to it included, changes neither the log nor the other records.
func TestRecordsOwnTheirMemory(t *testing.T) {
	l := openLog(t, t.TempDir(), Options{Durability: DurabilityNone})
	defer closeLog(t, l)
	want := []Record{testRecord(0), testRecord(1), testRecord(2), testRecord(3)}
	mustAppend(t, l, want...)
	recs, err := l.ReadRange(0, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	one, err := l.Read(1)
	if err != nil {
		t.Fatal(err)
	}
	for i := range recs {
		_ = append(recs[i].Key, "XXXXXXXX"...)
		_ = append(recs[i].Payload, "XXXXXXXX"...)
		recs[i].Payload[0] = '!'
	}
	_ = append(one.Payload, "YYYY"...)
	one.Key[0] = '!'
	for i := range recs {
		recs[i].Payload[0] = want[i].Payload[0]
		if !sameRecord(recs[i], want[i]) {
			t.Fatalf("record %d changed by its neighbours: %s", i, showRecord(recs[i]))
		}
	}
	checkContents(t, l, want, 0, 4)
}

// TestTruncationsInsideBatches runs random appends, truncations at any
// offset (inside batches, at their edges, across files) and reopens against
// a reference.
func TestTruncationsInsideBatches(t *testing.T) {
	for _, d := range []Durability{DurabilityAlways, DurabilityNone} {
		t.Run(d.String(), func(t *testing.T) {
			dir := t.TempDir()
			opts := Options{Durability: d, SegmentBytes: 900}
			l := openLog(t, dir, opts)
			defer func() { l.Close() }()
			rng := rand.New(rand.NewPCG(9, uint64(d)))
			want := map[uint64]Record{} // the reference: offset -> record
			first, next := uint64(0), uint64(0)
			version := 0 // makes records rewritten after TruncateTail differ
			steps := 250
			if d == DurabilityAlways {
				steps = 80
			}
			for step := range steps {
				var op string
				switch r := rng.IntN(10); {
				case r < 5:
					batch := make([]Record, 1+rng.IntN(8))
					for i := range batch {
						batch[i] = testRecord(int(next) + i + 1000*version)
						want[next+uint64(i)] = batch[i]
					}
					op = fmt.Sprintf("Append(%d records)", len(batch))
					if got := mustAppend(t, l, batch...); got != next {
						t.Fatalf("step %d: Append at %d, want %d", step, got, next)
					}
					next += uint64(len(batch))
				case r < 7:
					before := first + rng.Uint64N(next-first+1)
					op = fmt.Sprintf("TruncateHead(%d)", before)
					if err := l.TruncateHead(before); err != nil {
						t.Fatalf("step %d: %s: %v", step, op, err)
					}
					first = max(first, before)
				case r < 9:
					from := first + rng.Uint64N(next-first+1)
					op = fmt.Sprintf("TruncateTail(%d)", from)
					if err := l.TruncateTail(from); err != nil {
						t.Fatalf("step %d: %s: %v", step, op, err)
					}
					next = min(next, from)
					version++
				default:
					op = "reopen"
					closeLog(t, l)
					l = openLog(t, dir, opts)
					if l.Repair() != (RepairReport{}) {
						t.Fatalf("step %d: a clean reopen repaired %+v", step, l.Repair())
					}
				}
				var ref []Record
				for off := range next {
					ref = append(ref, want[off])
				}
				checkContents(t, l, ref, first, next)
				checkFilesLayout(t, dir, first, next)
				if t.Failed() {
					t.Fatalf("step %d: %s", step, op)
				}
			}
		})
	}
}

// checkFilesLayout checks the files of a log at rest: no unfinished
// truncation, every file named by the offset of its first record and
// holding exactly the records up to the next file's, the first file
// starting at first and the last one ending at next.
func checkFilesLayout(t *testing.T, dir string, first, next uint64) {
	t.Helper()
	files, err := listSegmentFiles(OSFS, dir)
	if err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != len(files) {
		t.Fatalf("%d directory entries, %d of them log files", len(entries), len(files))
	}
	if len(files) == 0 || files[0].first != first {
		t.Fatalf("files %v do not start at first offset %d", files, first)
	}
	for i, f := range files {
		if f.kind != plainFile {
			t.Fatalf("%s left behind", f.name)
		}
		data := readFile(t, filepath.Join(dir, f.name))
		index, _ := validPrefix(data, f.first)
		// The tail of an open log may end with the zeros written ahead
		// of it (Options.Preallocate).
		if index.end != int64(len(data)) && !(i == len(files)-1 && allZero(data[index.end:])) {
			t.Fatalf("%s is not made of whole frames in sequence", f.name)
		}
		end := next
		if i+1 < len(files) {
			end = files[i+1].first
		}
		if index.next != end {
			t.Fatalf("%s ends at offset %d, want %d", f.name, index.next, end)
		}
	}
}

// TestTruncationCrashStates simulates a crash at every step of a
// truncation that cuts inside a batch: the replacement file in place, and
// any part of the removals done. Open must finish the truncation.
func TestTruncationCrashStates(t *testing.T) {
	build := func(t *testing.T) (string, []Record) {
		dir := t.TempDir()
		l := openLog(t, dir, Options{Durability: DurabilityNone, SegmentBytes: 700})
		var want []Record
		for len(want) < 60 {
			batch := []Record{testRecord(len(want)), testRecord(len(want) + 1), testRecord(len(want) + 2)}
			mustAppend(t, l, batch...)
			want = append(want, batch...)
		}
		closeLog(t, l)
		return dir, want
	}
	for _, tt := range []struct {
		name     string
		truncate func(l *Log) error
		first    uint64
		next     uint64
		suffix   string
	}{
		{"head", func(l *Log) error { return l.TruncateHead(31) }, 31, 60, startSuffix},
		{"tail", func(l *Log) error { return l.TruncateTail(22) }, 0, 22, endSuffix},
		{"head into the last file", func(l *Log) error { return l.TruncateHead(58) }, 58, 60, startSuffix},
		{"tail into the first file", func(l *Log) error { return l.TruncateTail(1) }, 0, 1, endSuffix},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before, want := build(t)
			after := copyDir(t, before)
			l := openLog(t, after, Options{Durability: DurabilityNone})
			if err := tt.truncate(l); err != nil {
				t.Fatal(err)
			}
			closeLog(t, l)
			oldFiles, _ := listSegmentFiles(OSFS, before)
			newFiles, _ := listSegmentFiles(OSFS, after)
			// The replacement: the file whose contents changed.
			var replacement segmentFile
			for _, f := range newFiles {
				old := filepath.Join(before, f.name)
				if data, err := os.ReadFile(old); err != nil || !bytes.Equal(data, readFile(t, filepath.Join(after, f.name))) {
					replacement = f
				}
			}
			if replacement.name == "" {
				t.Fatal("the truncation changed no file")
			}
			var gone []segmentFile // what the truncation removed, in the order it does
			for _, f := range oldFiles {
				if !slices.ContainsFunc(newFiles, func(n segmentFile) bool { return n.name == f.name && n != replacement }) &&
					f.name != replacement.name {
					gone = append(gone, f)
				}
			}
			for removed := 0; removed <= len(gone); removed++ {
				dir := copyDir(t, before)
				writeFile(t, filepath.Join(dir, replacement.name+tt.suffix), readFile(t, filepath.Join(after, replacement.name)))
				for _, f := range gone[:removed] {
					if err := os.Remove(filepath.Join(dir, f.name)); err != nil {
						t.Fatal(err)
					}
				}
				l := openLog(t, dir, Options{Durability: DurabilityNone})
				checkContents(t, l, want, tt.first, tt.next)
				closeLog(t, l)
				checkFilesLayout(t, dir, tt.first, tt.next)
				if t.Failed() {
					t.Fatalf("crash after %d of %d removals", removed, len(gone))
				}
			}
		})
	}
}

// TestConcurrentReadersDuringAppendsAndTruncations reads random offsets and
// tails the log while one writer appends batches over small files (rolls)
// and now and then truncates the tail, and another applies retention.
// Every record is testRecord(offset), so a read is right or ErrNotFound.
func TestConcurrentReadersDuringAppendsAndTruncations(t *testing.T) {
	for _, d := range []Durability{DurabilityAlways, DurabilityInterval, DurabilityNone} {
		t.Run(d.String(), func(t *testing.T) {
			l := openLog(t, t.TempDir(), Options{Durability: d, SegmentBytes: 1500, SyncInterval: time.Millisecond})
			defer closeLog(t, l)
			batches := 300
			if d == DurabilityAlways {
				batches = 60
			}
			done := make(chan struct{})
			var writers sync.WaitGroup
			writers.Go(func() {
				rng := rand.New(rand.NewPCG(1, 1))
				for range batches {
					next := l.NextOffset()
					batch := make([]Record, 1+rng.IntN(10))
					for i := range batch {
						batch[i] = testRecord(int(next) + i)
					}
					if _, err := l.Append(batch...); err != nil {
						t.Errorf("Append: %v", err)
						return
					}
					// Retention may have moved past the cut: ErrNotFound.
					if rng.IntN(10) == 0 {
						err := l.TruncateTail(l.NextOffset() - uint64(rng.IntN(len(batch)+1)))
						if err != nil && !errors.Is(err, ErrNotFound) {
							t.Errorf("TruncateTail: %v", err)
							return
						}
					}
				}
			})
			var readers sync.WaitGroup
			readers.Go(func() {
				for {
					select {
					case <-done:
						return
					default:
					}
					if first, next := l.FirstOffset(), l.NextOffset(); next-first > 80 {
						if err := l.TruncateHead(first + 7); err != nil {
							t.Errorf("TruncateHead: %v", err)
							return
						}
					}
				}
			})
			for g := range 3 {
				readers.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(g), 2))
					off := uint64(0)
					for {
						select {
						case <-done:
							return
						default:
						}
						first, next := l.FirstOffset(), l.NextOffset()
						if next == first {
							continue
						}
						if g == 0 {
							// Random reads.
							at := first + rng.Uint64N(next-first)
							got, err := l.Read(at)
							if err == nil && !sameRecord(got, testRecord(int(at))) {
								t.Errorf("Read(%d) = %s", at, showRecord(got))
								return
							}
							if err != nil && !errors.Is(err, ErrNotFound) {
								t.Errorf("Read(%d): %v", at, err)
								return
							}
							continue
						}
						// Tailing.
						off = max(off, first)
						if off > next {
							off = next
						}
						recs, err := l.ReadRange(off, 1+rng.IntN(30), rng.IntN(2000))
						if err != nil && !errors.Is(err, ErrNotFound) {
							t.Errorf("ReadRange(%d): %v", off, err)
							return
						}
						for i, r := range recs {
							if !sameRecord(r, testRecord(int(off)+i)) {
								t.Errorf("ReadRange(%d) record %d = %s", off, i, showRecord(r))
								return
							}
						}
						off += uint64(len(recs))
					}
				})
			}
			writers.Wait()
			close(done)
			readers.Wait()
		})
	}
}
