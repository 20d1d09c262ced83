package client

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"hash/crc32"
	"reflect"
	"testing"
)

func sampleCheckpoints() []Checkpoint {
	return []Checkpoint{
		{Topic: "topic://a/b/c"},
		{Topic: "topic://a/b/c", Epoch: 9, Drained: []uint64{0, 1, 2, 5, 9},
			Positions: []UnitPosition{{Segment: 3, Bucket: 0, Offset: 7}, {Segment: 3, Bucket: 1, Offset: 1 << 40}, {Segment: 8, Offset: 2}}},
		{Topic: "t", Epoch: 1, Drained: []uint64{4}},
	}
}

func TestCheckpointRoundTrips(t *testing.T) {
	for _, cp := range sampleCheckpoints() {
		b, err := cp.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		var back Checkpoint
		if err := back.UnmarshalBinary(b); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(back, cp) {
			t.Fatalf("binary round trip:\n got %+v\nwant %+v", back, cp)
		}
		parsed, err := ParseCheckpoint(cp.String())
		if err != nil || !reflect.DeepEqual(parsed, cp) {
			t.Fatalf("text round trip: %+v, %v", parsed, err)
		}
		j, err := json.Marshal(map[string]Checkpoint{"cp": cp})
		if err != nil {
			t.Fatal(err)
		}
		var fromJSON map[string]Checkpoint
		if err := json.Unmarshal(j, &fromJSON); err != nil || !reflect.DeepEqual(fromJSON["cp"], cp) {
			t.Fatalf("JSON round trip: %v", err)
		}
		for i := range b {
			if err := back.UnmarshalBinary(b[:i]); !errors.Is(err, ErrBadCheckpoint) {
				t.Fatalf("cut at %d: %v", i, err)
			}
		}
		flipped := bytes.Clone(b)
		flipped[len(flipped)/2] ^= 1
		if err := back.UnmarshalBinary(flipped); !errors.Is(err, ErrBadCheckpoint) {
			t.Fatalf("a flipped bit accepted: %v", err)
		}
	}
	// Unsorted input encodes canonically.
	messy := Checkpoint{Topic: "x", Drained: []uint64{3, 0, 3}, Positions: []UnitPosition{{Segment: 2}, {Segment: 1, Offset: 4}}}
	a, _ := messy.MarshalBinary()
	var back Checkpoint
	if err := back.UnmarshalBinary(a); err != nil || !reflect.DeepEqual(back.Drained, []uint64{0, 3}) || back.Positions[0].Segment != 1 {
		t.Fatalf("canonical: %+v %v", back, err)
	}
}

func FuzzCheckpointUnmarshalBinary(f *testing.F) {
	for _, cp := range sampleCheckpoints() {
		b, _ := cp.MarshalBinary()
		f.Add(b[:len(b)-4])
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		// Try the input as it is and with a valid checksum appended, so that
		// the fuzzer reaches the decoder behind the checksum.
		sealed := binary.LittleEndian.AppendUint32(bytes.Clone(b), crc32.Checksum(b, castagnoli))
		for _, in := range [][]byte{b, sealed} {
			var cp Checkpoint
			if cp.UnmarshalBinary(in) != nil {
				continue
			}
			again, err := cp.MarshalBinary()
			if err != nil || !bytes.Equal(again, in) {
				t.Fatalf("accepted a non-canonical checkpoint:\n in %x\nout %x (%v)", in, again, err)
			}
		}
	})
}
