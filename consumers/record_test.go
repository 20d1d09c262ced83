package consumers

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/braidmq/braid/topology"
)

func TestRecordRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for range 1000 {
		kind := []recordKind{kindCreated, kindUpdate, kindSnapshot}[r.IntN(3)]
		rec := randomRecord(r, kind)
		body := encodeRecord(nil, rec)
		got, err := decodeRecord(body)
		if err != nil {
			t.Fatalf("decode %x: %v", body, err)
		}
		if !reflect.DeepEqual(got, rec) {
			t.Fatalf("round trip %+v gave %+v", rec, got)
		}
	}
}

func TestRecordDecodeErrors(t *testing.T) {
	valid := encodeRecord(nil, stateRecord{Kind: kindSnapshot, Start: startLatest,
		Cursors: []unitCursor{{Unit: u(1, 0), Acked: 3}, {Unit: u(1, 1), Acked: 4}}, Drained: []topology.SegmentID{0, 2}})
	tests := []struct {
		name string
		body []byte
	}{
		{"empty", nil},
		{"version only", []byte{recordVersion}},
		{"unknown version", []byte{9, byte(kindUpdate), 0, 0}},
		{"unknown kind", []byte{recordVersion, 42, 0, 0}},
		{"unknown start", []byte{recordVersion, byte(kindCreated), 7, 0, 0}},
		{"trailing byte", append(bytes.Clone(valid), 0)},
		{"truncated", valid[:len(valid)-1]},
		{"forged cursor count", []byte{recordVersion, byte(kindUpdate), 0xff, 0xff, 0xff, 0xff, 0x0f}},
		{"unsorted cursors", []byte{recordVersion, byte(kindUpdate), 2, 1, 0, 5, 0, 0, 5, 0}},
		{"duplicate drained", []byte{recordVersion, byte(kindUpdate), 0, 2, 3, 3}},
		{"bucket out of range", []byte{recordVersion, byte(kindUpdate), 1, 0, 0x80, 0x08, 1, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := decodeRecord(tt.body); !errors.Is(err, ErrBadRecord) {
				t.Fatalf("decode %x: error %v, want ErrBadRecord", tt.body, err)
			}
		})
	}
}

// FuzzDecodeRecord: the decoder never panics, and what it accepts is
// canonical: it encodes back to the same bytes and replays cleanly.
func FuzzDecodeRecord(f *testing.F) {
	r := rand.New(rand.NewPCG(9, 10))
	for _, kind := range []recordKind{kindCreated, kindUpdate, kindSnapshot} {
		f.Add(encodeRecord(nil, randomRecord(r, kind)))
	}
	f.Add([]byte{})
	f.Add([]byte{recordVersion, byte(kindUpdate), 0, 0})
	f.Fuzz(func(t *testing.T, body []byte) {
		rec, err := decodeRecord(body)
		if err != nil {
			if !errors.Is(err, ErrBadRecord) {
				t.Fatalf("error %v does not wrap ErrBadRecord", err)
			}
			return
		}
		if again := encodeRecord(nil, rec); !bytes.Equal(again, body) {
			t.Fatalf("decoded %+v re-encodes to %x, want %x", rec, again, body)
		}
		s := newSubscriptionState()
		if rec.Kind != kindUpdate {
			if err := s.apply(rec); err != nil {
				t.Fatalf("apply %+v: %v", rec, err)
			}
		}
	})
}
