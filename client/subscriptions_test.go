package client

import (
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/braidmq/braid/api"
)

// TestAdminSubscriptions checks the subscription methods against a
// responder: the subjects and JSON bodies the contract fixes (each seek
// target its own field), the replies decoded, refusals as *api.Error.
func TestAdminSubscriptions(t *testing.T) {
	s := startNATS(t)
	srv, nc := connect(t, s.ClientURL()), connect(t, s.ClientURL())
	var mu sync.Mutex
	bodies := map[string][]string{}
	if _, err := srv.Subscribe(api.AdminPrefix+".>", func(m *nats.Msg) {
		op := m.Subject[len(api.AdminPrefix)+1:]
		mu.Lock()
		bodies[op] = append(bodies[op], string(m.Data))
		mu.Unlock()
		var req struct {
			Subscription string `json:"subscription"`
		}
		_ = json.Unmarshal(m.Data, &req)
		switch {
		case req.Subscription == "busy":
			replyErr(m, api.Errorf(api.CodeInvalidArgument, "1 consumers attached (c1); stop them, or use force"))
		case op == api.AdminSubscriptionList:
			replyJSON(m, api.SubscriptionListReply{Topic: "topic://a/b/c", Subscriptions: []api.SubscriptionInfo{
				{Name: "s1", Kind: api.SubscriptionStream, Backlog: 7, Units: []api.SubscriptionUnit{{Segment: 0, Bucket: 1, Acked: 3, Next: 10, Lag: 7}}},
			}})
		case op == api.AdminSubscriptionDelete:
			replyJSON(m, api.SubscriptionDeleteReply{OK: true, Kind: api.SubscriptionStream, Detached: []string{"c1"}})
		case op == api.AdminSubscriptionSeek:
			replyJSON(m, api.SubscriptionSeekReply{SubscriptionInfo: api.SubscriptionInfo{Name: req.Subscription, Backlog: 4}, Detached: []string{}})
		}
	}); err != nil {
		t.Fatal(err)
	}
	_ = srv.Flush()

	a := NewAdmin(nc, WithRequestTimeout(2*time.Second))
	ctx := t.Context()
	subs, err := a.ListSubscriptions(ctx, "topic://a/b/c")
	if err != nil || len(subs) != 1 || subs[0].Name != "s1" || subs[0].Units[0].Lag != 7 {
		t.Fatalf("ListSubscriptions = %+v, %v", subs, err)
	}
	detached, err := a.DeleteSubscription(ctx, "topic://a/b/c", "s1", true)
	if err != nil || !slices.Equal(detached, []string{"c1"}) {
		t.Fatalf("DeleteSubscription = %v, %v", detached, err)
	}
	if _, err := a.DeleteSubscription(ctx, "topic://a/b/c", "busy", false); !errors.Is(err, api.ErrInvalidArgument) {
		t.Fatalf("DeleteSubscription of a busy subscription: %v, want INVALID_ARGUMENT", err)
	}
	for _, target := range []SeekTarget{SeekEarliest(), SeekLatest(), SeekTime(time.UnixMilli(1700000000123)),
		SeekMessage(MessageID{Segment: 2, Bucket: 1, Offset: 9})} {
		r, err := a.SeekSubscription(ctx, "topic://a/b/c", "s1", target, false)
		if err != nil || r.Name != "s1" || r.Backlog != 4 {
			t.Fatalf("SeekSubscription(%+v) = %+v, %v", target, r, err)
		}
	}
	if _, err := a.SeekSubscription(ctx, "topic://a/b/c", "busy", SeekEarliest(), true); !errors.Is(err, api.ErrInvalidArgument) {
		t.Fatalf("SeekSubscription of a busy subscription: %v", err)
	}

	mu.Lock()
	defer mu.Unlock()
	want := map[string][]string{
		api.AdminSubscriptionList: {`{"topic":"topic://a/b/c"}`},
		api.AdminSubscriptionDelete: {`{"topic":"topic://a/b/c","subscription":"s1","force":true}`,
			`{"topic":"topic://a/b/c","subscription":"busy"}`},
		api.AdminSubscriptionSeek: {
			`{"topic":"topic://a/b/c","subscription":"s1","to":"earliest"}`,
			`{"topic":"topic://a/b/c","subscription":"s1","to":"latest"}`,
			`{"topic":"topic://a/b/c","subscription":"s1","time":1700000000123}`,
			`{"topic":"topic://a/b/c","subscription":"s1","message":{"segment":2,"bucket":1,"offset":9}}`,
			`{"topic":"topic://a/b/c","subscription":"busy","to":"earliest","force":true}`,
		},
	}
	for op, exp := range want {
		if !slices.Equal(bodies[op], exp) {
			t.Errorf("%s sent\n%q\nwant\n%q", op, bodies[op], exp)
		}
	}
}
