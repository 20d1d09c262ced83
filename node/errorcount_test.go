package node

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/braidmq/braid/internal/poll"

	"github.com/braidmq/braid/api"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// serviceStats asks service name for its stats ($SRV.STATS.<name>, as
// `nats micro stats` does) and returns them by endpoint name.
func serviceStats(t *testing.T, nc *nats.Conn, name string) map[string]*micro.EndpointStats {
	t.Helper()
	m, err := nc.Request(micro.APIPrefix+".STATS."+name, nil, 5*time.Second)
	if err != nil {
		t.Fatalf("stats of %s: %v", name, err)
	}
	var st micro.Stats
	if err := json.Unmarshal(m.Data, &st); err != nil {
		t.Fatalf("stats of %s: %q: %v", name, m.Data, err)
	}
	if st.Name != name || st.Type != micro.StatsResponseType {
		t.Fatalf("stats of %s: got %s %s", name, st.Name, st.Type)
	}
	out := map[string]*micro.EndpointStats{}
	for _, e := range st.Endpoints {
		out[e.Name] = e
	}
	return out
}

// wantEndpoint checks the request and error counts of an endpoint of
// service, and that its last error names code when it has errors. It
// polls: nats.go's micro services count a request once its handler
// returned, which may be after the client got the reply.
func wantEndpoint(t *testing.T, nc *nats.Conn, service, endpoint string, requests, errs int, code api.Code) {
	t.Helper()
	var e *micro.EndpointStats
	if !poll.Until(5*time.Second, func() bool {
		if e = serviceStats(t, nc, service)[endpoint]; e == nil {
			t.Fatalf("%s has no endpoint %s", service, endpoint)
		}
		return e.NumRequests == requests && e.NumErrors == errs && (errs == 0 || strings.Contains(e.LastError, code.Symbol))
	}) {
		t.Fatalf("%s %s: num_requests %d num_errors %d last_error %q, want %d, %d and %s",
			service, endpoint, e.NumRequests, e.NumErrors, e.LastError, requests, errs, code.Symbol)
	}
}

// wantRefused sends a request and checks that it is refused with code.
func wantRefused(t *testing.T, nc *nats.Conn, subject string, body []byte, hdr nats.Header, code api.Code) {
	t.Helper()
	if _, _, e := request(t, nc, subject, body, hdr); e == nil || e.Code != code {
		t.Fatalf("%s: %v, want %s", subject, e, code.Symbol)
	}
}

// TestServicesCountTheirErrorReplies: the error replies of the Braid
// services are counted in the stats of the endpoint that served them
// (num_errors, last_error), as `nats micro stats` shows them: admin errors
// (answered after the handler returned), refusals of a topic named by the
// subject, and produce refusals on either front-end.
func TestServicesCountTheirErrorReplies(t *testing.T) {
	forEachFrontEnd(t, func(t *testing.T, n *Node, nc *nats.Conn) {
		mustAdmin(t, nc, api.AdminTopicCreate, api.TopicCreateRequest{Topic: "topic://public/default/counted", Segments: 1}, nil)

		for range 3 {
			if e := admin(t, nc, api.AdminTopicDescribe, api.TopicRequest{Topic: "topic://public/default/nope"}, nil); e == nil || e.Code != api.CodeTopicNotFound {
				t.Fatalf("describe of a missing topic: %v", e)
			}
		}
		for range 2 {
			if e := admin(t, nc, api.AdminTenantCreate, api.TenantCreateRequest{Tenant: "a b"}, nil); e == nil || e.Code != api.CodeInvalidName {
				t.Fatalf("tenant with a bad name: %v", e)
			}
		}
		mustAdmin(t, nc, api.AdminTenantList, map[string]any{}, nil)
		wantEndpoint(t, nc, "braid-admin", "topic-describe", 3, 3, api.CodeTopicNotFound)
		wantEndpoint(t, nc, "braid-admin", "tenant-create", 2, 2, api.CodeInvalidName)
		wantEndpoint(t, nc, "braid-admin", "tenant-list", 1, 0, api.Code{})

		join, _ := json.Marshal(api.JoinRequest{Subscription: "s", Consumer: "c"})
		wantRefused(t, nc, api.ConsumeSubject(api.ConsumeJoin, "public", "default", "nope"), join, nil, api.CodeTopicNotFound)
		wantEndpoint(t, nc, "braid-consume", api.ConsumeJoin, 1, 1, api.CodeTopicNotFound)
		qjoin, _ := json.Marshal(api.QueueJoinRequest{Subscription: "q", Consumer: "c"})
		wantRefused(t, nc, api.QueueSubject(api.QueueJoin, "public", "default", "nope"), qjoin, nil, api.CodeTopicNotFound)
		wantEndpoint(t, nc, "braid-queue", api.QueueJoin, 1, 1, api.CodeTopicNotFound)

		one := api.TopicSubject(api.ProducePrefix, "public", "default", "counted")
		produce(t, nc, "counted", "k", []byte("ok"))
		wantRefused(t, nc, api.TopicSubject(api.ProducePrefix, "public", "default", "nope"), []byte("x"), nil, api.CodeTopicNotFound)
		wantRefused(t, nc, one, bytes.Repeat([]byte("x"), 1<<20+1), nil, api.CodePayloadTooLarge)
		wantRefused(t, nc, api.TopicSubject(api.ProduceBatchPrefix, "public", "default", "counted"), []byte{1, 9, 9}, nil, api.CodeBadRequest)
		wantEndpoint(t, nc, "braid-produce", "produce", 3, 2, api.CodePayloadTooLarge)
		wantEndpoint(t, nc, "braid-produce", "produce-batch", 1, 1, api.CodeBadRequest)
	})
}

// TestUnknownAdminEndpointTakesOnlyUnknownOperations: the catch-all admin
// endpoint "unknown" (braid.v1.admin.>) counts only the requests it
// answers, those of unknown operations, with NOT_FOUND; the others are
// counted by the endpoint that serves them alone.
func TestUnknownAdminEndpointTakesOnlyUnknownOperations(t *testing.T) {
	n, nc := startNode(t, t.TempDir())
	defer stopNode(t, n, nc)
	const known = 5
	for range known {
		mustAdmin(t, nc, api.AdminTenantList, map[string]any{}, nil)
	}
	wantEndpoint(t, nc, "braid-admin", "unknown", 0, 0, api.Code{})
	wantEndpoint(t, nc, "braid-admin", "tenant-list", known, 0, api.Code{})
	if u := serviceStats(t, nc, "braid-admin")["unknown"]; u.Subject != api.AdminPrefix+".>" || u.QueueGroup != "braid-admin-unknown" {
		t.Fatalf("unknown endpoint %+v", u)
	}

	for _, op := range []string{"topic.explode", "nothing", "topic.list.more"} {
		e := admin(t, nc, op, map[string]any{}, nil)
		if e == nil || e.Code != api.CodeNotFound || e.Code.Number != 404 {
			t.Fatalf("unknown operation %s: %v, want NOT_FOUND (404)", op, e)
		}
	}
	wantEndpoint(t, nc, "braid-admin", "unknown", 3, 3, api.CodeNotFound)
	wantEndpoint(t, nc, "braid-admin", "tenant-list", known, 0, api.Code{})
}

// TestProduceRefusalsAreCountedByCode: braid_produce_errors_total counts
// every refusal of the produce endpoints under its code, once, on either
// front-end: produce, produce-batch and produce-multi requests refused
// whole count one each, a batch's (or a multi part's) refused records one
// each, a multi part refused whole one, and a refused request without a
// reply subject one too.
func TestProduceRefusalsAreCountedByCode(t *testing.T) {
	forEachFrontEnd(t, func(t *testing.T, n *Node, nc *nats.Conn) {
		const uri = "topic://public/default/refusals"
		var d api.TopicDescription
		mustAdmin(t, nc, api.AdminTopicCreate, map[string]any{"topic": uri, "segments": 2}, &d)
		old := d.Epoch
		mustAdmin(t, nc, api.AdminTopicSplit, map[string]any{"topic": uri, "segment": 0}, &d)
		moved := ""
		for i := 0; moved == ""; i++ {
			if k := "k" + strconv.Itoa(i); produce(t, nc, "refusals", k, []byte("probe")).Segment != 1 {
				moved = k // its segment, 0, was split since epoch old
			}
		}
		subject := func(prefix, topic string) string { return api.TopicSubject(prefix, "public", "default", topic) }
		staleEpoch := nats.Header{}
		staleEpoch.Set(api.HeaderEpoch, strconv.FormatUint(old, 10))
		staleEpoch.Set(api.HeaderKey, moved)
		badTime := nats.Header{}
		badTime.Set(api.HeaderTime, "yesterday")
		big := bytes.Repeat([]byte("x"), 1<<20+1)

		// produce
		wantRefused(t, nc, subject(api.ProducePrefix, "nope"), []byte("x"), nil, api.CodeTopicNotFound)
		wantRefused(t, nc, "braid.v1.produce.public.default.bad!name", []byte("x"), nil, api.CodeInvalidName)
		wantRefused(t, nc, subject(api.ProducePrefix, "refusals"), big, nil, api.CodePayloadTooLarge)
		wantRefused(t, nc, subject(api.ProducePrefix, "refusals"), []byte("x"), badTime, api.CodeBadRequest)
		wantRefused(t, nc, subject(api.ProducePrefix, "refusals"), []byte("x"), staleEpoch, api.CodeSegmentSealed)
		// produce-batch
		batch := func(recs ...api.Record) []byte { return api.AppendRecords(nil, recs) }
		wantRefused(t, nc, subject(api.ProduceBatchPrefix, "nope"), batch(api.Record{Payload: []byte("x")}), nil, api.CodeTopicNotFound)
		wantRefused(t, nc, subject(api.ProduceBatchPrefix, "refusals"), batch(api.Record{Payload: []byte("x")}, api.Record{Payload: big}), nil, api.CodePayloadTooLarge)
		wantRefused(t, nc, subject(api.ProduceBatchPrefix, "refusals"), []byte{1, 9, 9}, nil, api.CodeBadRequest)
		hdr := nats.Header{}
		hdr.Set(api.HeaderEpoch, strconv.FormatUint(old, 10))
		data, _, e := request(t, nc, subject(api.ProduceBatchPrefix, "refusals"),
			batch(api.Record{Key: []byte(moved), Payload: []byte("a")}, api.Record{Key: []byte(moved), Payload: []byte("b")}), hdr)
		if res, err := api.DecodeResults(data); e != nil || err != nil || len(res) != 2 || res[0].Err() == nil || res[1].Err() == nil {
			t.Fatalf("batch routed by a stale epoch: %v %v %v, want two SEGMENT_SEALED results", res, e, err)
		}
		// produce-multi
		multi := api.AppendMultiHeader(nil, 3)
		multi = api.AppendMultiPart(multi, "default", "nope", 0, batch(api.Record{Payload: []byte("x")}))
		multi = api.AppendMultiPart(multi, "default", "refusals", 0, []byte{1, 9})
		multi = api.AppendMultiPart(multi, "default", "refusals", 0, batch(api.Record{Payload: []byte("ok")}))
		data, _, e = request(t, nc, api.ProduceMultiPrefix+".public", multi, nil)
		if replies, err := api.DecodeMultiReplies(data); e != nil || err != nil || len(replies) != 3 || replies[2].Err != nil {
			t.Fatalf("multi: %+v %v %v", replies, e, err)
		}
		wantRefused(t, nc, api.ProduceMultiPrefix+".public", []byte{7}, nil, api.CodeBadRequest)
		// Without a reply subject: refused all the same.
		if err := nc.Publish(subject(api.ProducePrefix, "nope"), []byte("x")); err != nil {
			t.Fatal(err)
		}

		want := map[api.Code]int{api.CodeTopicNotFound: 4, api.CodeInvalidName: 1, api.CodePayloadTooLarge: 2,
			api.CodeBadRequest: 4, api.CodeSegmentSealed: 3}
		var got map[api.Code]int
		// The request without a reply subject is counted when served.
		if !poll.Until(5*time.Second, func() bool {
			got = produceErrors(t, n, want)
			return fmt.Sprint(got) == fmt.Sprint(want)
		}) {
			t.Fatalf("braid_produce_errors_total by code: %v, want %v\n%s", got, want, grep(scrape(t, n), "braid_produce_errors_total"))
		}
	})
}

// produceErrors reads braid_produce_errors_total for the codes of want.
func produceErrors(t *testing.T, n *Node, want map[api.Code]int) map[api.Code]int {
	t.Helper()
	metrics := scrape(t, n)
	got := map[api.Code]int{}
	for code := range want {
		re := regexp.MustCompile(`(?m)^braid_produce_errors_total\{code="` + code.Symbol + `"\} (\S+)$`)
		if m := re.FindStringSubmatch(metrics); m != nil {
			v, err := strconv.ParseFloat(m[1], 64)
			if err != nil {
				t.Fatal(err)
			}
			got[code] = int(v)
		} else {
			got[code] = 0
		}
	}
	return got
}
