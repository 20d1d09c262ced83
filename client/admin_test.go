package client

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/braidmq/braid/api"
)

// TestAdminRequestsAndErrors checks each admin method against a responder
// that records the request body and answers from a table: the subject and
// JSON the contract fixes, the reply decoded, the error headers turned into
// *api.Error.
func TestAdminRequestsAndErrors(t *testing.T) {
	s := startNATS(t)
	srv, nc := connect(t, s.ClientURL()), connect(t, s.ClientURL())
	var mu sync.Mutex
	bodies := map[string]string{}
	replies := map[string]any{
		api.AdminTenantList:    api.NameListReply{Names: []string{"public"}},
		api.AdminNamespaceList: api.NameListReply{Names: []string{"default"}},
		api.AdminTopicCreate:   api.TopicDescription{Topic: "topic://a/b/c", Epoch: 1},
		api.AdminTopicDescribe: api.TopicDescription{Topic: "topic://a/b/c", Epoch: 2},
		api.AdminTopicList:     api.TopicListReply{Topics: []string{"topic://a/b/c"}},
		api.AdminTopicSplit:    api.TopicDescription{Epoch: 3},
		api.AdminTopicMerge:    api.TopicDescription{Epoch: 4},
		api.AdminTopicRebucket: api.TopicDescription{Epoch: 5},
		api.AdminTopicStats:    api.TopicStats{Topic: "topic://a/b/c", Messages: 9},
	}
	if _, err := srv.Subscribe(api.AdminPrefix+".>", func(m *nats.Msg) {
		op := m.Subject[len(api.AdminPrefix)+1:]
		mu.Lock()
		bodies[op] = string(m.Data)
		mu.Unlock()
		if op == api.AdminTenantCreate {
			replyErr(m, api.Errorf(api.CodeAlreadyExists, "tenant exists"))
			return
		}
		if r, ok := replies[op]; ok {
			replyJSON(m, r)
			return
		}
		replyJSON(m, api.OKReply{OK: true})
	}); err != nil {
		t.Fatal(err)
	}
	_ = srv.Flush()

	a := NewAdmin(nc, WithRequestTimeout(2*time.Second))
	ctx := t.Context()
	at := uint64(0x8000)
	err := a.CreateTenant(ctx, "acme")
	var apiErr *api.Error
	if !errors.Is(err, api.ErrAlreadyExists) || !errors.As(err, &apiErr) || apiErr.Message != "tenant exists" {
		t.Fatalf("CreateTenant = %v, want ALREADY_EXISTS with its message", err)
	}
	check := func(what string, err error, ok bool) {
		t.Helper()
		if err != nil || !ok {
			t.Fatalf("%s: err=%v ok=%v", what, err, ok)
		}
	}
	names, err := a.ListTenants(ctx)
	check("ListTenants", err, len(names) == 1)
	names, err = a.ListNamespaces(ctx, "acme")
	check("ListNamespaces", err, len(names) == 1)
	check("CreateNamespace", a.CreateNamespace(ctx, "acme/orders", nil, 4), true)
	d, err := a.CreateTopic(ctx, "topic://a/b/c", 4, WithTopicBuckets(8))
	check("CreateTopic", err, d.Epoch == 1)
	d, err = a.DescribeTopic(ctx, "topic://a/b/c")
	check("DescribeTopic", err, d.Epoch == 2)
	topics, err := a.ListTopics(ctx, "a/b")
	check("ListTopics", err, len(topics) == 1)
	d, err = a.Split(ctx, "topic://a/b/c", 0, &at)
	check("Split", err, d.Epoch == 3)
	d, err = a.Merge(ctx, "topic://a/b/c", 1, 2)
	check("Merge", err, d.Epoch == 4)
	d, err = a.Rebucket(ctx, "topic://a/b/c", 3, 8)
	check("Rebucket", err, d.Epoch == 5)
	check("DeleteTopic", a.DeleteTopic(ctx, "topic://a/b/c"), true)
	st, err := a.Stats(ctx, "topic://a/b/c")
	check("Stats", err, st.Messages == 9)

	want := map[string]string{
		api.AdminTenantCreate:    `{"tenant":"acme"}`,
		api.AdminNamespaceCreate: `{"namespace":"acme/orders","topic_buckets":4}`,
		api.AdminTopicCreate:     `{"topic":"topic://a/b/c","segments":4,"buckets":8}`,
		api.AdminTopicSplit:      `{"topic":"topic://a/b/c","segment":0,"at":"0x0000000000008000"}`,
		api.AdminTopicMerge:      `{"topic":"topic://a/b/c","segments":[1,2]}`,
		api.AdminTopicRebucket:   `{"topic":"topic://a/b/c","segment":3,"buckets":8}`,
		api.AdminTopicList:       `{"namespace":"a/b"}`,
		api.AdminTopicDelete:     `{"topic":"topic://a/b/c"}`,
	}
	mu.Lock()
	defer mu.Unlock()
	for op, body := range want {
		var got, exp any
		_ = json.Unmarshal([]byte(bodies[op]), &got)
		_ = json.Unmarshal([]byte(body), &exp)
		gb, _ := json.Marshal(got)
		eb, _ := json.Marshal(exp)
		if string(gb) != string(eb) {
			t.Errorf("%s sent %s, want %s", op, bodies[op], body)
		}
	}
}

func TestAdminNoServerAndContext(t *testing.T) {
	s := startNATS(t)
	nc := connect(t, s.ClientURL())
	a := NewAdmin(nc)
	if err := a.CreateTenant(t.Context(), "x"); !errors.Is(err, ErrNoServer) || !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("no server: %v, want ErrNoServer", err)
	}
	// A server that never answers: the context's deadline ends the call.
	srv := connect(t, s.ClientURL())
	if _, err := srv.Subscribe(api.AdminPrefix+".>", func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	_ = srv.Flush()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	if _, err := a.DescribeTopic(ctx, "topic://a/b/c"); !errors.Is(err, ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("silent server: %v, want ErrTimeout", err)
	}
	cctx, ccancel := context.WithCancel(t.Context())
	ccancel()
	if _, err := a.DescribeTopic(cctx, "topic://a/b/c"); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v, want context.Canceled", err)
	}
}
