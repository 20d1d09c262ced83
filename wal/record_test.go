package wal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"reflect"
	"strings"
	"testing"
)

// sameRecord compares records the way the format does: nil and empty byte
// slices are the same.
func sameRecord(a, b Record) bool {
	if a.Timestamp != b.Timestamp || !bytes.Equal(a.Key, b.Key) ||
		!bytes.Equal(a.Payload, b.Payload) || len(a.Headers) != len(b.Headers) {
		return false
	}
	for i := range a.Headers {
		if a.Headers[i].Key != b.Headers[i].Key || !bytes.Equal(a.Headers[i].Value, b.Headers[i].Value) {
			return false
		}
	}
	return true
}

func showRecord(r Record) string {
	return fmt.Sprintf("{ts=%d key=%q headers=%d payload=%d bytes}", r.Timestamp, r.Key, len(r.Headers), len(r.Payload))
}

func manyHeaders(n int) []Header {
	hs := make([]Header, n)
	for i := range hs {
		hs[i] = Header{Key: fmt.Sprintf("h%d", i), Value: bytes.Repeat([]byte{byte(i)}, i%7)}
	}
	return hs
}

func TestRecordRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		rec  Record
	}{
		{"zero", Record{}},
		{"empty key nil payload", Record{Timestamp: 1700000000000, Key: []byte{}}},
		{"key only", Record{Key: []byte("order-17")}},
		{"payload only", Record{Payload: []byte("hello")}},
		{"negative timestamp", Record{Timestamp: -1, Payload: []byte("x")}},
		{"min timestamp", Record{Timestamp: math.MinInt64}},
		{"max timestamp", Record{Timestamp: math.MaxInt64}},
		{"empty header", Record{Headers: []Header{{}}}},
		{"header with empty value", Record{Headers: []Header{{Key: "k"}}, Payload: []byte("p")}},
		{"many headers", Record{Timestamp: 5, Key: []byte("k"), Headers: manyHeaders(300), Payload: []byte("p")}},
		{"duplicate header keys", Record{Headers: []Header{{"a", []byte("1")}, {"a", []byte("2")}}}},
		{"binary key", Record{Key: []byte{0, 0xff, 0x80, 1}, Payload: []byte{0}}},
		{"big payload", Record{Key: []byte("big"), Payload: bytes.Repeat([]byte("0123456789abcdef"), 1<<16)}},
		{"big header value", Record{Headers: []Header{{Key: strings.Repeat("k", 200), Value: make([]byte, 70000)}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			frame := EncodeRecord(nil, tt.rec)
			if got, want := len(frame), encodedLen(tt.rec); got != want {
				t.Fatalf("frame is %d bytes, encodedLen says %d", got, want)
			}
			if frame[0] != frameVersion {
				t.Fatalf("version byte %d", frame[0])
			}
			got, err := DecodeRecord(frame)
			if err != nil {
				t.Fatalf("DecodeRecord: %v", err)
			}
			if !sameRecord(got, tt.rec) {
				t.Fatalf("round trip: got %s, want %s", showRecord(got), showRecord(tt.rec))
			}
			// Empty fields decode as nil.
			if len(got.Key) == 0 && got.Key != nil || len(got.Payload) == 0 && got.Payload != nil ||
				len(got.Headers) == 0 && got.Headers != nil {
				t.Fatalf("empty field decoded as non-nil: %+v", got)
			}
			// Appending to a non-empty dst leaves the prefix alone.
			prefix := []byte("prefix")
			both := EncodeRecord(append([]byte(nil), prefix...), tt.rec)
			if !bytes.Equal(both[:len(prefix)], prefix) || !bytes.Equal(both[len(prefix):], frame) {
				t.Fatal("EncodeRecord with a non-empty dst differs")
			}
		})
	}
}

func TestDecodeRecordErrors(t *testing.T) {
	good := EncodeRecord(nil, Record{Timestamp: 42, Key: []byte("key"),
		Headers: []Header{{"h", []byte("v")}}, Payload: []byte("payload")})
	flipped := bytes.Clone(good)
	flipped[len(flipped)-1] ^= 0x01
	badCRC := bytes.Clone(good)
	badCRC[2] ^= 0x80
	future := bytes.Clone(good)
	future[0] = 2

	// withBody frames a hand-made body with a correct CRC, to reach the
	// length checks behind the CRC.
	withBody := func(body ...byte) []byte {
		frame := append([]byte{frameVersion, 0, 0, 0, 0}, body...)
		fixCRC(frame)
		return frame
	}
	tests := []struct {
		name  string
		frame []byte
		want  error
	}{
		{"nil", nil, ErrCorrupt},
		{"empty", []byte{}, ErrCorrupt},
		{"zero byte", []byte{0}, ErrUnsupportedVersion},
		{"version only", []byte{frameVersion}, ErrCorrupt},
		{"short crc", []byte{frameVersion, 1, 2, 3}, ErrCorrupt},
		{"payload bit flip", flipped, ErrCorrupt},
		{"crc bit flip", badCRC, ErrCorrupt},
		{"future version", future, ErrUnsupportedVersion},
		{"no body", withBody(), ErrCorrupt},
		{"timestamp overflow", withBody(0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01), ErrCorrupt},
		{"no key length", withBody(0x02), ErrCorrupt},
		{"key longer than body", withBody(0x02, 0x05, 'a', 'b'), ErrCorrupt},
		{"huge key length", withBody(0x02, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01), ErrCorrupt},
		{"no header count", withBody(0x02, 0x00), ErrCorrupt},
		{"header count beyond body", withBody(0x02, 0x00, 0x03, 0x00, 0x00), ErrCorrupt},
		{"huge header count", withBody(0x02, 0x00, 0xff, 0xff, 0xff, 0xff, 0x0f), ErrCorrupt},
		{"header value beyond body", withBody(0x02, 0x00, 0x01, 0x01, 'k', 0x09, 'v'), ErrCorrupt},
		{"header key beyond body", withBody(0x02, 0x00, 0x01, 0x07, 'k', 0x00), ErrCorrupt},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeRecord(tt.frame)
			if !errors.Is(err, tt.want) {
				t.Fatalf("DecodeRecord: got %v, want %v", err, tt.want)
			}
			if tt.want == ErrUnsupportedVersion && errors.Is(err, ErrCorrupt) {
				t.Fatalf("an unknown version is not corruption: %v", err)
			}
		})
	}
}

// fixCRC recomputes the CRC of a frame whose body was edited.
func fixCRC(frame []byte) {
	binary.LittleEndian.PutUint32(frame[1:frameHeaderLen], crc32.Checksum(frame[frameHeaderLen:], castagnoli))
}

func TestDecodeRecordEveryPrefix(t *testing.T) {
	frame := EncodeRecord(nil, Record{Timestamp: 99, Key: []byte("k"), Headers: manyHeaders(3), Payload: []byte("pp")})
	for n := 0; n < len(frame); n++ {
		if _, err := DecodeRecord(frame[:n]); err == nil {
			t.Fatalf("prefix of %d of %d bytes decoded", n, len(frame))
		}
	}
	// With the CRC fixed up, every prefix still never panics; those cut
	// inside the key or headers fail their length checks.
	for n := frameHeaderLen; n < len(frame); n++ {
		cut := bytes.Clone(frame[:n])
		fixCRC(cut)
		if _, err := DecodeRecord(cut); err != nil && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("prefix %d: %v", n, err)
		}
	}
}

func TestDurabilityText(t *testing.T) {
	for _, d := range []Durability{DurabilityAlways, DurabilityInterval, DurabilityNone} {
		got, err := ParseDurability(d.String())
		if err != nil || got != d {
			t.Fatalf("ParseDurability(%q) = %v, %v", d.String(), got, err)
		}
		text, err := d.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var back Durability
		if err := back.UnmarshalText(text); err != nil || back != d {
			t.Fatalf("UnmarshalText(%q) = %v, %v", text, back, err)
		}
	}
	if Durability(0) != DurabilityAlways {
		t.Fatal("the zero Durability must be DurabilityAlways")
	}
	for _, s := range []string{"", "Always", "sometimes", "none "} {
		if _, err := ParseDurability(s); err == nil {
			t.Fatalf("ParseDurability(%q) succeeded", s)
		}
	}
	if _, err := Durability(9).MarshalText(); err == nil {
		t.Fatal("MarshalText of an invalid durability succeeded")
	}
	if _, err := Open(t.TempDir(), Options{Durability: 9}); err == nil {
		t.Fatal("Open with an invalid durability succeeded")
	}
}

// A range read decodes the headers of its records into one shared array:
// each record's headers stay its own (appending to one never reaches the
// next), and equal header names read equal.
func TestReadRangeHeadersStayApart(t *testing.T) {
	l, err := Open(t.TempDir(), Options{Durability: DurabilityNone})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var recs []Record
	for i := range 40 {
		recs = append(recs, Record{Payload: []byte{byte(i)}, Headers: []Header{
			{Key: "trace", Value: []byte{byte(i)}}, {Key: fmt.Sprint("h", i%3), Value: []byte("v")}}})
	}
	recs = append(recs, Record{Payload: []byte("no headers")})
	if _, err := l.Append(recs...); err != nil {
		t.Fatal(err)
	}
	got, err := l.ReadRange(0, 100, 0)
	if err != nil || len(got) != len(recs) {
		t.Fatalf("read %d records, %v", len(got), err)
	}
	got[0].Headers = append(got[0].Headers, Header{Key: "added", Value: []byte("x")})
	for i, r := range got {
		want := recs[i].Headers
		if i == 0 {
			want = append(want, Header{Key: "added", Value: []byte("x")})
		}
		if !reflect.DeepEqual(r.Headers, want) {
			t.Fatalf("record %d headers %+v, want %+v", i, r.Headers, want)
		}
	}
}
