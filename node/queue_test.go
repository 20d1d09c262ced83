package node

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/braidmq/braid/internal/poll"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/topology"
	"github.com/nats-io/nats.go"
)

func jsonReq(t *testing.T, nc *nats.Conn, subject string, req any) ([]byte, *api.Error) {
	t.Helper()
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	data, _, e := request(t, nc, subject, b, nil)
	return data, e
}

func TestQueueThroughNATSDeadLettersIntoACreatedTopic(t *testing.T) {
	n, nc := startNode(t, t.TempDir())
	defer stopNode(t, n, nc)
	mustAdmin(t, nc, api.AdminTopicCreate, api.TopicCreateRequest{Topic: "topic://public/default/jobs", Segments: 2}, nil)
	for i := range 4 {
		produce(t, nc, "jobs", fmt.Sprintf("k%d", i), []byte(fmt.Sprintf("job-%d", i)))
	}
	q := func(verb string) string { return api.QueueSubject(verb, "public", "default", "jobs") }
	one := 1
	if _, e := jsonReq(t, nc, q(api.QueueJoin), api.QueueJoinRequest{Subscription: "workers", Consumer: "w1", MaxDeliveries: &one}); e != nil {
		t.Fatal(e)
	}
	// A stream join of the same name is refused.
	if _, e := jsonReq(t, nc, api.ConsumeSubject(api.ConsumeJoin, "public", "default", "jobs"),
		api.JoinRequest{Subscription: "workers", Consumer: "s"}); e == nil || e.Code != api.CodeAlreadyExists {
		t.Fatalf("stream join of a queue subscription: %v", e)
	}
	data, e := jsonReq(t, nc, q(api.QueueFetch), api.FetchRequest{Subscription: "workers", Consumer: "w1", Max: 10, Wait: "1s"})
	if e != nil {
		t.Fatal(e)
	}
	msgs, err := api.DecodeMessages(data)
	if err != nil || len(msgs) != 4 {
		t.Fatalf("fetched %d (%v)", len(msgs), err)
	}
	ack := api.AckRequest{Subscription: "workers", Consumer: "w1"}
	for _, m := range msgs[1:] {
		ack.Acks = append(ack.Acks, api.Position{Segment: m.Segment, Bucket: m.Bucket, Offset: m.Offset})
	}
	if _, e := jsonReq(t, nc, q(api.QueueAck), ack); e != nil {
		t.Fatal(e)
	}
	nack := api.NackRequest{Subscription: "workers", Consumer: "w1", Nacks: []api.Position{{Segment: msgs[0].Segment, Bucket: msgs[0].Bucket, Offset: msgs[0].Offset}}, Delay: "0s"}
	if _, e := jsonReq(t, nc, q(api.QueueNack), nack); e != nil {
		t.Fatal(e)
	}
	// The next fetch finds it past max deliveries: it goes to the DLQ topic.
	var dlq []api.Message
	poll.Until(10*time.Second, func() bool { // the check below says what came
		data, e := jsonReq(t, nc, q(api.QueueFetch), api.FetchRequest{Subscription: "workers", Consumer: "w1", Max: 10, Wait: "50ms"})
		if e != nil {
			t.Fatal(e)
		}
		if got, _ := api.DecodeMessages(data); len(got) != 0 {
			t.Fatalf("redelivered past max deliveries: %+v", got)
		}
		if _, e := jsonReq(t, nc, api.AdminSubject(api.AdminTopicDescribe), api.TopicRequest{Topic: "topic://public/default/jobs-dlq"}); e == nil {
			dlq = fetchAll(t, nc, "jobs-dlq", "inspect", "c")
		}
		return len(dlq) != 0
	})
	if len(dlq) != 1 || string(dlq[0].Payload) != string(msgs[0].Payload) {
		t.Fatalf("dead letters %+v", dlq)
	}
	hs := map[string]string{}
	for _, h := range dlq[0].Headers {
		hs[h.Name] = string(h.Value)
	}
	if hs[api.HeaderDLQOrigin] != "topic://public/default/jobs" || hs[api.HeaderDLQReason] != api.DLQReasonMaxDeliveries ||
		hs[api.HeaderDLQPosition] != fmt.Sprintf("%d/%d/%d", msgs[0].Segment, msgs[0].Bucket, msgs[0].Offset) {
		t.Fatalf("dead-letter headers %v", hs)
	}
	var st api.TopicStats
	mustAdmin(t, nc, api.AdminTopicStats, api.TopicRequest{Topic: "topic://public/default/jobs"}, &st)
	if len(st.Subscriptions) != 1 || st.Subscriptions[0].Kind != "queue" {
		t.Fatalf("stats subscriptions %+v", st.Subscriptions)
	}
	poll.Eventually(t, 10*time.Second, "backlog 0", func() bool {
		mustAdmin(t, nc, api.AdminTopicStats, api.TopicRequest{Topic: "topic://public/default/jobs"}, &st)
		return st.Subscriptions[0].Backlog == 0
	})
	m := scrape(t, n)
	labels := `{namespace="default",subscription="workers",tenant="public",topic="jobs"}`
	for _, want := range []string{
		"braid_queue_backlog_messages" + labels + " 0",
		"braid_queue_inflight_messages" + labels + " 0",
		"braid_queue_consumers" + labels + " 1",
		"braid_queue_dead_lettered_total" + labels + " 1",
	} {
		if !contains(m, want) {
			t.Errorf("metrics lack %s:\n%s", want, grep(m, "braid_queue"))
		}
	}
}

func TestReadFetchAndOffsets(t *testing.T) {
	n, nc := startNode(t, t.TempDir())
	defer stopNode(t, n, nc)
	mustAdmin(t, nc, api.AdminTopicCreate, api.TopicCreateRequest{Topic: "topic://public/default/log", Segments: 1, Buckets: 1}, nil)
	before := time.Now().UnixMilli()
	for i := range 5 {
		hdr := nats.Header{}
		hdr.Set(api.HeaderTime, fmt.Sprint(before+int64(i)*1000))
		if _, _, e := request(t, nc, api.TopicSubject(api.ProducePrefix, "public", "default", "log"), []byte(fmt.Sprint(i)), hdr); e != nil {
			t.Fatal(e)
		}
	}
	subj := func(verb string) string { return api.ReadSubject(verb, "public", "default", "log") }
	data, e := jsonReq(t, nc, subj(api.ReadOffsets), api.OffsetsRequest{Time: before + 2500})
	if e != nil {
		t.Fatal(e)
	}
	var offs api.OffsetsReply
	if err := json.Unmarshal(data, &offs); err != nil || len(offs.Units) != 1 || offs.Units[0].TimeOffset != 3 || offs.Units[0].Next != 5 {
		t.Fatalf("offsets %+v (%v)", offs, err)
	}
	data, e = jsonReq(t, nc, subj(api.ReadFetch), api.ReadRequest{Units: []api.ReadUnit{{Segment: 0, Offset: 1}, {Segment: 9}}, Max: 2})
	if e != nil {
		t.Fatal(e)
	}
	r, err := api.DecodeReadReply(data)
	if err != nil || len(r.Messages) != 2 || r.Messages[0].Offset != 1 || r.Units[1].Code != api.CodeSegmentNotFound.Number || r.Units[0].Sealed {
		t.Fatalf("read %+v (%v)", r, err)
	}
	// A read at the end waits for the next append.
	done := make(chan api.ReadReply, 1)
	go func() {
		b, _ := json.Marshal(api.ReadRequest{Units: []api.ReadUnit{{Segment: 0, Offset: 5}}, Wait: "5s"})
		m, err := nc.Request(subj(api.ReadFetch), b, 10*time.Second)
		if err == nil {
			r, _ := api.DecodeReadReply(m.Data)
			done <- r
		}
		close(done)
	}()
	produce(t, nc, "log", "", []byte("late"))
	if r := <-done; len(r.Messages) != 1 || string(r.Messages[0].Payload) != "late" {
		t.Fatalf("parked read got %+v", r)
	}
	// Split, then delete the sealed parent: its units are gone.
	mustAdmin(t, nc, api.AdminTopicSplit, map[string]any{"topic": "topic://public/default/log", "segment": 0}, nil)
	_, err = n.Topics().Change(context.Background(), "topic://public/default/log", topology.Delete(0))
	if err != nil {
		t.Fatal(err)
	}
	data, e = jsonReq(t, nc, subj(api.ReadFetch), api.ReadRequest{Units: []api.ReadUnit{{Segment: 0, Offset: 0}, {Segment: 1}}})
	if e != nil {
		t.Fatal(e)
	}
	if r, _ := api.DecodeReadReply(data); r.Units[0].Code != api.CodeSegmentGone.Number || r.Units[1].Code != 0 {
		t.Fatalf("after delete: %+v", r.Units)
	}
}
