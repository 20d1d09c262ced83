package node

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// startNode starts a node on dir with an embedded NATS on a free port. Its
// warnings and errors are printed if the test fails.
func startNode(t *testing.T, dir string) (*Node, *nats.Conn) {
	t.Helper()
	return startNodeWith(t, dir, nil)
}

// frontEnds are the two produce front-ends a node with the embedded server
// can run: tests of the produce endpoints run over both.
var frontEnds = map[string]func(*Config){
	"fast":  nil,
	"micro": func(c *Config) { c.MicroProduce = true },
}

// startNodeWith is startNode with the config changed by configure (nil:
// the defaults).
func startNodeWith(t *testing.T, dir string, configure func(*Config)) (*Node, *nats.Conn) {
	t.Helper()
	logs := &lockedBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("node logs (warnings and errors):\n%s", logs.String())
		}
	})
	cfg := Config{DataDir: dir, NATSListen: "127.0.0.1:-1", MetricsListen: "127.0.0.1:0",
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	if configure != nil {
		configure(&cfg)
	}
	n, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatalf("start node: %v", err)
	}
	nc, err := nats.Connect(n.ClientURL())
	if err != nil {
		n.Close()
		t.Fatalf("connect: %v", err)
	}
	return n, nc
}

// lockedBuffer is a bytes.Buffer safe for the node's concurrent loggers.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func stopNode(t *testing.T, n *Node, nc *nats.Conn) {
	t.Helper()
	nc.Close()
	if err := n.Close(); err != nil {
		t.Errorf("close node: %v", err)
	}
}

// request sends a request and returns the body or the wire error.
func request(t *testing.T, nc *nats.Conn, subject string, body []byte, hdr nats.Header) ([]byte, nats.Header, *api.Error) {
	t.Helper()
	m, err := nc.RequestMsg(&nats.Msg{Subject: subject, Data: body, Header: hdr}, 10*time.Second)
	if err != nil {
		t.Fatalf("request %s: %v", subject, err)
	}
	if e := api.ParseError(m.Header.Get(micro.ErrorCodeHeader), m.Header.Get(micro.ErrorHeader)); e != nil {
		return nil, m.Header, e
	}
	return m.Data, m.Header, nil
}

// admin sends an admin request and decodes a successful reply into out.
func admin(t *testing.T, nc *nats.Conn, op string, req any, out any) *api.Error {
	t.Helper()
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	data, _, e := request(t, nc, api.AdminSubject(op), b, nil)
	if e == nil && out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s reply %q: %v", op, data, err)
		}
	}
	return e
}

func mustAdmin(t *testing.T, nc *nats.Conn, op string, req any, out any) {
	t.Helper()
	if e := admin(t, nc, op, req, out); e != nil {
		t.Fatalf("%s: %v", op, e)
	}
}

// produce sends one keyed message and returns its id.
func produce(t *testing.T, nc *nats.Conn, topic, key string, payload []byte) api.ProduceReply {
	t.Helper()
	hdr := nats.Header{}
	if key != "" {
		hdr.Set(api.HeaderKey, key)
	}
	data, _, e := request(t, nc, api.TopicSubject(api.ProducePrefix, "public", "default", topic), payload, hdr)
	if e != nil {
		t.Fatalf("produce: %v", e)
	}
	var r api.ProduceReply
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// fetchAll joins sub as consumer and fetches until a fetch comes back empty,
// acking everything; it returns the messages in delivery order.
func fetchAll(t *testing.T, nc *nats.Conn, topic, sub, consumer string) []api.Message {
	t.Helper()
	subj := func(verb string) string { return api.ConsumeSubject(verb, "public", "default", topic) }
	jb, _ := json.Marshal(api.JoinRequest{Subscription: sub, Consumer: consumer})
	if _, _, e := request(t, nc, subj(api.ConsumeJoin), jb, nil); e != nil {
		t.Fatalf("join: %v", e)
	}
	var all []api.Message
	for {
		fb, _ := json.Marshal(api.FetchRequest{Subscription: sub, Consumer: consumer, Max: 1000, Wait: "200ms"})
		data, _, e := request(t, nc, subj(api.ConsumeFetch), fb, nil)
		if e != nil {
			t.Fatalf("fetch: %v", e)
		}
		msgs, err := api.DecodeMessages(data)
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) == 0 {
			return all
		}
		all = append(all, msgs...)
		last := map[[2]uint64]uint64{}
		for _, m := range msgs {
			last[[2]uint64{m.Segment, uint64(m.Bucket)}] = m.Offset
		}
		ack := api.AckRequest{Subscription: sub, Consumer: consumer}
		for u, off := range last {
			ack.Acks = append(ack.Acks, api.Position{Segment: u[0], Bucket: int(u[1]), Offset: off})
		}
		ab, _ := json.Marshal(ack)
		if _, _, e := request(t, nc, subj(api.ConsumeAck), ab, nil); e != nil {
			t.Fatalf("ack: %v", e)
		}
	}
}
