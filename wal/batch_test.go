package wal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"slices"
	"testing"
)

// batchFrame returns the frame (no size prefix) of recs at offsets from
// first.
func batchFrame(first uint64, recs ...Record) []byte {
	entry := appendRecordsEntry(nil, first, recs)
	_, n := binary.Uvarint(entry)
	return entry[n:]
}

func TestParseBatch(t *testing.T) {
	recs := []Record{testRecord(1), {}, {Key: []byte("k"), Headers: manyHeaders(3), Payload: []byte("p")}}
	frame := batchFrame(1<<40, recs...)
	b, err := parseBatch(frame)
	if err != nil {
		t.Fatal(err)
	}
	if b.first != 1<<40 || b.count() != len(recs) || b.last() != 1<<40+uint64(len(recs)) {
		t.Fatalf("batch [%d, %d) of %d", b.first, b.last(), b.count())
	}
	for i, want := range recs {
		got, err := decodeBody(b.body(b.first + uint64(i)))
		if err != nil || !sameRecord(got, want) {
			t.Fatalf("record %d: %s, %v; want %s", i, showRecord(got), err, showRecord(want))
		}
	}
	// A body is capped: appending to it cannot reach the next record.
	body := b.body(b.first)
	if cap(body) != len(body) {
		t.Fatalf("body of %d bytes has capacity %d", len(body), cap(body))
	}
}

func TestParseBatchErrors(t *testing.T) {
	good := batchFrame(7, testRecord(1), testRecord(2))
	flipped := bytes.Clone(good)
	flipped[len(flipped)-1] ^= 0x01
	perRecord := EncodeRecord(nil, testRecord(1))
	future := bytes.Clone(good)
	future[0] = 4
	fixCRC(future)

	// withBody makes a frame of a hand-made header and records, with a
	// correct CRC, to reach the checks behind the CRC.
	withBody := func(count uint32, records ...byte) []byte {
		frame := []byte{batchVersion, 0, 0, 0, 0}
		frame = binary.LittleEndian.AppendUint64(frame, 7)
		frame = binary.LittleEndian.AppendUint32(frame, count)
		frame = append(frame, records...)
		fixCRC(frame)
		return frame
	}
	tests := []struct {
		name  string
		frame []byte
		want  error
	}{
		{"nil", nil, ErrCorrupt},
		{"zero byte", []byte{0}, ErrUnsupportedVersion},
		{"version only", []byte{batchVersion}, ErrCorrupt},
		{"short header", good[:batchHeaderLen-1], ErrCorrupt},
		{"record bit flip", flipped, ErrCorrupt},
		{"per-record frame", perRecord, ErrUnsupportedVersion},
		{"future version", future, ErrUnsupportedVersion},
		{"no records", withBody(0), ErrCorrupt},
		{"count beyond body", withBody(2, 3, 2, 0, 0), ErrCorrupt},
		{"huge count", withBody(1<<31, 3, 2, 0, 0), ErrCorrupt},
		{"record longer than frame", withBody(1, 9, 2, 0, 0), ErrCorrupt},
		{"torn record size", withBody(1, 0x80, 0x80, 0x80, 0x80), ErrCorrupt},
		{"bytes after the last record", withBody(1, 3, 2, 0, 0, 9), ErrCorrupt},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseBatch(tt.frame)
			if !errors.Is(err, tt.want) {
				t.Fatalf("parseBatch: got %v, want %v", err, tt.want)
			}
			if tt.want == ErrUnsupportedVersion && errors.Is(err, ErrCorrupt) {
				t.Fatalf("an unknown version is not corruption: %v", err)
			}
		})
	}
	if _, err := parseBatch(withBody(1, 3, 2, 0, 0)); err != nil {
		t.Fatalf("the hand-made frame itself is fine: %v", err)
	}
}

func TestParseBatchEveryPrefix(t *testing.T) {
	frame := batchFrame(3, testRecord(1), testRecord(2), testRecord(3))
	for n := 0; n < len(frame); n++ {
		if _, err := parseBatch(frame[:n]); err == nil {
			t.Fatalf("prefix of %d of %d bytes parsed", n, len(frame))
		}
		// With the CRC fixed up, every prefix still fails: the sizes of its
		// records do not add up.
		if n >= frameHeaderLen {
			cut := bytes.Clone(frame[:n])
			fixCRC(cut)
			if _, err := parseBatch(cut); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("prefix %d with a good CRC: %v", n, err)
			}
		}
	}
}

func TestFrameIndexFind(t *testing.T) {
	x := frameIndex{
		frames: []frameRef{{first: 10, pos: 0}, {first: 13, pos: 100}, {first: 14, pos: 150}},
		end:    400,
		next:   20,
	}
	tests := []struct {
		off       uint64
		ok        bool
		pos, end  int64
		count     uint64
		wantFirst uint64
	}{
		{9, false, 0, 0, 0, 0},
		{10, true, 0, 100, 3, 10},
		{12, true, 0, 100, 3, 10},
		{13, true, 100, 150, 1, 13},
		{14, true, 150, 400, 6, 14},
		{19, true, 150, 400, 6, 14},
		{20, false, 0, 0, 0, 0},
	}
	for _, tt := range tests {
		ref, end, count, ok := x.find(tt.off)
		if ok != tt.ok || ok && (ref.pos != tt.pos || end != tt.end || count != tt.count || ref.first != tt.wantFirst) {
			t.Errorf("find(%d) = %+v, %d, %d, %v", tt.off, ref, end, count, ok)
		}
	}
	if _, _, _, ok := (&frameIndex{next: 5}).find(5); ok {
		t.Error("an empty index found an offset")
	}
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r     io.ReaderAt
	bytes int64
}

func (c *countingReader) ReadAt(p []byte, off int64) (int, error) {
	n, err := c.r.ReadAt(p, off)
	c.bytes += int64(n)
	return n, err
}

// TestScanFrameIndex indexes a file of large and small frames as repair
// does, reading little more than the headers of the large ones (a small
// frame costs a window read of what follows it), and stops
// where the file is torn, out of sequence or runs past its limit.
func TestScanFrameIndex(t *testing.T) {
	var file []byte
	off := uint64(100)
	for i := range 60 {
		recs := []Record{testRecord(i)}
		if i < 30 || i%10 == 0 {
			recs[0].Payload = bytes.Repeat([]byte{'x'}, 60<<10) // a frame of its own
		} else {
			recs = append(recs, testRecord(i+1), testRecord(i+2))
		}
		file = appendRecordsEntry(file, off, recs)
		off += uint64(len(recs))
	}
	want, _ := validPrefix(file, 100)
	if want.end != int64(len(file)) || want.next != off {
		t.Fatalf("repair keeps %d of %d bytes", want.end, len(file))
	}
	r := &countingReader{r: bytes.NewReader(file)}
	got := scanFrameIndex(r, int64(len(file)), 100, math.MaxUint64)
	if got.stopped != nil || got.end != want.end || got.next != want.next || !slices.Equal(got.frames, want.frames) {
		t.Fatalf("index %+v (stopped: %v), repair %+v", got.frames, got.stopped, want.frames)
	}
	if r.bytes > int64(len(file))/4 {
		t.Fatalf("indexing read %d bytes of a %d-byte file", r.bytes, len(file))
	}

	last := want.frames[len(want.frames)-1]
	for _, tt := range []struct {
		name  string
		data  []byte
		limit uint64
		next  uint64 // where the index must stop
	}{
		{"torn", file[:len(file)-1], math.MaxUint64, last.first},
		{"torn header", file[:last.pos+5], math.MaxUint64, last.first},
		{"garbage after", append(bytes.Clone(file), 0x7f, 1, 2), math.MaxUint64, off},
	} {
		got := scanFrameIndex(bytes.NewReader(tt.data), int64(len(tt.data)), 100, tt.limit)
		if got.next != tt.next || !errors.Is(got.stopped, ErrCorrupt) || len(got.holes) != 0 {
			t.Errorf("%s: index ends at %d (stopped: %v, holes %+v), want %d", tt.name, got.next, got.stopped, got.holes, tt.next)
		}
	}
	// In an older file (a limit), what the frames do not reach is a hole.
	got = scanFrameIndex(bytes.NewReader(file), int64(len(file)), 100, last.first+1)
	if got.stopped != nil || got.next != last.first+1 || len(got.holes) != 1 ||
		got.holes[0] != (Hole{From: last.first, To: last.first + 1, Pos: last.pos, Bytes: int64(len(file)) - last.pos, Reason: got.holes[0].Reason}) {
		t.Errorf("past limit: index ends at %d (stopped: %v), holes %+v", got.next, got.stopped, got.holes)
	}
	got = scanFrameIndex(bytes.NewReader(file), int64(len(file)), 100, off+5)
	if got.stopped != nil || got.next != off+5 || len(got.holes) != 1 || got.holes[0].From != off || got.holes[0].Bytes != 0 {
		t.Errorf("short file: index ends at %d (stopped: %v), holes %+v", got.next, got.stopped, got.holes)
	}
	// Frames that skip offsets, with nothing between: a hole of no bytes.
	got = scanFrameIndex(bytes.NewReader(file), int64(len(file)), 99, math.MaxUint64)
	if got.stopped != nil || got.next != off || len(got.holes) != 1 || got.holes[0].From != 99 || got.holes[0].To != 100 || got.holes[0].Bytes != 0 {
		t.Errorf("skipped offsets: index ends at %d (stopped: %v), holes %+v", got.next, got.stopped, got.holes)
	}
}
