package node

import (
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/braidmq/braid/internal/poll"

	"github.com/braidmq/braid/api"
	"github.com/nats-io/nats.go"
)

// TestStaleRouteIsRefused: a producer that routed a batch by an older
// layout gets SEGMENT_SEALED for the keyed records whose segment changed
// since, even though the server could route them itself; a producer may
// have earlier records of those keys in flight to the sealed segment.
func TestStaleRouteIsRefused(t *testing.T) {
	forEachFrontEnd(t, func(t *testing.T, n *Node, nc *nats.Conn) {
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
	})
}

// topicMessages is the number of messages the topic stores.
func topicMessages(t *testing.T, nc *nats.Conn, uri string) uint64 {
	t.Helper()
	var st api.TopicStats
	mustAdmin(t, nc, api.AdminTopicStats, api.TopicRequest{Topic: uri}, &st)
	return st.Messages
}

// TestPlainProduceKeepsApplicationHeaders: headers a plain client sets on
// a produce request, but Braid's own and NATS's, are stored and returned
// by every fetch format, in name order, repeated names included.
func TestPlainProduceKeepsApplicationHeaders(t *testing.T) {
	forEachFrontEnd(t, func(t *testing.T, n *Node, nc *nats.Conn) {
		const uri = "topic://public/default/headers"
		mustAdmin(t, nc, api.AdminTopicCreate, map[string]any{"topic": uri, "segments": 1}, nil)
		hdr := nats.Header{}
		hdr.Set(api.HeaderKey, "k1")
		hdr.Set(api.HeaderTime, "1767225600000")
		hdr.Set("Trace-Id", "abc")
		hdr.Add("X-Tag", "red")
		hdr.Add("X-Tag", "blue")
		hdr.Set("Nats-Msg-Id", "dedup-1")
		data, _, e := request(t, nc, api.TopicSubject(api.ProducePrefix, "public", "default", "headers"), []byte("hello"), hdr)
		if e != nil {
			t.Fatal(e)
		}
		var id api.ProduceReply
		if err := json.Unmarshal(data, &id); err != nil {
			t.Fatal(err)
		}
		want := []api.Header{{Name: "Trace-Id", Value: []byte("abc")}, {Name: "X-Tag", Value: []byte("red")}, {Name: "X-Tag", Value: []byte("blue")}}

		readBody, _ := json.Marshal(api.ReadRequest{Units: []api.ReadUnit{{Segment: id.Segment, Bucket: id.Bucket, Offset: id.Offset}}})
		data, _, e = request(t, nc, api.ReadSubject(api.ReadFetch, "public", "default", "headers"), readBody, nil)
		if e != nil {
			t.Fatal(e)
		}
		rr, err := api.DecodeReadReply(data)
		if err != nil || len(rr.Messages) != 1 {
			t.Fatalf("read reply %+v, %v", rr, err)
		}
		if m := rr.Messages[0]; !sameHeaders(m.Headers, want) || string(m.Key) != "k1" || m.Time != 1767225600000 {
			t.Fatalf("binary read: key %q time %d headers %v, want k1, 1767225600000, %v", m.Key, m.Time, m.Headers, want)
		}

		msgs := fetchAll(t, nc, "headers", "audit", "c1")
		if len(msgs) != 1 || !sameHeaders(msgs[0].Headers, want) {
			t.Fatalf("stream fetch: %+v", msgs)
		}
		jb, _ := json.Marshal(api.FetchRequest{Subscription: "json", Consumer: "c1", Format: "json", Wait: "100ms"})
		join, _ := json.Marshal(api.JoinRequest{Subscription: "json", Consumer: "c1"})
		if _, _, e := request(t, nc, api.ConsumeSubject(api.ConsumeJoin, "public", "default", "headers"), join, nil); e != nil {
			t.Fatal(e)
		}
		data, _, e = request(t, nc, api.ConsumeSubject(api.ConsumeFetch, "public", "default", "headers"), jb, nil)
		if e != nil {
			t.Fatal(e)
		}
		var fj api.FetchReplyJSON
		if err := json.Unmarshal(data, &fj); err != nil || len(fj.Messages) != 1 {
			t.Fatalf("json fetch %s: %v", data, err)
		}
		if h := fj.Messages[0].Headers; len(h) != 2 || h["Trace-Id"] != "abc" || h["X-Tag"] != "red, blue" {
			t.Fatalf("json fetch headers %v", h)
		}
	})
}

func sameHeaders(a, b []api.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Name != b[i].Name || string(a[i].Value) != string(b[i].Value) {
			return false
		}
	}
	return true
}

// TestReadFetchJSON: read.fetch answers "format":"json" like consume.fetch,
// with unit states, and refuses an unknown format.
func TestReadFetchJSON(t *testing.T) {
	n, nc := startNode(t, t.TempDir())
	defer stopNode(t, n, nc)
	const uri = "topic://public/default/readjson"
	mustAdmin(t, nc, api.AdminTopicCreate, map[string]any{"topic": uri, "segments": 1, "buckets": 1}, nil)
	for i := range 3 {
		produce(t, nc, "readjson", "k", []byte("m"+strconv.Itoa(i)))
	}
	subject := api.ReadSubject(api.ReadFetch, "public", "default", "readjson")
	body, _ := json.Marshal(api.ReadRequest{Units: []api.ReadUnit{{Segment: 0, Bucket: 0, Offset: 1}, {Segment: 9, Bucket: 0}}, Format: "json"})
	data, _, e := request(t, nc, subject, body, nil)
	if e != nil {
		t.Fatal(e)
	}
	var rj api.ReadReplyJSON
	if err := json.Unmarshal(data, &rj); err != nil {
		t.Fatalf("%s: %v", data, err)
	}
	if len(rj.Messages) != 2 || string(rj.Messages[0].Payload) != "m1" || rj.Messages[1].Offset != 2 || rj.Messages[0].Key != "k" {
		t.Fatalf("messages %+v", rj.Messages)
	}
	if len(rj.Units) != 2 || rj.Units[0].Next != 3 || rj.Units[0].Code != 0 ||
		rj.Units[1].Code != api.CodeSegmentNotFound.Number || rj.Units[1].Error != api.CodeSegmentNotFound.Symbol {
		t.Fatalf("units %+v", rj.Units)
	}
	body, _ = json.Marshal(api.ReadRequest{Units: []api.ReadUnit{{}}, Format: "xml"})
	if _, _, e := request(t, nc, subject, body, nil); e == nil || e.Code != api.CodeBadRequest {
		t.Fatalf("format xml: %v, want BAD_REQUEST", e)
	}
}

// TestFireAndForgetProduce: a produce request without a reply subject
// (`nats pub`) is appended and counted; one that is refused is counted by
// its code and logged, since nobody can be told.
func TestFireAndForgetProduce(t *testing.T) {
	forEachFrontEnd(t, func(t *testing.T, n *Node, nc *nats.Conn) {
		const uri = "topic://public/default/fire"
		mustAdmin(t, nc, api.AdminTopicCreate, map[string]any{"topic": uri, "segments": 2}, nil)
		subject := api.TopicSubject(api.ProducePrefix, "public", "default", "fire")
		for i := range 5 {
			m := &nats.Msg{Subject: subject, Data: []byte("f" + strconv.Itoa(i)), Header: nats.Header{}}
			m.Header.Set(api.HeaderKey, "k"+strconv.Itoa(i))
			if err := nc.PublishMsg(m); err != nil {
				t.Fatal(err)
			}
		}
		bad := &nats.Msg{Subject: subject, Data: []byte("x"), Header: nats.Header{}}
		bad.Header.Set(api.HeaderTime, "yesterday")
		if err := nc.PublishMsg(bad); err != nil {
			t.Fatal(err)
		}
		if err := nc.Publish(api.TopicSubject(api.ProducePrefix, "public", "default", "nosuch"), []byte("x")); err != nil {
			t.Fatal(err)
		}
		if !poll.Until(10*time.Second, func() bool { return topicMessages(t, nc, uri) >= 5 }) {
			t.Fatalf("%d of 5 fire-and-forget messages stored", topicMessages(t, nc, uri))
		}
		var m string
		if !poll.Until(10*time.Second, func() bool {
			m = scrape(t, n)
			return contains(m, "braid_produce_no_reply_total 7") && contains(m, `braid_produce_dropped_total{code="BAD_REQUEST"} 1`) &&
				contains(m, `braid_produce_dropped_total{code="TOPIC_NOT_FOUND"} 1`)
		}) {
			t.Fatalf("metrics:\n%s", grep(m, "braid_produce_"))
		}
		if got := topicMessages(t, nc, uri); got != 5 {
			t.Fatalf("%d messages stored, want 5", got)
		}
	})
}

// forEachFrontEnd runs test against a node with each produce front-end.
func forEachFrontEnd(t *testing.T, test func(t *testing.T, n *Node, nc *nats.Conn)) {
	for name, configure := range frontEnds {
		t.Run(name, func(t *testing.T) {
			n, nc := startNodeWith(t, t.TempDir(), configure)
			defer stopNode(t, n, nc)
			test(t, n, nc)
		})
	}
}

// TestOneTimeRuleForBothProducePaths: 0 is the server's time, a negative
// time is refused (the whole batch), on produce and produce-batch alike.
func TestOneTimeRuleForBothProducePaths(t *testing.T) {
	forEachFrontEnd(t, func(t *testing.T, n *Node, nc *nats.Conn) {
		const uri = "topic://public/default/times"
		mustAdmin(t, nc, api.AdminTopicCreate, map[string]any{"topic": uri, "segments": 1}, nil)
		one := api.TopicSubject(api.ProducePrefix, "public", "default", "times")
		batch := api.TopicSubject(api.ProduceBatchPrefix, "public", "default", "times")
		for _, bad := range []string{"-5", "-9223372036854775808", "soon"} {
			if _, _, e := request(t, nc, one, []byte("x"), nats.Header{api.HeaderTime: []string{bad}}); e == nil || e.Code != api.CodeBadRequest {
				t.Fatalf("produce with %s %q: %v, want BAD_REQUEST", api.HeaderTime, bad, e)
			}
		}
		for _, ts := range []int64{-5, math.MinInt64} {
			recs := []api.Record{{Payload: []byte("ok")}, {Payload: []byte("bad"), Time: ts}}
			if _, _, e := request(t, nc, batch, api.AppendRecords(nil, recs), nil); e == nil || e.Code != api.CodeBadRequest {
				t.Fatalf("produce-batch with time %d: %v, want BAD_REQUEST", ts, e)
			}
		}
		if got := topicMessages(t, nc, uri); got != 0 {
			t.Fatalf("refused requests stored %d messages", got)
		}
		before := time.Now().UnixMilli()
		if _, _, e := request(t, nc, one, []byte("now"), nats.Header{api.HeaderTime: []string{"0"}}); e != nil {
			t.Fatalf("produce with %s 0: %v", api.HeaderTime, e)
		}
		if _, _, e := request(t, nc, batch, api.AppendRecords(nil, []api.Record{{Payload: []byte("now"), Time: 0}}), nil); e != nil {
			t.Fatalf("produce-batch with time 0: %v", e)
		}
		msgs := fetchAll(t, nc, "times", "audit", "c1")
		if len(msgs) != 2 {
			t.Fatalf("%d messages stored, want 2", len(msgs))
		}
		for _, m := range msgs {
			if m.Time < before {
				t.Fatalf("time 0 stored as %d, want the server's time (>= %d)", m.Time, before)
			}
		}
	})
}
