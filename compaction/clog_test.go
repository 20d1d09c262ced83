package compaction

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/braidmq/braid/wal"
)

// TestCompactedLogKeepsOffsets: a compacted log reads its records back at
// their original offsets, from any offset (the next kept one at or after
// it), with their headers as they were; a reopen reads the same.
func TestCompactedLogKeepsOffsets(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "gen-1")
	w, err := CreateLog(dir)
	if err != nil {
		t.Fatal(err)
	}
	var offs []uint64
	for i := 0; i < 1000; i++ {
		off := uint64(i*7 + 3)
		offs = append(offs, off)
		r := wal.Record{Timestamp: int64(i), Key: []byte(fmt.Sprint("k", i)), Payload: []byte(fmt.Sprint(off))}
		if i%3 == 0 {
			r.Headers = []wal.Header{{Key: "h", Value: []byte("v")}}
		}
		if err := w.Append(off, r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Append(5, wal.Record{}); err == nil {
		t.Fatal("an offset below the last was taken")
	}
	if err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	r, err := OpenLog(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.Len() != 1000 {
		t.Fatalf("len %d", r.Len())
	}
	for _, from := range []uint64{0, 3, 4, 10, 3500, 6996, 6997} {
		got, end, err := r.ReadFrom(from, 5, 0)
		if err != nil {
			t.Fatal(err)
		}
		want := 0
		for want < len(offs) && offs[want] < from {
			want++
		}
		if wantEnd := want+5 >= len(offs); end != wantEnd {
			t.Fatalf("from %d: end %v, want %v", from, end, wantEnd)
		}
		if want == len(offs) {
			if len(got) != 0 {
				t.Fatalf("from %d past the end: %d records", from, len(got))
			}
			continue
		}
		if len(got) == 0 || got[0].Offset != offs[want] || string(got[0].Record.Payload) != fmt.Sprint(offs[want]) {
			t.Fatalf("from %d: %+v, want offset %d first", from, got, offs[want])
		}
		if i := want; (i%3 == 0) != (len(got[0].Record.Headers) == 1) {
			t.Fatalf("from %d: headers %v", from, got[0].Record.Headers)
		}
	}
	// Going on from where a read ended.
	var all []uint64
	for from := uint64(0); ; {
		got, end, err := r.ReadFrom(from, 64, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 {
			if !end {
				t.Fatalf("from %d: nothing and not at the end", from)
			}
			break
		}
		for _, k := range got {
			all = append(all, k.Offset)
		}
		from = got[len(got)-1].Offset + 1
	}
	if fmt.Sprint(all) != fmt.Sprint(offs) {
		t.Fatalf("read back %d offsets, wrote %d", len(all), len(offs))
	}
	if _, err := CreateLog(dir); err == nil {
		t.Fatal("a second log was started over the first")
	}
}

func TestGenerationDirNames(t *testing.T) {
	t.Parallel()
	dir := GenerationDir("/data/t/n/x/inc/seg-1/b-0", 12)
	if dir != "/data/t/n/x/inc/seg-1/b-0/compacted-12" {
		t.Fatalf("GenerationDir: %s", dir)
	}
	for _, c := range []struct {
		name string
		gen  uint64
		ok   bool
	}{{dir, 12, true}, {"compacted-0", 0, true}, {"compacted-", 0, false}, {"compacted-x", 0, false}, {"00000000000000000000.log", 0, false}} {
		if gen, ok := GenerationOf(c.name); gen != c.gen || ok != c.ok {
			t.Errorf("GenerationOf(%q) = %d, %v; want %d, %v", c.name, gen, ok, c.gen, c.ok)
		}
	}
}
