package api

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

func TestRecordsRoundTrip(t *testing.T) {
	t.Parallel()
	in := []Record{
		{Payload: []byte("unkeyed")},
		{Key: []byte("k1"), Time: 1700000000000, Payload: []byte("v")},
		{Key: []byte("k2"), Time: -5, Headers: []Header{{Name: "a", Value: []byte("1")}, {Name: "b"}}},
		{Key: bytes.Repeat([]byte("x"), 300), Payload: bytes.Repeat([]byte("y"), 70000)},
	}
	out, err := DecodeRecords(AppendRecords(nil, in))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip:\n in %+v\nout %+v", in, out)
	}
}

func TestResultsRoundTrip(t *testing.T) {
	t.Parallel()
	in := []Result{
		{Segment: 3, Bucket: 2, Offset: 99},
		{Code: CodeSegmentSealed.Number, Epoch: 7, Message: "sealed"},
	}
	out, err := DecodeResults(AppendResults(nil, in))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip: %+v vs %+v", in, out)
	}
	if !errors.Is(out[1].Err(), ErrSegmentSealed) || out[0].Err() != nil {
		t.Fatalf("Err(): %v %v", out[0].Err(), out[1].Err())
	}
	var e *Error
	if !errors.As(out[1].Err(), &e) || e.Epoch != 7 {
		t.Fatalf("epoch not carried: %+v", e)
	}
}

func TestMessagesRoundTrip(t *testing.T) {
	t.Parallel()
	in := []Message{
		{Segment: 1, Bucket: 3, Offset: 10, Deliveries: 1, Time: 5, Key: []byte("k"), Payload: []byte("p")},
		{Segment: 2, Offset: 1 << 40, Deliveries: 2, Headers: []Header{{Name: "h", Value: []byte("v")}}},
	}
	out, err := DecodeMessages(AppendMessages(nil, in))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip: %+v vs %+v", in, out)
	}
}

func TestDecodeRejectsMalformed(t *testing.T) {
	t.Parallel()
	good := AppendRecords(nil, []Record{{Key: []byte("k"), Payload: []byte("payload")}})
	cases := map[string][]byte{
		"empty":         {},
		"bad version":   append([]byte{9}, good[1:]...),
		"truncated":     good[:len(good)-1],
		"trailing":      append(append([]byte{}, good...), 0),
		"forged count":  {FormatVersion, 0xff, 0xff, 0xff, 0xff, 0x0f},
		"length beyond": {FormatVersion, 1, 50, 'a'},
	}
	for name, b := range cases {
		if _, err := DecodeRecords(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: got %v, want ErrMalformed", name, err)
		}
		if _, err := DecodeMessages(b); err == nil && name != "trailing" {
			t.Errorf("%s: DecodeMessages accepted it", name)
		}
	}
	// Every cut of a valid body is rejected, never a panic.
	for i := 0; i < len(good); i++ {
		if _, err := DecodeRecords(good[:i]); err == nil {
			t.Fatalf("cut at %d accepted", i)
		}
	}
}

func FuzzDecodeRecords(f *testing.F) {
	f.Add(AppendRecords(nil, []Record{{Key: []byte("k"), Time: 3, Payload: []byte("v")}}))
	f.Add(AppendRecords(nil, nil))
	f.Add([]byte{1, 2, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		recs, err := DecodeRecords(b)
		if err != nil {
			return
		}
		again, err := DecodeRecords(AppendRecords(nil, recs))
		if err != nil || !reflect.DeepEqual(recs, again) {
			t.Fatalf("re-encode differs: %v", err)
		}
	})
}

func FuzzDecodeMessages(f *testing.F) {
	f.Add(AppendMessages(nil, []Message{{Segment: 1, Offset: 2, Payload: []byte("x")}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		ms, err := DecodeMessages(b)
		if err != nil {
			return
		}
		again, err := DecodeMessages(AppendMessages(nil, ms))
		if err != nil || !reflect.DeepEqual(ms, again) {
			t.Fatalf("re-encode differs: %v", err)
		}
	})
}

func FuzzDecodeResults(f *testing.F) {
	f.Add(AppendResults(nil, []Result{{Segment: 1}, {Code: 460, Epoch: 3, Message: "m"}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		rs, err := DecodeResults(b)
		if err != nil {
			return
		}
		again, err := DecodeResults(AppendResults(nil, rs))
		if err != nil || !reflect.DeepEqual(rs, again) {
			t.Fatalf("re-encode differs: %v", err)
		}
	})
}
