package cluster

import (
	"errors"
	"strconv"
	"testing"

	"github.com/braidmq/braid/api"
	"github.com/nats-io/nats.go"
)

// TestStaleRouteIsRefused: a producer that routed a batch by an older
// layout gets SEGMENT_SEALED for the keyed records whose segment changed
// since, even though the server could route them itself; a producer may
// have earlier records of those keys in flight to the sealed segment.
func TestStaleRouteIsRefused(t *testing.T) {
	n, nc := startNode(t, t.TempDir())
	defer stopNode(t, n, nc)
	const uri = "topic://public/default/stale"
	var d api.TopicDescription
	mustAdmin(t, nc, api.AdminTopicCreate, map[string]any{"topic": uri, "segments": 2}, &d)
	old := d.Epoch
	mustAdmin(t, nc, api.AdminTopicSplit, map[string]any{"topic": uri, "segment": 0}, &d)
	if d.Epoch <= old {
		t.Fatalf("split left the epoch at %d", d.Epoch)
	}
	// Keys of the split segment 0 and of the untouched segment 1.
	var moved, stayed string
	for i := 0; moved == "" || stayed == ""; i++ {
		k := "k" + strconv.Itoa(i)
		if produce(t, nc, "stale", k, []byte("probe")).Segment == 1 {
			stayed = k
		} else {
			moved = k
		}
	}
	statsBefore := topicMessages(t, nc, uri)
	subject := api.TopicSubject(api.ProduceBatchPrefix, "public", "default", "stale")
	recs := []api.Record{
		{Key: []byte(moved), Payload: []byte("a")},
		{Key: []byte(stayed), Payload: []byte("b")},
		{Payload: []byte("unkeyed")},
	}
	send := func(epoch uint64) []api.Result {
		hdr := nats.Header{}
		if epoch != 0 {
			hdr.Set(api.HeaderEpoch, strconv.FormatUint(epoch, 10))
		}
		data, _, e := request(t, nc, subject, api.AppendRecords(nil, recs), hdr)
		if e != nil {
			t.Fatal(e)
		}
		res, err := api.DecodeResults(data)
		if err != nil || len(res) != len(recs) {
			t.Fatalf("results %v, %v", res, err)
		}
		return res
	}
	res := send(old)
	if err := res[0].Err(); !errors.Is(err, api.ErrSegmentSealed) || res[0].Epoch != d.Epoch {
		t.Fatalf("moved key routed by epoch %d: %v (epoch %d), want SEGMENT_SEALED with epoch %d", old, err, res[0].Epoch, d.Epoch)
	}
	for i := 1; i < 3; i++ {
		if err := res[i].Err(); err != nil {
			t.Fatalf("record %d (its segment did not change): %v", i, err)
		}
	}
	if got := topicMessages(t, nc, uri); got != statsBefore+2 {
		t.Fatalf("%d messages stored, want %d: the refused record was stored", got, statsBefore+2)
	}
	for _, epoch := range []uint64{d.Epoch, 0} {
		for i, r := range send(epoch) {
			if err := r.Err(); err != nil {
				t.Fatalf("epoch header %d, record %d: %v", epoch, i, err)
			}
		}
	}
}

// topicMessages is the number of messages the topic stores.
func topicMessages(t *testing.T, nc *nats.Conn, uri string) uint64 {
	t.Helper()
	var st api.TopicStats
	mustAdmin(t, nc, api.AdminTopicStats, api.TopicRequest{Topic: uri}, &st)
	return st.Messages
}
