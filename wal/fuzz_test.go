package wal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"testing"
)

// FuzzDecodeRecord checks that DecodeRecord never panics on any input, and
// that whatever it accepts re-encodes to an equal record. With fixCRC the
// fuzzer's bytes get a valid version and CRC, so that it explores the body
// parser rather than the checksum.
func FuzzDecodeRecord(f *testing.F) {
	seeds := []Record{
		{},
		{Timestamp: 1700000000000, Key: []byte("k"), Payload: []byte("payload")},
		{Timestamp: -5, Headers: []Header{{"a", []byte("1")}, {"", nil}}},
		{Key: bytes.Repeat([]byte("x"), 300), Headers: manyHeaders(5), Payload: make([]byte, 1000)},
	}
	for _, r := range seeds {
		frame := EncodeRecord(nil, r)
		f.Add(frame, false)
		f.Add(frame[:len(frame)/2], false)
		f.Add(frame[:len(frame)/2], true)
	}
	f.Add([]byte{}, false)
	f.Add([]byte{0}, false)
	f.Add([]byte{frameVersion, 0, 0, 0, 0}, false)
	f.Add([]byte{2, 0, 0, 0, 0, 0}, false)
	f.Add([]byte{0, 0, 0, 0, 0, 0x02, 0x00, 0x02, 0x01, 'k', 0x01, 'v'}, true)

	f.Fuzz(func(t *testing.T, frame []byte, withCRC bool) {
		if withCRC && len(frame) >= frameHeaderLen {
			frame[0] = frameVersion
			fixCRC(frame)
		}
		rec, err := DecodeRecord(frame)
		if err != nil {
			return
		}
		again, err := DecodeRecord(EncodeRecord(nil, rec))
		if err != nil {
			t.Fatalf("re-encoded record does not decode: %v", err)
		}
		if !sameRecord(rec, again) {
			t.Fatalf("round trip changed the record: %s -> %s", showRecord(rec), showRecord(again))
		}
	})
}

// FuzzParseBatch checks that parseBatch never panics on any input, and that
// whatever it accepts re-encodes to a frame with the same first offset and
// record bodies. With fixCRC the fuzzer's bytes get a valid version and
// CRC, so that it explores the header and record sizes rather than the
// checksum.
func FuzzParseBatch(f *testing.F) {
	for _, recs := range [][]Record{
		{testRecord(1)},
		{testRecord(1), testRecord(2), {}},
		{{Headers: manyHeaders(4), Payload: make([]byte, 300)}, {Key: []byte("k")}},
	} {
		entry := appendRecordsEntry(nil, 42, recs)
		_, n := binary.Uvarint(entry)
		frame := entry[n:]
		f.Add(frame, false)
		f.Add(frame[:len(frame)/2], true)
		f.Add(frame[:batchHeaderLen], true)
	}
	f.Add([]byte{}, false)
	f.Add([]byte{batchVersion}, false)
	f.Add([]byte{frameVersion, 0, 0, 0, 0, 0}, false)
	f.Add(append([]byte{batchVersion, 0, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0}, 3, 0, 0, 0), true)

	f.Fuzz(func(t *testing.T, frame []byte, withCRC bool) {
		if withCRC && len(frame) >= frameHeaderLen {
			frame[0] = batchVersion
			fixCRC(frame)
		}
		b, err := parseBatch(frame)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrUnsupportedVersion) {
				t.Fatalf("error %v wraps neither ErrCorrupt nor ErrUnsupportedVersion", err)
			}
			return
		}
		var bodies [][]byte
		for off := b.first; off < b.last(); off++ {
			bodies = append(bodies, b.body(off))
		}
		again, err := entryBatch(appendBatchEntry(nil, b.meta, b.first, bodies))
		if err != nil {
			t.Fatalf("re-encoded frame does not parse: %v", err)
		}
		if again.first != b.first || again.count() != b.count() {
			t.Fatalf("round trip changed the frame: [%d, %d) -> [%d, %d)", b.first, b.last(), again.first, again.last())
		}
		for off := b.first; off < b.last(); off++ {
			if !bytes.Equal(again.body(off), b.body(off)) {
				t.Fatalf("round trip changed record %d", off)
			}
		}
	})
}

// FuzzScanFile feeds arbitrary file contents to the readers of whole files:
// validPrefix and countDropped (repair) and scanFrameIndex (the index of an
// older file). None may panic; every frame repair keeps parses and decodes;
// both tile their offsets with frames and holes; and the index, which
// checks headers only, reaches at least as far as repair keeps.
func FuzzScanFile(f *testing.F) {
	var file []byte
	for i := range 4 {
		file = appendRecordsEntry(file, uint64(10+2*i), []Record{testRecord(i), testRecord(i + 1)})
	}
	f.Add(file, false)
	f.Add(file[:len(file)-3], false)
	f.Add(append(bytes.Clone(file), 0, 0, 0), false)
	f.Add(file[:40], true)
	f.Add([]byte{0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, batchVersion, 1, 2, 3}, false)

	f.Fuzz(func(t *testing.T, data []byte, fixFirst bool) {
		if fixFirst && len(data) > 2 {
			// Give the first entry a valid CRC, so that the scan gets past it.
			if size, n := binary.Uvarint(data); n > 0 && size >= frameHeaderLen && size <= uint64(len(data)-n) {
				fixCRC(data[n : n+int(size)])
			}
		}
		valid, _ := validPrefix(data, 10)
		for i, ref := range valid.frames {
			_, end, _, _ := valid.find(ref.first)
			b, err := entryBatch(data[ref.pos:end])
			if err != nil || b.first != ref.first || b.decodeBodies() != nil {
				t.Fatalf("repair kept frame %d, which does not check out: %v", i, err)
			}
		}
		// Repair counts what it drops; that must not panic either.
		if dropped := countDropped(data[valid.end:]); dropped < 0 {
			t.Fatalf("countDropped = %d", dropped)
		}
		index := scanFrameIndex(bytes.NewReader(data), int64(len(data)), 10, math.MaxUint64)
		// Both tile their offsets with frames and holes, and the index,
		// which checks headers only, reaches at least as far.
		if index.stopped == nil && index.end < valid.end {
			t.Fatalf("index covers %d bytes, repair keeps %d", index.end, valid.end)
		}
		for _, x := range []*frameIndex{&valid, &index} {
			for off := uint64(10); off < x.next && off < 10+1<<16; off++ {
				_, _, _, inFrame := x.find(off)
				if inFrame == (x.holeAt(off) != nil) {
					t.Fatalf("offset %d below next %d: in a frame %v, in a hole %v (holes %+v)", off, x.next, inFrame, !inFrame, x.holes)
				}
			}
		}
	})
}
