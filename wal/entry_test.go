package wal_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/braidmq/braid/wal"
)

func TestEntriesRoundTrip(t *testing.T) {
	dir := t.TempDir()
	opts := wal.Options{Durability: wal.DurabilityAlways, SegmentBytes: 4096}
	l, err := wal.Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	// A log written before it was replicated: version 2 frames first.
	if _, err := l.Append(crashRecord(0), crashRecord(1)); err != nil {
		t.Fatal(err)
	}
	var want []wal.Record
	want = append(want, crashRecord(0), crashRecord(1))
	var wantRefs []wal.EntryRef
	for i := range 12 {
		id := wal.EntryID{Term: uint64(1 + i/5), Index: uint64(i + 1)}
		recs := []wal.Record{crashRecord(10 + 3*i), crashRecord(11 + 3*i), crashRecord(12 + 3*i)}
		var first uint64
		if i%2 == 0 {
			first, err = l.AppendEntry(id, recs...)
		} else {
			first, err = l.AppendEntryData(id, wal.EncodeEntryData(nil, recs))
		}
		if err != nil {
			t.Fatal(err)
		}
		wantRefs = append(wantRefs, wal.EntryRef{EntryID: id, First: first, Count: 3})
		want = append(want, recs...)
	}
	// One entry larger than a frame of an Append (64 KiB of records) stays
	// one frame.
	big := []wal.Record{{Payload: bytes.Repeat([]byte("x"), 50<<10)}, {Payload: bytes.Repeat([]byte("y"), 50<<10)}}
	first, err := l.AppendEntry(wal.EntryID{Term: 3, Index: 13}, big...)
	if err != nil {
		t.Fatal(err)
	}
	wantRefs = append(wantRefs, wal.EntryRef{EntryID: wal.EntryID{Term: 3, Index: 13}, First: first, Count: 2})
	want = append(want, big...)

	check := func(l *wal.Log) {
		t.Helper()
		refs, err := l.Entries(0)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(refs, wantRefs) {
			t.Fatalf("entries %+v\nwant %+v", refs, wantRefs)
		}
		if refs, _ := l.Entries(wantRefs[5].First + 1); !slices.Equal(refs, wantRefs[6:]) {
			t.Fatalf("entries from inside the 6th: %+v", refs)
		}
		got, err := l.ReadRange(0, 1000, 1<<30)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Fatalf("read %d records, want %d", len(got), len(want))
		}
		for i := range got {
			if !equalRecords(got[i], want[i]) {
				t.Fatalf("record %d differs", i)
			}
		}
	}
	check(l)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if l, err = wal.Open(dir, opts); err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	check(l)
}

func TestEntryRefusesBadInput(t *testing.T) {
	l, err := wal.Open(t.TempDir(), wal.Options{Durability: wal.DurabilityAlways})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	good := wal.EncodeEntryData(nil, []wal.Record{crashRecord(1)})
	for name, f := range map[string]func() error{
		"term 0":     func() error { _, err := l.AppendEntry(wal.EntryID{Index: 1}, crashRecord(1)); return err },
		"index 0":    func() error { _, err := l.AppendEntry(wal.EntryID{Term: 1}, crashRecord(1)); return err },
		"no record":  func() error { _, err := l.AppendEntry(wal.EntryID{Term: 1, Index: 1}); return err },
		"empty data": func() error { _, err := l.AppendEntryData(wal.EntryID{Term: 1, Index: 1}, nil); return err },
		"torn data": func() error {
			_, err := l.AppendEntryData(wal.EntryID{Term: 1, Index: 1}, good[:len(good)-1])
			return err
		},
		"size past data": func() error { _, err := l.AppendEntryData(wal.EntryID{Term: 1, Index: 1}, []byte{0x7f, 1}); return err },
		"bad body": func() error {
			_, err := l.WriteEntryData(wal.EntryID{Term: 1, Index: 1}, []byte{2, 0x80, 0x80})
			return err
		},
	} {
		if f() == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if l.NextOffset() != 0 {
		t.Fatalf("refused entries wrote %d records", l.NextOffset())
	}
	if recs, err := wal.DecodeEntryData(good); err != nil || len(recs) != 1 || !equalRecords(recs[0], crashRecord(1)) {
		t.Fatalf("decode: %v %v", recs, err)
	}
	if _, err := wal.DecodeEntryData([]byte{5, 1}); !errors.Is(err, wal.ErrCorrupt) {
		t.Fatalf("decode of torn data: %v", err)
	}
}

// A damaged entry in the middle of a file is a hole; the entries on both
// sides are still listed and read.
func TestEntryDamageIsAHole(t *testing.T) {
	dir := t.TempDir()
	opts := wal.Options{Durability: wal.DurabilityAlways, Preallocate: -1}
	l, err := wal.Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, err := l.AppendEntry(wal.EntryID{Term: 1, Index: uint64(i + 1)}, crashRecord(3*i+1), crashRecord(3*i+2)); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "00000000000000000000")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// Flip a byte of the third entry's records.
	at := bytes.Index(data, crashRecord(7).Payload[:4])
	if at < 0 {
		t.Fatal("record 7 not found in the file")
	}
	data[at+2] ^= 0xff
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	var holes []wal.Hole
	opts.OnHole = func(h wal.Hole) { holes = append(holes, h) }
	if l, err = wal.Open(dir, opts); err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if len(holes) != 1 || holes[0].From != 4 || holes[0].To != 6 {
		t.Fatalf("holes %+v, want one of [4, 6)", holes)
	}
	refs, err := l.Entries(0)
	if err != nil {
		t.Fatal(err)
	}
	var idx []uint64
	for _, e := range refs {
		idx = append(idx, e.Index)
	}
	if !slices.Equal(idx, []uint64{1, 2, 4, 5}) {
		t.Fatalf("entries %v, want 1, 2, 4, 5", idx)
	}
	if r, err := l.Read(6); err != nil || !equalRecords(r, crashRecord(10)) {
		t.Fatalf("read after the hole: %v", err)
	}
}

// A read limit hides the records past it from readers, not from
// replication.
func TestReadLimit(t *testing.T) {
	l, err := wal.Open(t.TempDir(), wal.Options{Durability: wal.DurabilityAlways})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for i := range 3 {
		if _, err := l.AppendEntry(wal.EntryID{Term: 1, Index: uint64(i + 1)}, crashRecord(2*i), crashRecord(2*i+1)); err != nil {
			t.Fatal(err)
		}
	}
	if l.NextOffset() != 6 {
		t.Fatalf("next %d before a limit", l.NextOffset())
	}
	l.SetReadLimit(2)
	if l.NextOffset() != 2 || l.DurableOffset() != 6 {
		t.Fatalf("next %d, durable %d; want 2, 6", l.NextOffset(), l.DurableOffset())
	}
	if recs, err := l.ReadRange(0, 100, 0); err != nil || len(recs) != 2 {
		t.Fatalf("read under the limit: %d records, %v", len(recs), err)
	}
	if recs, err := l.ReadRange(2, 100, 0); err != nil || len(recs) != 0 {
		t.Fatalf("read at the limit: %d records, %v", len(recs), err)
	}
	if _, err := l.Read(3); !errors.Is(err, wal.ErrNotFound) {
		t.Fatalf("read past the limit: %v", err)
	}
	if recs, err := l.ReadRangeDurable(2, 100, 0); err != nil || len(recs) != 4 {
		t.Fatalf("durable read past the limit: %d records, %v", len(recs), err)
	}
	l.SetReadLimit(1) // never shrinks
	if l.NextOffset() != 2 {
		t.Fatalf("the limit shrank to %d", l.NextOffset())
	}
	l.SetReadLimit(10)
	if l.NextOffset() != 6 {
		t.Fatalf("next %d under a limit past the end", l.NextOffset())
	}
}
