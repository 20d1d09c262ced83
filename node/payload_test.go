package node

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/frontend"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// max_payload_bytes may not exceed what NATS carries in one message: a
// larger policy let NATS refuse produce requests Braid would take, with
// NATS's uncoded "maximum payload exceeded". The ceiling is carried.
func TestMaxPayloadPolicyFitsNATS(t *testing.T) {
	n, nc := startNode(t, t.TempDir())
	defer stopNode(t, n, nc)
	ceiling := int(nc.MaxPayload()) - frontend.PayloadFraming
	const uri = "topic://public/default/big"
	over := map[string]any{"max_payload_bytes": ceiling + 1}
	mustAdmin(t, nc, api.AdminTopicCreate, api.TopicCreateRequest{Topic: uri}, nil)
	for _, c := range []struct {
		op   string
		body map[string]any
	}{
		{api.AdminTopicCreate, map[string]any{"topic": "topic://public/default/bigger", "policies": over}},
		{api.AdminTopicPolicies, map[string]any{"topic": uri, "policies": over}},
		{api.AdminNamespacePolicies, map[string]any{"namespace": "public/default", "policies": over}},
		{api.AdminNamespaceCreate, map[string]any{"namespace": "public/other", "policies": over}},
	} {
		e := admin(t, nc, c.op, c.body, nil)
		if e == nil || e.Code != api.CodeInvalidPolicy || !strings.Contains(e.Message, "max_payload_bytes") {
			t.Errorf("%s with max_payload_bytes over the ceiling: %v, want INVALID_POLICY", c.op, e)
		}
	}
	var pol api.PoliciesReply
	mustAdmin(t, nc, api.AdminTopicPolicies, map[string]any{"topic": uri}, &pol)
	if pol.Policies.MaxPayloadBytes != nil {
		t.Fatalf("a refused policy was stored: %d", *pol.Policies.MaxPayloadBytes)
	}
	mustAdmin(t, nc, api.AdminTopicPolicies, map[string]any{"topic": uri, "policies": map[string]any{"max_payload_bytes": ceiling}}, nil)
	// A record of exactly the ceiling, with a key, goes through NATS.
	hdr := nats.Header{}
	hdr.Set(api.HeaderKey, strings.Repeat("k", 200))
	if _, _, e := request(t, nc, api.TopicSubject(api.ProducePrefix, "public", "default", "big"), bytes.Repeat([]byte{'x'}, ceiling), hdr); e != nil {
		t.Fatalf("a record of max_payload_bytes: %v", e)
	}
}

// On an external NATS whose max_payload (a stock server's 1 MiB) is
// below --max-payload (1 MiB by default), the broker default is lowered to
// what it carries, and a warning says so.
func TestMaxPayloadDefaultFollowsAnExternalNATS(t *testing.T) {
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	defer func() {
		ns.Shutdown()
		ns.WaitForShutdown()
	}()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server did not start")
	}
	logs := &lockedBuffer{}
	n, err := Start(context.Background(), Config{DataDir: t.TempDir(), NATSURL: ns.ClientURL(), MetricsListen: "off",
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	want := 1<<20 - frontend.PayloadFraming
	if !strings.Contains(logs.String(), "--max-payload is over what NATS carries") || !strings.Contains(logs.String(), fmt.Sprintf("default=%d", want)) {
		t.Fatalf("no warning: %s", logs)
	}
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var d api.TopicDescription
	mustAdmin(t, nc, api.AdminTopicCreate, api.TopicCreateRequest{Topic: "topic://public/default/small"}, nil)
	mustAdmin(t, nc, api.AdminTopicDescribe, api.TopicRequest{Topic: "topic://public/default/small"}, &d)
	if d.EffectivePolicies == nil || d.EffectivePolicies.MaxPayloadBytes == nil || *d.EffectivePolicies.MaxPayloadBytes != want {
		t.Fatalf("effective policies %+v, want max_payload_bytes %d", d.EffectivePolicies, want)
	}
}
