package node

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/braidmq/braid/api"
)

// read.offsets asked with a time earlier than every message answers each
// unit's time_offset, 0 included; asked without a time, it has none.
func TestReadOffsetsTimeBeforeFirstMessageAnswersTimeOffsetZero(t *testing.T) {
	n, nc := startNode(t, t.TempDir())
	defer stopNode(t, n, nc)
	mustAdmin(t, nc, api.AdminTopicCreate, api.TopicCreateRequest{Topic: "topic://public/default/early", Segments: 1, Buckets: 1}, nil)
	start := time.Now().UnixMilli()
	for i := range 3 {
		hdr := nats.Header{}
		hdr.Set(api.HeaderTime, fmt.Sprint(start+int64(i)*1000))
		if _, _, e := request(t, nc, api.TopicSubject(api.ProducePrefix, "public", "default", "early"), []byte(fmt.Sprint(i)), hdr); e != nil {
			t.Fatal(e)
		}
	}
	subj := api.ReadSubject(api.ReadOffsets, "public", "default", "early")

	data, e := jsonReq(t, nc, subj, api.OffsetsRequest{Time: start - 60_000})
	if e != nil {
		t.Fatal(e)
	}
	if !strings.Contains(string(data), `"time_offset":0`) {
		t.Fatalf("offsets with a time before the first message lack \"time_offset\":0: %s", data)
	}
	var offs api.OffsetsReply
	if err := json.Unmarshal(data, &offs); err != nil || len(offs.Units) != 1 {
		t.Fatalf("offsets %s (%v)", data, err)
	}
	if u := offs.Units[0]; u.TimeOffset != 0 || u.First != 0 || u.Next != 3 {
		t.Fatalf("unit %+v, want time offset 0 of [0, 3)", u)
	}

	// Without a time, no time_offset.
	data, e = jsonReq(t, nc, subj, api.OffsetsRequest{})
	if e != nil {
		t.Fatal(e)
	}
	if strings.Contains(string(data), "time_offset") {
		t.Fatalf("offsets without a time carry a time_offset: %s", data)
	}
}
