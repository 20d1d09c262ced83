package wal

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// bigFirstFile makes a log whose first file is closed and holds n records
// of size bytes, the record at offset i stamped 1000+i, then a second file.
func bigFirstFile(t *testing.T, dir string, n, size int) *Log {
	t.Helper()
	l, err := Open(dir, Options{Durability: DurabilityNone, SegmentBytes: Unlimited})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if _, err := l.Append(Record{Timestamp: 1000 + int64(i), Key: []byte("k"), Payload: make([]byte, size)}); err != nil {
			t.Fatal(err)
		}
	}
	if rolled, err := l.Roll(); err != nil || !rolled {
		t.Fatalf("roll: %v %v", rolled, err)
	}
	appendN(t, l, 3, 1_000_000, 10)
	return l
}

// allocated returns the bytes the file system holds for path.
func allocated(t *testing.T, path string) (size, blocks int64, ino uint64) {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	sys := st.Sys().(*syscall.Stat_t)
	return st.Size(), sys.Blocks * 512, sys.Ino
}

func headRecords(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if strings.Contains(e.Name(), headSuffix) {
			out = append(out, e.Name())
		}
	}
	return out
}

// TestTrimHeadFreesTheHeadInPlace: TrimHead moves the first offset to a
// frame inside the closed first file, frees the bytes before it (same
// file, same inode, fewer blocks), reads below it are not found, reads from
// it on are whole, and all of it holds across a reopen.
func TestTrimHeadFreesTheHeadInPlace(t *testing.T) {
	dir := t.TempDir()
	l := bigFirstFile(t, dir, 400, 1000)
	path := filepath.Join(dir, segmentName(0))
	size0, blocks0, ino0 := allocated(t, path)

	freed, err := l.TrimHead(250, 0)
	if err != nil {
		t.Fatal(err)
	}
	first := l.FirstOffset()
	if first == 0 || first > 250 || freed <= 0 {
		t.Fatalf("after a trim to 250: first offset %d, %d bytes freed", first, freed)
	}
	size1, blocks1, ino1 := allocated(t, path)
	if ino1 != ino0 || size1 != size0 {
		t.Fatalf("the file was replaced: inode %d -> %d, size %d -> %d", ino0, ino1, size0, size1)
	}
	if blocks1 > blocks0-freed+2*punchBlock {
		t.Fatalf("blocks not freed: %d -> %d bytes allocated, %d trimmed", blocks0, blocks1, freed)
	}
	check := func(l *Log) {
		t.Helper()
		if _, err := l.Read(first - 1); !errors.Is(err, ErrNotFound) {
			t.Fatalf("read below the trimmed head: %v", err)
		}
		recs, err := l.ReadRange(first, 1000, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) != int(403-first) || recs[0].Timestamp != 1000+int64(first) {
			t.Fatalf("read from the head: %d records, first stamped %d", len(recs), recs[0].Timestamp)
		}
		if files, err := l.ClosedFiles(); err != nil || len(files) != 1 || files[0].First != first || files[0].Bytes != size0-freed {
			t.Fatalf("closed files after the trim: %+v %v (file %d bytes, %d freed)", files, err, size0, freed)
		}
	}
	check(l)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l, err = Open(dir, Options{Durability: DurabilityNone})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if l.FirstOffset() != first || len(l.Holes()) != 0 {
		t.Fatalf("reopened: first offset %d (want %d), holes %v", l.FirstOffset(), first, l.Holes())
	}
	check(l)

	// A second trim moves on from the first; minBytes holds back a small one.
	if n, err := l.TrimHead(first+1, 1<<20); err != nil || n != 0 || l.FirstOffset() != first {
		t.Fatalf("a trim under minBytes: %d %v, first offset %d", n, err, l.FirstOffset())
	}
	if _, err := l.TrimHead(390, 0); err != nil || l.FirstOffset() <= first {
		t.Fatalf("a second trim: %v, first offset %d", err, l.FirstOffset())
	}
	if got := headRecords(t, dir); len(got) != 1 {
		t.Fatalf("head records: %v", got)
	}
	// Dropping the whole file drops its head record.
	if err := l.DropFilesBefore(400); err != nil {
		t.Fatal(err)
	}
	if got := headRecords(t, dir); len(got) != 0 || l.FirstOffset() != 400 {
		t.Fatalf("after the file's removal: head records %v, first offset %d", got, l.FirstOffset())
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the trimmed file is still there: %v", err)
	}
}

// TestTrimHeadRefusals: the open file, and an offset past the first file,
// are not trimmed; an offset at or below the first offset does nothing.
func TestTrimHeadRefusals(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir, Options{Durability: DurabilityNone})
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, l, 10, 1, 10)
	if _, err := l.TrimHead(5, 0); !errors.Is(err, ErrNotFound) {
		t.Fatalf("trim of the open file: %v", err)
	}
	l.Close()
	l = bigFirstFile(t, t.TempDir(), 50, 100)
	defer l.Close()
	if _, err := l.TrimHead(50, 0); !errors.Is(err, ErrNotFound) {
		t.Fatalf("trim past the first file: %v", err)
	}
	if n, err := l.TrimHead(0, 0); err != nil || n != 0 {
		t.Fatalf("trim to the first offset: %d %v", n, err)
	}
}

// TestTruncationsOfATrimmedFile: truncating the head inside a trimmed file
// and the tail into it (which makes it the open file again) rewrite it
// from its trimmed start; reads and a reopen agree, no head record stays.
func TestTruncationsOfATrimmedFile(t *testing.T) {
	for _, tc := range []struct {
		name string
		cut  func(l *Log) error
		from uint64 // first offset after
		next uint64 // next offset after
	}{
		{"head", func(l *Log) error { return l.TruncateHead(300) }, 300, 403},
		{"tail", func(l *Log) error { return l.TruncateTail(300) }, 0, 300},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			l := bigFirstFile(t, dir, 400, 100)
			if _, err := l.TrimHead(200, 0); err != nil {
				t.Fatal(err)
			}
			trimmed := l.FirstOffset()
			if err := tc.cut(l); err != nil {
				t.Fatal(err)
			}
			from := max(tc.from, trimmed)
			verify := func(l *Log) {
				t.Helper()
				if l.FirstOffset() != from || l.NextOffset() != tc.next {
					t.Fatalf("offsets [%d, %d), want [%d, %d)", l.FirstOffset(), l.NextOffset(), from, tc.next)
				}
				recs, err := l.ReadRange(from, 1000, 0)
				if err != nil || len(recs) != int(tc.next-from) || recs[0].Timestamp != 1000+int64(from) {
					t.Fatalf("read: %d records, %v", len(recs), err)
				}
				if got := headRecords(t, dir); len(got) != 0 {
					t.Fatalf("head records left: %v", got)
				}
			}
			verify(l)
			if tc.name == "tail" {
				appendN(t, l, 2, 5, 10)
				tc.next += 2
			}
			l.Close()
			l, err := Open(dir, Options{Durability: DurabilityNone})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			verify(l)
			if len(l.Holes()) != 0 {
				t.Fatalf("holes after the reopen: %v", l.Holes())
			}
		})
	}
}

// TestHeadRecordsAfterACrash: a head record of a file that is gone, or no
// longer first, and the temporary file of one, are removed at Open; a
// damaged record of the first file is removed and its punched bytes read
// as a hole of the trimmed offsets, reported as damage.
func TestHeadRecordsAfterACrash(t *testing.T) {
	dir := t.TempDir()
	l := bigFirstFile(t, dir, 400, 100)
	if _, err := l.TrimHead(200, 0); err != nil {
		t.Fatal(err)
	}
	first := l.FirstOffset()
	l.Close()
	stale := filepath.Join(dir, segmentName(999)+headSuffix)
	temp := filepath.Join(dir, segmentName(0)+headSuffix+tempSuffix)
	for _, p := range []string{stale, temp} {
		if err := os.WriteFile(p, fileHead{first: 1, pos: 1}.encode(), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	l, err := Open(dir, Options{Durability: DurabilityNone})
	if err != nil {
		t.Fatal(err)
	}
	if l.FirstOffset() != first {
		t.Fatalf("first offset %d, want %d", l.FirstOffset(), first)
	}
	if got := headRecords(t, dir); len(got) != 1 || got[0] != segmentName(0)+headSuffix {
		t.Fatalf("head records after Open: %v", got)
	}
	l.Close()

	// Damage the record: the file reads from byte 0 again.
	rec := filepath.Join(dir, segmentName(0)+headSuffix)
	if err := os.WriteFile(rec, []byte("garbage"), 0o640); err != nil {
		t.Fatal(err)
	}
	var reported []Hole
	l, err = Open(dir, Options{Durability: DurabilityNone, OnHole: func(h Hole) { reported = append(reported, h) }})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if l.FirstOffset() != 0 {
		t.Fatalf("first offset %d with the record damaged", l.FirstOffset())
	}
	if _, err := l.Read(first); err != nil {
		t.Fatal(err)
	}
	var hole *HoleError
	if _, err := l.Read(0); !errors.As(err, &hole) || hole.From != 0 || hole.To > first || len(reported) == 0 {
		t.Fatalf("a trimmed offset with the record damaged: %v (reported %v)", err, reported)
	}
}

// TestExpiredBeforeAndHeadOffsetPast: the offsets a caller trims to, by
// time and by bytes.
func TestExpiredBeforeAndHeadOffsetPast(t *testing.T) {
	l := bigFirstFile(t, t.TempDir(), 400, 100)
	defer l.Close()
	for _, c := range []struct {
		cutoff int64
		want   uint64
	}{{500, 0}, {1000, 0}, {1123, 123}, {1399, 399}, {5000, 400}} {
		if got, err := l.ExpiredBefore(c.cutoff); err != nil || got != c.want {
			t.Fatalf("ExpiredBefore(%d) = %d, %v; want %d", c.cutoff, got, err, c.want)
		}
	}
	off, err := l.HeadOffsetPast(10_000)
	if err != nil || off == 0 || off >= 400 {
		t.Fatalf("HeadOffsetPast(10000) = %d, %v", off, err)
	}
	freed, err := l.TrimHead(off, 0)
	if err != nil || freed < 10_000 || l.FirstOffset() != off {
		t.Fatalf("trim to %d: %d bytes, %v, first %d", off, freed, err, l.FirstOffset())
	}
	if off, err := l.HeadOffsetPast(1 << 40); err != nil || off != 400 {
		t.Fatalf("HeadOffsetPast past the file = %d, %v", off, err)
	}
	if got, err := l.ExpiredBefore(1000 + int64(off) - 5); err != nil || got != l.FirstOffset() {
		t.Fatalf("ExpiredBefore below the trimmed head = %d, %v", got, err)
	}
}

// TestClosedFileCopiedOutReadsBack: a closed file copied out (after its
// head was trimmed) reads back through a FileReader as the log reads it.
func TestClosedFileCopiedOutReadsBack(t *testing.T) {
	l := bigFirstFile(t, t.TempDir(), 300, 100)
	defer l.Close()
	if _, err := l.TrimHead(100, 0); err != nil {
		t.Fatal(err)
	}
	first := l.FirstOffset()
	if _, _, err := l.OpenClosedFile(first + 1); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a file that does not start there: %v", err)
	}
	r, closeFile, err := l.OpenClosedFile(first)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, r.Size())
	if _, err := r.ReadAt(data, 0); err != nil {
		t.Fatal(err)
	}
	closeFile()
	fr, err := NewFileReader(bytes.NewReader(data), int64(len(data)), first, 300)
	if err != nil {
		t.Fatal(err)
	}
	for from := first; from < 300; {
		got, err := fr.ReadRange(from, 17, 0)
		want, werr := l.ReadRange(from, int(min(17, 300-from)), 0)
		if err != nil || werr != nil || len(got) != len(want) || len(got) == 0 {
			t.Fatalf("from %d: %d records, %v; the log: %d, %v", from, len(got), err, len(want), werr)
		}
		for i := range got {
			if got[i].Timestamp != want[i].Timestamp || !bytes.Equal(got[i].Payload, want[i].Payload) {
				t.Fatalf("offset %d differs", from+uint64(i))
			}
		}
		from += uint64(len(got))
	}
	if recs, err := fr.ReadRange(300, 1, 0); err != nil || len(recs) != 0 {
		t.Fatalf("at next: %v %v", recs, err)
	}
	if recs, err := fr.ReadRange(first, 0, 500); err != nil || len(recs) != 4 {
		t.Fatalf("by bytes: %d records, %v", len(recs), err)
	}
	// A copy cut short is refused.
	if _, err := NewFileReader(bytes.NewReader(data[:len(data)-10]), int64(len(data)-10), first, 300); err == nil {
		t.Fatal("a cut copy was taken")
	}
}
