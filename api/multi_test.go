package api

import (
	"reflect"
	"testing"
)

func TestMultiRoundTrip(t *testing.T) {
	t.Parallel()
	batch := AppendRecords(nil, []Record{{Key: []byte("k"), Payload: []byte("v")}})
	req := AppendMultiHeader(nil, 2)
	req = AppendMultiPart(req, "orders", "payments", 0, batch)
	req = AppendMultiPart(req, "orders", "refunds", 7, batch)
	parts, err := DecodeMulti(req)
	if err != nil {
		t.Fatal(err)
	}
	want := []MultiPart{{Namespace: "orders", Topic: "payments", Records: batch}, {Namespace: "orders", Topic: "refunds", Epoch: 7, Records: batch}}
	if !reflect.DeepEqual(parts, want) {
		t.Fatalf("parts %+v, want %+v", parts, want)
	}
	for i := range req {
		if _, err := DecodeMulti(req[:i]); err == nil {
			t.Fatalf("a request cut at %d decoded", i)
		}
	}
	replies := []MultiReply{{Results: []Result{{Segment: 1, Bucket: 2, Offset: 3}}}, {Err: &Error{Code: CodeTopicNotFound, Message: "no such topic"}}}
	got, err := DecodeMultiReplies(AppendMultiReplies(nil, replies))
	if err != nil || !reflect.DeepEqual(got, replies) {
		t.Fatalf("replies %+v, %v; want %+v", got, err, replies)
	}
}

func FuzzDecodeMulti(f *testing.F) {
	f.Add(AppendMultiPart(AppendMultiHeader(nil, 1), "n", "t", 3, AppendRecords(nil, []Record{{Payload: []byte("x")}})))
	f.Add([]byte{1, 1, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		parts, err := DecodeMulti(b)
		if err != nil {
			return
		}
		req := AppendMultiHeader(nil, len(parts))
		for _, p := range parts {
			req = AppendMultiPart(req, p.Namespace, p.Topic, p.Epoch, p.Records)
		}
		again, err := DecodeMulti(req)
		if err != nil || len(again) != len(parts) {
			t.Fatalf("re-encode differs: %v", err)
		}
		for i := range parts {
			if parts[i].Namespace != again[i].Namespace || parts[i].Topic != again[i].Topic || parts[i].Epoch != again[i].Epoch ||
				string(parts[i].Records) != string(again[i].Records) {
				t.Fatalf("part %d re-encodes as %+v, was %+v", i, again[i], parts[i])
			}
		}
	})
}

func FuzzDecodeMultiReplies(f *testing.F) {
	f.Add(AppendMultiReplies(nil, []MultiReply{{Results: []Result{{Segment: 1}}}, {Err: &Error{Code: CodeUnavailable, Message: "m"}}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		rs, err := DecodeMultiReplies(b)
		if err != nil {
			return
		}
		again, err := DecodeMultiReplies(AppendMultiReplies(nil, rs))
		if err != nil || len(again) != len(rs) {
			t.Fatalf("re-encode differs: %v", err)
		}
	})
}
