package client

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/braidmq/braid/api"
)

func TestAdminPolicies(t *testing.T) {
	s := startNATS(t)
	srv, nc := connect(t, s.ClientURL()), connect(t, s.ClientURL())
	bodies := make(chan string, 4)
	window := "2s"
	if _, err := srv.Subscribe(api.AdminPrefix+".>", func(m *nats.Msg) {
		bodies <- m.Subject[len(api.AdminPrefix)+1:] + " " + string(m.Data)
		replyJSON(m, api.PoliciesReply{Effective: api.Policies{SplitWindow: &window}})
	}); err != nil {
		t.Fatal(err)
	}
	_ = srv.Flush()
	a := NewAdmin(nc, WithRequestTimeout(2*time.Second))
	ctx := t.Context()
	depth := 3
	r, err := a.SetTopicPolicies(ctx, "topic://a/b/c", &api.Policies{MaxDAGDepth: &depth}, "retention")
	if err != nil || *r.Effective.SplitWindow != "2s" {
		t.Fatalf("SetTopicPolicies: %+v, %v", r, err)
	}
	if _, err := a.TopicPolicies(ctx, "topic://a/b/c"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.SetNamespacePolicies(ctx, "a/b", nil, "max_dag_depth"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.NamespacePolicies(ctx, "a/b"); err != nil {
		t.Fatal(err)
	}
	want := []string{
		`topic.policies {"topic":"topic://a/b/c","policies":{"max_dag_depth":3},"unset":["retention"]}`,
		`topic.policies {"topic":"topic://a/b/c"}`,
		`namespace.policies {"namespace":"a/b","unset":["max_dag_depth"]}`,
		`namespace.policies {"namespace":"a/b"}`,
	}
	for _, w := range want {
		if got := <-bodies; got != w {
			t.Errorf("request %s, want %s", got, w)
		}
	}
}
