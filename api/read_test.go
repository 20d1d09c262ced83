package api

import (
	"encoding/json"
	"reflect"
	"testing"
)

func TestReadReplyRoundTrip(t *testing.T) {
	t.Parallel()
	in := ReadReply{
		Epoch: 7,
		Units: []UnitStatus{
			{Segment: 3, Bucket: 1, First: 2, Next: 40, Sealed: true},
			{Segment: 4, Bucket: 0, Code: CodeOffsetGone.Number, First: 9, Next: 12},
			{Segment: 5, Bucket: 2, Code: CodeOffsetsLost.Number, First: 0, Next: 90, Sealed: true, LostFrom: 10, LostTo: 20,
				Message: "offsets [10, 20) lost"},
			{Segment: 6, Code: CodeInternal.Number, Message: "disk on fire"},
			{Segment: 7, First: 0, Next: 500, Sealed: true, Resume: 500},
			{Segment: 8, First: 3, Next: 9, Resume: 5},
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
	bad[len(bad)-2] = 16 // the flags
	if _, err := DecodeReadReply(bad); err == nil {
		t.Fatal("unit flag 16 accepted")
	}
	bad = AppendReadReply(nil, &ReadReply{Units: []UnitStatus{{Resume: 1}}})
	bad[len(bad)-2] = 0 // resume 0
	if _, err := DecodeReadReply(bad); err == nil {
		t.Fatal("resume 0 accepted")
	}
	bad = AppendReadReply(nil, &ReadReply{Units: []UnitStatus{{LostFrom: 3, LostTo: 4}}})
	bad[len(bad)-2] = 3 // lost to = lost from
	if _, err := DecodeReadReply(bad); err == nil {
		t.Fatal("an empty lost range accepted")
	}
	// A reply without a lost range is what earlier releases sent.
	old := AppendReadReply(nil, &ReadReply{Units: []UnitStatus{{Segment: 1, Next: 2, Sealed: true}}})
	if want := []byte{FormatVersion, 0, 1, 1, 0, 0, 0, 2, 1, 0}; !reflect.DeepEqual(old, want) {
		t.Fatalf("encoding % x, want % x", old, want)
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

func TestUnitOffsetsJSONKeepsAnAskedTimeOffsetOfZero(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   UnitOffsets
		want string
	}{
		{UnitOffsets{Segment: 1, Next: 4, HasTimeOffset: true}, `{"segment":1,"bucket":0,"first":0,"next":4,"sealed":false,"time_offset":0}`},
		{UnitOffsets{Segment: 1, Next: 4, TimeOffset: 2, HasTimeOffset: true}, `{"segment":1,"bucket":0,"first":0,"next":4,"sealed":false,"time_offset":2}`},
		{UnitOffsets{Segment: 1, Next: 4}, `{"segment":1,"bucket":0,"first":0,"next":4,"sealed":false}`},
	} {
		b, err := json.Marshal(tc.in)
		if err != nil || string(b) != tc.want {
			t.Fatalf("marshal %+v: %s (%v), want %s", tc.in, b, err, tc.want)
		}
		var out UnitOffsets
		if err := json.Unmarshal(b, &out); err != nil || out != tc.in {
			t.Fatalf("unmarshal %s: %+v (%v), want %+v", b, out, err, tc.in)
		}
	}
}
