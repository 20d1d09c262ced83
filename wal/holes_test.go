package wal

import (
	"bytes"
	"errors"
	"path/filepath"
	"slices"
	"sync"
	"testing"
)

// holeRecorder collects what a Log reports through Options.OnHole.
type holeRecorder struct {
	mu    sync.Mutex
	holes []Hole
}

func (r *holeRecorder) record(h Hole) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.holes = append(r.holes, h)
}

func (r *holeRecorder) got() []Hole {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.holes)
}

// checkWithHole asserts that l holds want at [first, next), except for the
// offsets of hole, which every read reports as that hole, and that reads
// that run into the hole stop before it.
func checkWithHole(t testing.TB, l *Log, want []Record, first, next uint64, hole Hole) {
	t.Helper()
	if l.FirstOffset() != first || l.NextOffset() != next {
		t.Fatalf("offsets [%d, %d), want [%d, %d)", l.FirstOffset(), l.NextOffset(), first, next)
	}
	for off := first; off < next; off++ {
		got, err := l.Read(off)
		if hole.From <= off && off < hole.To {
			var he *HoleError
			if !errors.As(err, &he) || !errors.Is(err, ErrHole) || he.From != hole.From || he.To != hole.To {
				t.Fatalf("Read(%d) in the hole [%d, %d): %v", off, hole.From, hole.To, err)
			}
			continue
		}
		if err != nil || !sameRecord(got, want[off]) {
			t.Fatalf("Read(%d) outside the hole: %v", off, err)
		}
	}
	// A reader goes up to the hole, is told of it, and goes on after it.
	var read []uint64
	for off := first; off < next; {
		recs, err := l.ReadRange(off, 5, 0)
		var he *HoleError
		switch {
		case errors.As(err, &he):
			if len(recs) != 0 || off != hole.From || he.To != hole.To {
				t.Fatalf("ReadRange(%d) = %d records, %v; the hole is [%d, %d)", off, len(recs), err, hole.From, hole.To)
			}
			off = he.To
		case err != nil || len(recs) == 0:
			t.Fatalf("ReadRange(%d) = %d records, %v", off, len(recs), err)
		default:
			for i := range recs {
				if !sameRecord(recs[i], want[off]) {
					t.Fatalf("ReadRange record %d differs", off)
				}
				read = append(read, off)
				off++
			}
		}
	}
	lost := 0
	if lo, hi := max(hole.From, first), min(hole.To, next); lo < hi {
		lost = int(hi - lo)
	}
	if wantRead := int(next-first) - lost; len(read) != wantRead {
		t.Fatalf("a reader read %d records, want %d", len(read), wantRead)
	}
}

// TestHoleInLastFile damages a frame of the last file that whole frames
// follow: Open keeps them, reads the damaged frame's offsets as a hole,
// reports it once, and appends go on after the last frame.
func TestHoleInLastFile(t *testing.T) {
	b := buildLog(t, 40)
	last := readFile(t, filepath.Join(b.dir, b.lastFile))
	for victim, batch := range b.lastBatches[:len(b.lastBatches)-1] {
		// A flip in the CRC, in the first offset, in the size prefix and
		// in the last record.
		for _, at := range []int{batch.start + 3, batch.start + 7, batch.start, batch.end - 1} {
			data := bytes.Clone(last)
			data[at] ^= 0x10
			dir := b.withLastFile(t, data)
			path := filepath.Join(dir, b.lastFile)
			var reported holeRecorder
			opts := Options{Durability: DurabilityNone, SegmentBytes: repairSegmentBytes, OnHole: reported.record}
			l := openLog(t, dir, opts)
			want := Hole{From: batch.first, To: batch.first + uint64(batch.count), File: path, Pos: int64(batch.start), Bytes: int64(batch.end - batch.start)}
			if r := l.Repair(); r != (RepairReport{File: path, Holes: 1}) {
				t.Fatalf("flip at byte %d (frame %d): Repair() = %+v", at, victim, r)
			}
			holes := l.Holes()
			if len(holes) != 1 || holes[0].Reason == "" {
				t.Fatalf("flip at byte %d (frame %d): Holes() = %+v", at, victim, holes)
			}
			want.Reason = holes[0].Reason
			if holes[0] != want || !slices.Equal(reported.got(), holes) {
				t.Fatalf("flip at byte %d (frame %d): Holes() = %+v, reported %+v, want %+v", at, victim, holes, reported.got(), want)
			}
			recs := append(slices.Clone(b.recs), testRecord(9999))
			next := uint64(len(b.recs))
			checkWithHole(t, l, recs, 0, next, want)
			if off := mustAppend(t, l, recs[next]); off != next {
				t.Fatalf("append after the hole at %d, want %d", off, next)
			}
			closeLog(t, l)

			// The damage stays in the file: the next Open finds it again.
			reported = holeRecorder{}
			l = openLog(t, dir, opts)
			checkWithHole(t, l, recs, 0, next+1, want)
			if got := reported.got(); len(got) != 1 || got[0] != want {
				t.Fatalf("reopen reported %+v", got)
			}
			closeLog(t, l)
		}
	}
}

// TestHoleMidFile is the damage of a large open file: one flipped byte near
// its start, one in its middle. Only the two frames hit are lost.
func TestHoleMidFile(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, Options{Durability: DurabilityNone})
	var recs []Record
	for i := range 2000 {
		recs = append(recs, testRecord(i))
	}
	for i := 0; i < len(recs); i += 10 {
		mustAppend(t, l, recs[i:i+10]...)
	}
	closeLog(t, l)
	path := filepath.Join(dir, segmentName(0))
	data := readFile(t, path)
	for _, at := range []int{20, len(data) / 2} {
		data[at] ^= 0x04
	}
	writeFile(t, path, data)

	var reported holeRecorder
	l = openLog(t, dir, Options{Durability: DurabilityNone, OnHole: reported.record})
	defer closeLog(t, l)
	holes := l.Holes()
	if len(holes) != 2 || holes[0].From != 0 || holes[0].To != 10 || holes[1].To-holes[1].From != 10 || len(reported.got()) != 2 {
		t.Fatalf("Holes() = %+v, reported %+v", holes, reported.got())
	}
	if l.NextOffset() != 2000 {
		t.Fatalf("NextOffset = %d, want 2000", l.NextOffset())
	}
	kept := 0
	for off := range uint64(2000) {
		rec, err := l.Read(off)
		switch {
		case err == nil && sameRecord(rec, recs[off]):
			kept++
		case errors.Is(err, ErrHole):
		default:
			t.Fatalf("Read(%d): %v", off, err)
		}
	}
	if kept != 1980 {
		t.Fatalf("%d records kept, want 1980", kept)
	}
}

// TestHoleFoundOnRead damages a record of an older file, where the frame
// headers hold: the first read finds it, reports it once, and later reads
// of it, after the file left the cache too, report the same hole.
func TestHoleFoundOnRead(t *testing.T) {
	b := buildLog(t, 40)
	files, err := listSegmentFiles(OSFS, b.dir)
	if err != nil || len(files) < 4 {
		t.Fatalf("want 4 files or more: %v", err)
	}
	first := filepath.Join(b.dir, files[0].name)
	entries := splitEntries(t, readFile(t, first))
	batch0 := uint64(entryRecords(t, entries[0]))
	batch1 := batch0 + uint64(entryRecords(t, entries[1]))
	data := readFile(t, first)
	data[len(entries[0])+len(entries[1])-1] ^= 0x01 // the last byte of the second frame
	writeFile(t, first, data)

	var reported holeRecorder
	l := openLog(t, b.dir, Options{Durability: DurabilityNone, SegmentBytes: repairSegmentBytes, OnHole: reported.record})
	defer closeLog(t, l)
	if len(l.Holes()) != 0 {
		t.Fatalf("Open found a hole in a file it did not read: %+v", l.Holes())
	}
	hole := Hole{From: batch0, To: batch1}
	for range 3 {
		checkWithHole(t, l, b.recs, 0, uint64(len(b.recs)), hole)
	}
	got := reported.got()
	if len(got) != 1 || got[0].From != batch0 || got[0].To != batch1 || got[0].File != first || got[0].Pos != int64(len(entries[0])) {
		t.Fatalf("reported %+v, want one hole [%d, %d) in %s", got, batch0, batch1, first)
	}
}

// TestHoleAndTruncation: a truncation keeps what it does not cut of a
// hole, and the hole survives it and a reopen; a cut inside a hole leaves
// the file to start after it.
func TestHoleAndTruncation(t *testing.T) {
	b := buildLog(t, 40)
	last := readFile(t, filepath.Join(b.dir, b.lastFile))
	i := slices.IndexFunc(b.lastBatches[:len(b.lastBatches)-1], func(b builtBatch) bool { return b.count > 1 })
	if i < 0 {
		t.Fatal("no frame of several records before the last one in the last file")
	}
	batch := b.lastBatches[i]
	data := bytes.Clone(last)
	data[batch.end-1] ^= 0x10
	hole := Hole{From: batch.first, To: batch.first + uint64(batch.count)}
	next := uint64(len(b.recs))
	opts := Options{Durability: DurabilityNone, SegmentBytes: repairSegmentBytes}

	t.Run("tail cut after the hole", func(t *testing.T) {
		l := openLog(t, b.withLastFile(t, data), opts)
		if err := l.TruncateTail(next - 1); err != nil {
			t.Fatal(err)
		}
		checkWithHole(t, l, b.recs, 0, next-1, hole)
		dir := l.Dir()
		closeLog(t, l)
		l = openLog(t, dir, opts)
		defer closeLog(t, l)
		checkWithHole(t, l, b.recs, 0, next-1, hole)
	})
	t.Run("tail cut inside the hole", func(t *testing.T) {
		l := openLog(t, b.withLastFile(t, data), opts)
		defer closeLog(t, l)
		if err := l.TruncateTail(hole.From + 1); !errors.Is(err, ErrHole) {
			t.Fatalf("TruncateTail into the hole: %v, want ErrHole", err)
		}
		mustAppend(t, l, testRecord(9999)) // the log still works
	})
	for _, before := range []uint64{hole.From - 1, hole.From, hole.From + 1, hole.To} {
		l := openLog(t, b.withLastFile(t, data), opts)
		if err := l.TruncateHead(before); err != nil {
			t.Fatalf("TruncateHead(%d): %v", before, err)
		}
		kept := Hole{From: max(hole.From, before), To: hole.To}
		if before >= hole.To {
			kept = Hole{}
		}
		check := func(l *Log) {
			t.Helper()
			checkWithHole(t, l, b.recs, before, next, kept)
			if holes := l.Holes(); kept.To == 0 && len(holes) != 0 || kept.To != 0 && (len(holes) != 1 || holes[0].From != kept.From || holes[0].To != kept.To) {
				t.Fatalf("TruncateHead(%d): Holes() = %+v, want [%d, %d)", before, holes, kept.From, kept.To)
			}
		}
		check(l)
		dir := l.Dir()
		closeLog(t, l)
		l = openLog(t, dir, opts)
		check(l)
		closeLog(t, l)
	}
}
