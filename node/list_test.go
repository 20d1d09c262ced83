package node

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/routing"
)

// TestTopicListPagesOverTheWire: topic.list pages through a namespace of
// many topic buckets in page order (by topic bucket, then by name), each
// topic once, each page with the namespace's count, the default limit
// takes them all, and the count follows a delete and survives a restart.
func TestTopicListPagesOverTheWire(t *testing.T) {
	dir := t.TempDir()
	n, nc := startNode(t, dir)
	mustAdmin(t, nc, api.AdminNamespaceCreate, api.NamespaceCreateRequest{Namespace: "public/wide", TopicBuckets: 4}, nil)
	var want []string
	for i := range 23 {
		uri := fmt.Sprintf("topic://public/wide/t%d", (i*7)%23) // created out of order
		mustAdmin(t, nc, api.AdminTopicCreate, api.TopicCreateRequest{Topic: uri}, nil)
		want = append(want, uri)
	}
	mustAdmin(t, nc, api.AdminTopicCreate, api.TopicCreateRequest{Topic: "topic://public/default/elsewhere"}, nil)
	// Page order: by topic bucket of the namespace's 4, then by name.
	bucket := func(uri string) int {
		name, err := routing.ParseTopic(uri)
		if err != nil {
			t.Fatal(err)
		}
		return routing.TopicBucket(name, 4)
	}
	sort.Slice(want, func(i, j int) bool {
		bi, bj := bucket(want[i]), bucket(want[j])
		return bi < bj || bi == bj && want[i] < want[j]
	})
	cursor := func(uri string) string {
		return fmt.Sprintf("%d.%s", bucket(uri), uri[strings.LastIndexByte(uri, '/')+1:])
	}

	page := func(limit int, cursor string) api.TopicListReply {
		t.Helper()
		var r api.TopicListReply
		mustAdmin(t, nc, api.AdminTopicList, api.TopicListRequest{Namespace: "public/wide", Limit: limit, Cursor: cursor}, &r)
		return r
	}
	for _, limit := range []int{10, 1, 23, 5} {
		var got []string
		cursor := ""
		for pages := 0; ; pages++ {
			if pages > len(want) {
				t.Fatalf("limit %d: paging does not end", limit)
			}
			r := page(limit, cursor)
			if r.Count != int64(len(want)) {
				t.Fatalf("limit %d: count %d, want %d", limit, r.Count, len(want))
			}
			if len(r.Topics) > limit || (r.Next != "" && len(r.Topics) != limit) {
				t.Fatalf("limit %d: a page of %d, next %q", limit, len(r.Topics), r.Next)
			}
			got = append(got, r.Topics...)
			if r.Next == "" {
				break
			}
			cursor = r.Next
		}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Fatalf("limit %d: paged %v, want %v", limit, got, want)
		}
	}
	if r := page(0, ""); len(r.Topics) != len(want) || r.Next != "" {
		t.Fatalf("default limit: %d topics, next %q", len(r.Topics), r.Next)
	}
	if r := page(api.TopicListMaxLimit, ""); len(r.Topics) != len(want) || r.Next != "" {
		t.Fatalf("the largest limit: %d topics, next %q", len(r.Topics), r.Next)
	}

	// The JSON as a nats CLI user writes and reads it.
	data, _, e := request(t, nc, api.AdminSubject(api.AdminTopicList), []byte(`{"namespace":"public/wide","limit":2}`), nil)
	if e != nil {
		t.Fatal(e)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		t.Fatal(err)
	}
	if string(raw["count"]) != "23" || string(raw["next"]) != `"`+cursor(want[1])+`"` || string(raw["topics"]) != `["`+want[0]+`","`+want[1]+`"]` {
		t.Fatalf("reply %s", data)
	}
	data, _, e = request(t, nc, api.AdminSubject(api.AdminTopicList), []byte(`{"namespace":"public/wide","limit":2,"cursor":"`+cursor(want[1])+`"}`), nil)
	if e != nil || !strings.HasPrefix(string(data), `{"topics":["`+want[2]+`","`+want[3]+`"],"next":"`+cursor(want[3])+`"`) {
		t.Fatalf("the second page: %s, %v", data, e)
	}
	data, _, e = request(t, nc, api.AdminSubject(api.AdminTopicList), []byte(`{"namespace":"public/wide","limit":2,"cursor":"`+cursor(want[len(want)-1])+`"}`), nil)
	if e != nil || string(data) != `{"topics":[],"count":23}` {
		t.Fatalf("after the last: %s, %v", data, e)
	}

	mustAdmin(t, nc, api.AdminTopicDelete, api.TopicRequest{Topic: "topic://public/wide/t3"}, nil)
	if r := page(0, ""); r.Count != 22 || len(r.Topics) != 22 {
		t.Fatalf("after a delete: %d topics, count %d", len(r.Topics), r.Count)
	}
	var empty api.TopicListReply
	mustAdmin(t, nc, api.AdminNamespaceCreate, api.NamespaceCreateRequest{Namespace: "public/empty"}, nil)
	mustAdmin(t, nc, api.AdminTopicList, api.TopicListRequest{Namespace: "public/empty"}, &empty)
	if empty.Topics == nil || len(empty.Topics) != 0 || empty.Count != 0 || empty.Next != "" {
		t.Fatalf("empty namespace: %+v", empty)
	}
	stopNode(t, n, nc)

	n, nc = startNode(t, dir)
	defer stopNode(t, n, nc)
	if r := page(0, ""); r.Count != 22 || len(r.Topics) != 22 {
		t.Fatalf("after a restart: %d topics, count %d", len(r.Topics), r.Count)
	}
}

// TestTopicListRefusesBadPages: a limit out of range and a cursor that is
// not one are INVALID_ARGUMENT; the namespace checks come as before.
func TestTopicListRefusesBadPages(t *testing.T) {
	n, nc := startNode(t, t.TempDir())
	defer stopNode(t, n, nc)
	mustAdmin(t, nc, api.AdminTopicCreate, api.TopicCreateRequest{Topic: "topic://public/default/orders"}, nil)
	for _, c := range []struct {
		body string
		want api.Code
	}{
		{`{"namespace":"public/default","limit":-1}`, api.CodeInvalidArgument},
		{`{"namespace":"public/default","limit":10001}`, api.CodeInvalidArgument},
		{`{"namespace":"public/default","cursor":"a.b"}`, api.CodeInvalidArgument},
		{`{"namespace":"public/default","cursor":"orders"}`, api.CodeInvalidArgument},
		{`{"namespace":"public/default","cursor":"1.orders"}`, api.CodeInvalidArgument}, // one topic bucket
		{`{"namespace":"public/default","cursor":"0.a b"}`, api.CodeInvalidArgument},
		{`{"namespace":"public/default","cursor":"*"}`, api.CodeInvalidArgument},
		{`{"namespace":"public/default","cursor":"` + strings.Repeat("x", 1000) + `"}`, api.CodeInvalidArgument},
		{`{"namespace":"public/default","limit":"ten"}`, api.CodeBadRequest},
		{`{"namespace":"public","limit":5}`, api.CodeInvalidName},
		{`{"namespace":"public/nope","limit":5}`, api.CodeNamespaceMissing},
	} {
		_, _, e := request(t, nc, api.AdminSubject(api.AdminTopicList), []byte(c.body), nil)
		if e == nil || e.Code != c.want {
			t.Errorf("%s: %v, want %s", c.body, e, c.want.Symbol)
		}
	}
	var r api.TopicListReply
	mustAdmin(t, nc, api.AdminTopicList, api.TopicListRequest{Namespace: "public/default", Limit: 1}, &r)
	if len(r.Topics) != 1 || r.Next != "" || r.Count != 1 {
		t.Fatalf("a good page after the refusals: %+v", r)
	}
	r = api.TopicListReply{}
	mustAdmin(t, nc, api.AdminTopicList, api.TopicListRequest{Namespace: "public/default", Cursor: "0.orders"}, &r)
	if len(r.Topics) != 0 || r.Next != "" || r.Count != 1 {
		t.Fatalf("the page after the only topic: %+v", r)
	}
}
