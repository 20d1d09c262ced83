package node

import (
	"strings"
	"testing"

	"github.com/braidmq/braid/api"
)

// TestProduceMulti sends produce-multi requests over both front-ends: the
// parts land in their topics in part order, a part for an unknown topic or
// with a malformed batch fails alone, and a malformed request is
// BAD_REQUEST.
func TestProduceMulti(t *testing.T) {
	for name, configure := range frontEnds {
		t.Run(name, func(t *testing.T) {
			n, nc := startNodeWith(t, t.TempDir(), configure)
			defer stopNode(t, n, nc)
			for _, topic := range []string{"m1", "m2"} {
				mustAdmin(t, nc, api.AdminTopicCreate, api.TopicCreateRequest{Topic: "topic://public/default/" + topic, Segments: 1, Buckets: 1}, nil)
			}
			batch := func(payloads ...string) []byte {
				recs := make([]api.Record, len(payloads))
				for i, p := range payloads {
					recs[i] = api.Record{Key: []byte("k"), Payload: []byte(p)}
				}
				return api.AppendRecords(nil, recs)
			}
			req := api.AppendMultiHeader(nil, 5)
			req = api.AppendMultiPart(req, "default", "m1", 0, batch("a1", "a2"))
			req = api.AppendMultiPart(req, "default", "m2", 0, batch("b1"))
			req = api.AppendMultiPart(req, "default", "nope", 0, batch("lost"))
			req = api.AppendMultiPart(req, "default", "m2", 0, []byte{1, 9})
			req = api.AppendMultiPart(req, "default", "m1", 0, batch("a3"))
			data, _, e := request(t, nc, api.ProduceMultiPrefix+".public", req, nil)
			if e != nil {
				t.Fatal(e)
			}
			replies, err := api.DecodeMultiReplies(data)
			if err != nil || len(replies) != 5 {
				t.Fatalf("replies %+v, %v; want 5", replies, err)
			}
			for i, want := range []int{2, 1, 0, 0, 1} {
				if want > 0 && (replies[i].Err != nil || len(replies[i].Results) != want) {
					t.Fatalf("part %d: %+v; want %d results", i, replies[i], want)
				}
			}
			if e := replies[2].Err; e == nil || e.Code != api.CodeTopicNotFound {
				t.Fatalf("part for an unknown topic: %+v, want TOPIC_NOT_FOUND", replies[2])
			}
			if e := replies[3].Err; e == nil || e.Code != api.CodeBadRequest {
				t.Fatalf("malformed part: %+v, want BAD_REQUEST", replies[3])
			}
			if got := strings.Join(readPayloads(t, nc, "m1"), ","); got != "a1,a2,a3" {
				t.Fatalf("m1 holds %s, want a1,a2,a3", got)
			}
			if got := strings.Join(readPayloads(t, nc, "m2"), ","); got != "b1" {
				t.Fatalf("m2 holds %s, want b1", got)
			}
			for subject, body := range map[string][]byte{
				api.ProduceMultiPrefix + ".public": {1, 3, 0},
				api.ProduceMultiPrefix + ".bad!":   api.AppendMultiPart(api.AppendMultiHeader(nil, 1), "default", "m1", 0, batch("x")),
			} {
				data, _, e := request(t, nc, subject, body, nil)
				switch {
				case subject == api.ProduceMultiPrefix+".public" && (e == nil || e.Code != api.CodeBadRequest):
					t.Fatalf("malformed request: %v, want BAD_REQUEST", e)
				case subject != api.ProduceMultiPrefix+".public":
					// A bad tenant name fails its part.
					if e != nil {
						t.Fatalf("%s: %v", subject, e)
					}
					replies, err := api.DecodeMultiReplies(data)
					if err != nil || len(replies) != 1 || replies[0].Err == nil || replies[0].Err.Code != api.CodeInvalidName {
						t.Fatalf("part of a bad tenant: %+v, %v; want INVALID_NAME", replies, err)
					}
				}
			}
		})
	}
}
