package wal

import (
	"bytes"
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
