package node

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// TestFastProduceAnswersTheMicroProtocol: with the fast front-end,
// `nats micro ls/info/stats` still show braid-produce, its two endpoints
// and counts that include errors.
func TestFastProduceAnswersTheMicroProtocol(t *testing.T) {
	n, nc := startNode(t, t.TempDir())
	defer stopNode(t, n, nc)
	mustAdmin(t, nc, api.AdminTopicCreate, map[string]any{"topic": "topic://public/default/svc", "segments": 1}, nil)
	for i := range 3 {
		produce(t, nc, "svc", fmt.Sprint(i), []byte("x"))
	}
	if _, _, e := request(t, nc, api.TopicSubject(api.ProducePrefix, "public", "default", "missing"), []byte("x"), nil); e == nil {
		t.Fatal("produce to a missing topic succeeded")
	}
	// $SRV.PING answers once per service: braid-produce among them.
	inbox := nats.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.PublishRequest("$SRV.PING", inbox, nil); err != nil {
		t.Fatal(err)
	}
	var id string
	for id == "" {
		m, err := sub.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatalf("no PING answer from %s: %v", "braid-produce", err)
		}
		var p micro.Ping
		if err := json.Unmarshal(m.Data, &p); err != nil {
			t.Fatal(err)
		}
		if p.Name == "braid-produce" && p.Type == micro.PingResponseType {
			id = p.ID
		}
	}
	m, err := nc.Request("$SRV.INFO.braid-produce", nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var info micro.Info
	if err := json.Unmarshal(m.Data, &info); err != nil || info.ID != id || len(info.Endpoints) != 3 ||
		info.Endpoints[0].Subject != api.ProducePrefix+".*.*.*" || info.Endpoints[1].Name != "produce-batch" {
		t.Fatalf("INFO %s: %+v, %v", m.Data, info, err)
	}
	m, err = nc.Request("$SRV.STATS.braid-produce"+"."+id, nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var st micro.Stats
	if err := json.Unmarshal(m.Data, &st); err != nil || len(st.Endpoints) != 3 {
		t.Fatalf("STATS %s: %v", m.Data, err)
	}
	if e := st.Endpoints[0]; e.NumRequests != 4 || e.NumErrors != 1 || e.LastError == "" || e.ProcessingTime <= 0 {
		t.Fatalf("produce endpoint stats %+v, want 4 requests, 1 error", e)
	}
	if _, err := nc.Request("$SRV.INFO.braid-produce"+".not-this-one", nil, 200*time.Millisecond); err == nil {
		t.Fatal("an INFO for another instance id was answered")
	}
}
