package api

import (
	"reflect"
	"testing"
)

func TestReadReplyRoundTrip(t *testing.T) {
	in := ReadReply{
		Epoch: 7,
		Units: []UnitStatus{
			{Segment: 3, Bucket: 1, First: 2, Next: 40, Sealed: true},
			{Segment: 4, Bucket: 0, Code: CodeOffsetGone.Number, First: 9, Next: 12},
		},
		Messages: []Message{{Segment: 3, Bucket: 1, Offset: 2, Time: 5, Key: []byte("k"), Payload: []byte("v"),
			Headers: []Header{{Name: "h", Value: []byte("x")}}}},
	}
	b := AppendReadReply(nil, &in)
	out, err := DecodeReadReply(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", out, in)
	}
	for i := 0; i < len(b); i++ {
		if _, err := DecodeReadReply(b[:i]); err == nil {
			t.Fatalf("cut at %d accepted", i)
		}
	}
	bad := AppendReadReply(nil, &ReadReply{Units: []UnitStatus{{Sealed: true}}})
	bad[len(bad)-2] = 2 // the sealed flag
	if _, err := DecodeReadReply(bad); err == nil {
		t.Fatal("sealed flag 2 accepted")
	}
}

func FuzzDecodeReadReply(f *testing.F) {
	f.Add(AppendReadReply(nil, &ReadReply{Epoch: 1, Units: []UnitStatus{{Segment: 1, Next: 3, Sealed: true}},
		Messages: []Message{{Segment: 1, Offset: 2, Payload: []byte("x")}}}))
	f.Add(AppendReadReply(nil, &ReadReply{}))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeReadReply(b)
		if err != nil {
			return
		}
		again, err := DecodeReadReply(AppendReadReply(nil, &r))
		if err != nil || !reflect.DeepEqual(r, again) {
			t.Fatalf("re-encode differs: %v", err)
		}
	})
}
