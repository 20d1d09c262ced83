package node

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/nats-io/nats.go"
)

// TestEveryBadRequestIsRefusedAndChangesNothing walks the refusals of the
// wire contract: each gets its stable code, and afterwards the topic's
// layout and messages are exactly what they were.
func TestEveryBadRequestIsRefusedAndChangesNothing(t *testing.T) {
	n, nc := startNode(t, t.TempDir())
	defer stopNode(t, n, nc)

	const uri = "topic://public/default/orders"
	mustAdmin(t, nc, api.AdminTopicCreate, api.TopicCreateRequest{Topic: uri, Segments: 2}, nil)
	produce(t, nc, "orders", "k1", []byte("first"))
	var split api.TopicDescription
	mustAdmin(t, nc, api.AdminTopicSplit, map[string]any{"topic": uri, "segment": 0}, &split)
	produce(t, nc, "orders", "k2", []byte("second"))
	mustAdmin(t, nc, api.AdminTopicCreate, map[string]any{"topic": "topic://public/default/other", "segments": 1}, nil)

	var before api.TopicDescription
	mustAdmin(t, nc, api.AdminTopicDescribe, api.TopicRequest{Topic: uri}, &before)
	var statsBefore api.TopicStats
	mustAdmin(t, nc, api.AdminTopicStats, api.TopicRequest{Topic: uri}, &statsBefore)

	produceSubj := api.TopicSubject(api.ProducePrefix, "public", "default", "orders")
	badTime := nats.Header{}
	badTime.Set(api.HeaderTime, "yesterday")
	badEpoch := nats.Header{}
	badEpoch.Set(api.HeaderEpoch, "-3")
	zeroEpoch := nats.Header{}
	zeroEpoch.Set(api.HeaderEpoch, "0")
	admin := func(op, body string) (string, []byte, nats.Header) { return api.AdminSubject(op), []byte(body), nil }
	cases := []struct {
		name    string
		subject string
		body    []byte
		hdr     nats.Header
		want    api.Code
	}{
		{"produce to unknown topic", api.TopicSubject(api.ProducePrefix, "public", "default", "nope"), []byte("x"), nil, api.CodeTopicNotFound},
		{"produce to bad topic name", "braid.v1.produce.public.default.bad!name", []byte("x"), nil, api.CodeInvalidName},
		{"produce oversized payload", produceSubj, bytes.Repeat([]byte("x"), 1<<20+1), nil, api.CodePayloadTooLarge},
		{"produce bad time header", produceSubj, []byte("x"), badTime, api.CodeBadRequest},
		{"produce bad epoch header", produceSubj, []byte("x"), badEpoch, api.CodeBadRequest},
		{"produce-batch zero epoch header", api.TopicSubject(api.ProduceBatchPrefix, "public", "default", "orders"),
			api.AppendRecords(nil, []api.Record{{Key: []byte("a"), Payload: []byte("ok")}}), zeroEpoch, api.CodeBadRequest},
		{"produce-batch malformed", api.TopicSubject(api.ProduceBatchPrefix, "public", "default", "orders"), []byte{1, 9, 9}, nil, api.CodeBadRequest},
		{"produce-batch empty", api.TopicSubject(api.ProduceBatchPrefix, "public", "default", "orders"), api.AppendRecords(nil, nil), nil, api.CodeBadRequest},
		{"produce-batch one oversized", api.TopicSubject(api.ProduceBatchPrefix, "public", "default", "orders"),
			api.AppendRecords(nil, []api.Record{{Key: []byte("a"), Payload: []byte("ok")}, {Payload: bytes.Repeat([]byte("x"), 1<<20+1)}}), nil, api.CodePayloadTooLarge},
	}
	add := func(name, op, body string, want api.Code) {
		s, b, h := admin(op, body)
		cases = append(cases, struct {
			name    string
			subject string
			body    []byte
			hdr     nats.Header
			want    api.Code
		}{name, s, b, h, want})
	}
	add("create malformed JSON", api.AdminTopicCreate, `{"topic":`, api.CodeBadRequest)
	add("create empty body", api.AdminTopicCreate, ``, api.CodeBadRequest)
	add("create unknown field", api.AdminTopicCreate, `{"topic":"topic://public/default/x","segmentz":2}`, api.CodeBadRequest)
	add("create wrong type", api.AdminTopicCreate, `{"topic":"topic://public/default/x","segments":"two"}`, api.CodeBadRequest)
	add("create bad name", api.AdminTopicCreate, `{"topic":"topic://public/default/c.d"}`, api.CodeInvalidName)
	add("create bad scheme", api.AdminTopicCreate, `{"topic":"kafka://public/default/x"}`, api.CodeInvalidName)
	add("create persistent with segments", api.AdminTopicCreate, `{"topic":"persistent://public/default/x","segments":2}`, api.CodeInvalidArgument)
	add("create persistent, too many partitions", api.AdminTopicCreate, `{"topic":"persistent://public/default/x","partitions":5000}`, api.CodeInvalidArgument)
	add("create scalable with partitions", api.AdminTopicCreate, `{"topic":"topic://public/default/x","partitions":2}`, api.CodeInvalidArgument)
	add("partitions of a scalable topic", api.AdminTopicPartitions, `{"topic":"`+uri+`","partitions":4}`, api.CodeLayoutRefused)
	add("partitions 0", api.AdminTopicPartitions, `{"topic":"`+uri+`","partitions":0}`, api.CodeInvalidArgument)
	add("migrate a scalable topic", api.AdminTopicMigrate, `{"topic":"`+uri+`"}`, api.CodeInvalidArgument)
	add("migrate one that does not exist", api.AdminTopicMigrate, `{"topic":"persistent://public/default/none"}`, api.CodeTopicNotFound)
	add("migrate, bad buckets", api.AdminTopicMigrate, `{"topic":"persistent://public/default/none","buckets":-1}`, api.CodeInvalidArgument)
	add("create in unknown namespace", api.AdminTopicCreate, `{"topic":"topic://public/nope/x"}`, api.CodeNamespaceMissing)
	add("create existing", api.AdminTopicCreate, `{"topic":"`+uri+`"}`, api.CodeAlreadyExists)
	add("create negative segments", api.AdminTopicCreate, `{"topic":"topic://public/default/x","segments":-1}`, api.CodeInvalidArgument)
	add("create too many segments", api.AdminTopicCreate, `{"topic":"topic://public/default/x","segments":5000}`, api.CodeInvalidArgument)
	add("create bad policy", api.AdminTopicCreate, `{"topic":"topic://public/default/x","policies":{"split_window":"soon"}}`, api.CodeInvalidPolicy)
	add("split sealed segment", api.AdminTopicSplit, `{"topic":"`+uri+`","segment":0}`, api.CodeLayoutRefused)
	add("split unknown segment", api.AdminTopicSplit, `{"topic":"`+uri+`","segment":99}`, api.CodeSegmentNotFound)
	add("split without segment", api.AdminTopicSplit, `{"topic":"`+uri+`"}`, api.CodeBadRequest)
	add("split at outside range", api.AdminTopicSplit, `{"topic":"`+uri+`","segment":1,"at":"0x0000000000000001"}`, api.CodeInvalidArgument)
	add("split at malformed", api.AdminTopicSplit, `{"topic":"`+uri+`","segment":1,"at":"0xZZ"}`, api.CodeInvalidArgument)
	add("split unknown topic", api.AdminTopicSplit, `{"topic":"topic://public/default/nope","segment":0}`, api.CodeTopicNotFound)
	add("merge non-adjacent", api.AdminTopicMerge, `{"topic":"`+uri+`","segments":[2,1]}`, api.CodeLayoutRefused)
	add("merge sealed", api.AdminTopicMerge, `{"topic":"`+uri+`","segments":[0,1]}`, api.CodeLayoutRefused)
	add("merge one segment", api.AdminTopicMerge, `{"topic":"`+uri+`","segments":[1]}`, api.CodeInvalidArgument)
	add("merge with itself", api.AdminTopicMerge, `{"topic":"`+uri+`","segments":[1,1]}`, api.CodeLayoutRefused)
	add("rebucket zero", api.AdminTopicRebucket, `{"topic":"`+uri+`","segment":1,"buckets":0}`, api.CodeInvalidArgument)
	add("rebucket same count", api.AdminTopicRebucket, `{"topic":"`+uri+`","segment":1,"buckets":2}`, api.CodeInvalidArgument)
	add("describe unknown", api.AdminTopicDescribe, `{"topic":"topic://public/default/nope"}`, api.CodeTopicNotFound)
	add("delete unknown", api.AdminTopicDelete, `{"topic":"topic://public/default/nope"}`, api.CodeTopicNotFound)
	add("list bad namespace", api.AdminTopicList, `{"namespace":"public"}`, api.CodeInvalidName)
	add("list unknown namespace", api.AdminTopicList, `{"namespace":"public/nope"}`, api.CodeNamespaceMissing)
	add("namespace of unknown tenant", api.AdminNamespaceCreate, `{"namespace":"ghost/ns"}`, api.CodeTenantNotFound)
	add("namespace exists", api.AdminNamespaceCreate, `{"namespace":"public/default"}`, api.CodeAlreadyExists)
	add("tenant bad name", api.AdminTenantCreate, `{"tenant":"a b"}`, api.CodeInvalidName)
	add("tenant exists", api.AdminTenantCreate, `{"tenant":"public"}`, api.CodeAlreadyExists)
	add("unknown admin op", "topic.explode", `{}`, api.CodeNotFound)
	consume := func(verb string) string { return api.ConsumeSubject(verb, "public", "default", "orders") }
	for _, c := range []struct {
		name, verb, body string
		want             api.Code
	}{
		{"fetch unknown consumer", api.ConsumeFetch, `{"subscription":"s","consumer":"ghost","wait":"0s"}`, api.CodeConsumerUnknown},
		{"join bad subscription", api.ConsumeJoin, `{"subscription":"s.1","consumer":"c"}`, api.CodeInvalidName},
		{"join bad start", api.ConsumeJoin, `{"subscription":"s","consumer":"c","start":"middle"}`, api.CodeInvalidArgument},
		{"fetch bad max", api.ConsumeFetch, `{"subscription":"s","consumer":"c","max":-1}`, api.CodeInvalidArgument},
		{"fetch received without resync", api.ConsumeFetch, `{"subscription":"s","consumer":"c","received":[{"segment":0,"bucket":0,"offset":3}]}`, api.CodeInvalidArgument},
		{"fetch resync negative bucket", api.ConsumeFetch, `{"subscription":"s","consumer":"c","resync":true,"received":[{"segment":0,"bucket":-1,"offset":3}]}`, api.CodeInvalidArgument},
		{"fetch malformed", api.ConsumeFetch, `not json`, api.CodeBadRequest},
	} {
		cases = append(cases, struct {
			name    string
			subject string
			body    []byte
			hdr     nats.Header
			want    api.Code
		}{c.name, consume(c.verb), []byte(c.body), nil, c.want})
	}

	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, _, e := request(t, nc, c.subject, c.body, c.hdr)
			if e == nil {
				t.Fatalf("accepted; want %s", c.want.Symbol)
			}
			if e.Code != c.want {
				t.Fatalf("got %v; want %s", e, c.want.Symbol)
			}
			if e.Message == "" {
				t.Fatalf("%s without a message", e.Code.Symbol)
			}
		})
	}

	var after api.TopicDescription
	mustAdmin(t, nc, api.AdminTopicDescribe, api.TopicRequest{Topic: uri}, &after)
	if !reflect.DeepEqual(before, after) {
		t.Fatalf("a refused request changed the layout:\nbefore %+v\nafter  %+v", before, after)
	}
	var statsAfter api.TopicStats
	mustAdmin(t, nc, api.AdminTopicStats, api.TopicRequest{Topic: uri}, &statsAfter)
	if statsAfter.Messages != statsBefore.Messages || statsAfter.Bytes != statsBefore.Bytes {
		t.Fatalf("a refused request changed the data: %d/%d messages, %d/%d bytes",
			statsBefore.Messages, statsAfter.Messages, statsBefore.Bytes, statsAfter.Bytes)
	}
}

// TestBusyPortIsReportedWithItsAddress: a node whose NATS address is taken
// says so at once, naming it, instead of waiting for a server that never
// comes up.
func TestBusyPortIsReportedWithItsAddress(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	addr := l.Addr().String()
	// "At once": Start returns instead of retrying the bind; the timeout
	// only bounds the wait for that.
	dir, started := t.TempDir(), make(chan error, 1)
	go func() {
		n, err := Start(context.Background(), Config{DataDir: dir, NATSListen: addr, MetricsListen: "off",
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err == nil {
			n.Close()
		}
		started <- err
	}()
	select {
	case err = <-started:
	case <-time.After(5 * time.Second):
		t.Fatal("Start on a busy port has not returned within 5s, want the error at once")
	}
	if err == nil {
		t.Fatal("started on a busy port")
	}
	if !strings.Contains(err.Error(), addr) || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("error %q, want the address and the cause", err)
	}
}

// TestDataDirectoryIsExclusive: a second node on a data directory in use
// fails at once, naming the holder; once the first has stopped, it starts.
func TestDataDirectoryIsExclusive(t *testing.T) {
	dir := t.TempDir()
	n, nc := startNode(t, dir)
	_, err := Start(context.Background(), Config{DataDir: dir, NATSListen: "127.0.0.1:-1", MetricsListen: "off",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err == nil || !strings.Contains(err.Error(), "in use by another braid server") || !strings.Contains(err.Error(), fmt.Sprint(os.Getpid())) {
		t.Fatalf("second node on %s: %v, want a clear refusal naming pid %d", dir, err, os.Getpid())
	}
	stopNode(t, n, nc)
	n, nc = startNode(t, dir)
	stopNode(t, n, nc)
}
