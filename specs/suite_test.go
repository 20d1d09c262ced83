// Package specs holds Braid's behaviour specifications: Ginkgo specs that
// start a real node (embedded NATS, temp data directory) and drive it only
// through NATS, as a user would.
package specs

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/braidmq/braid/api"
	braidnode "github.com/braidmq/braid/node"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

func TestSpecs(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Braid behaviour")
}

// server is a node under test and a client connection to it.
type server struct {
	dir  string
	node *braidnode.Node
	nc   *nats.Conn
}

func startServer(dir string) *server {
	GinkgoHelper()
	node := startNode(dir, "127.0.0.1:-1")
	return &server{dir: dir, node: node, nc: connect(node.ClientURL())}
}

// startNode starts a node on dir whose embedded NATS listens on listen
// (port -1: any free port).
func startNode(dir, listen string) *braidnode.Node {
	GinkgoHelper()
	node, err := braidnode.Start(context.Background(), braidnode.Config{DataDir: dir, NATSListen: listen,
		MetricsListen: "127.0.0.1:0", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	Expect(err).NotTo(HaveOccurred())
	return node
}

// connect opens a client connection that reconnects for ever, quickly, so
// it survives a restart of the node (see server.restart). The caller closes
// it.
func connect(url string) *nats.Conn {
	GinkgoHelper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			GinkgoWriter.Printf("NATS client error: %v\n", err)
		}))
	Expect(err).NotTo(HaveOccurred())
	return nc
}

// restart stops the node and starts a new one on the same data directory
// and the same NATS port, so that client connections reconnect to it.
func (s *server) restart() {
	GinkgoHelper()
	listen := strings.TrimPrefix(s.node.ClientURL(), "nats://")
	node := s.node
	s.node = nil // a failed start must not make stop close it twice
	Expect(node.Close()).To(Succeed())
	s.node = startNode(s.dir, listen)
}

func (s *server) stop() {
	GinkgoHelper()
	s.nc.Close()
	if s.node != nil {
		Expect(s.node.Close()).To(Succeed())
	}
}

// request returns the reply body or the wire error.
func (s *server) request(subject string, body []byte) ([]byte, error) {
	m, err := s.nc.RequestMsg(&nats.Msg{Subject: subject, Data: body}, 10*time.Second)
	if err != nil {
		return nil, err
	}
	if e := api.ParseError(m.Header.Get(micro.ErrorCodeHeader), m.Header.Get(micro.ErrorHeader)); e != nil {
		return nil, e
	}
	return m.Data, nil
}

func (s *server) admin(op string, req any, out any) {
	GinkgoHelper()
	b, err := json.Marshal(req)
	Expect(err).NotTo(HaveOccurred())
	data, err := s.request(api.AdminSubject(op), b)
	Expect(err).NotTo(HaveOccurred(), op)
	if out != nil {
		Expect(json.Unmarshal(data, out)).To(Succeed())
	}
}

func (s *server) consume(verb, topic string, req any) []byte {
	GinkgoHelper()
	b, err := json.Marshal(req)
	Expect(err).NotTo(HaveOccurred())
	data, err := s.request(api.ConsumeSubject(verb, "public", "default", topic), b)
	Expect(err).NotTo(HaveOccurred(), verb)
	return data
}

func (s *server) produceBatch(topic string, recs []api.Record) []api.Result {
	GinkgoHelper()
	data, err := s.request(api.TopicSubject(api.ProduceBatchPrefix, "public", "default", topic), api.AppendRecords(nil, recs))
	Expect(err).NotTo(HaveOccurred())
	res, err := api.DecodeResults(data)
	Expect(err).NotTo(HaveOccurred())
	for _, r := range res {
		Expect(r.Err()).NotTo(HaveOccurred())
	}
	return res
}

func (s *server) fetch(topic, sub, consumer string, max int) []api.Message {
	GinkgoHelper()
	data := s.consume(api.ConsumeFetch, topic, api.FetchRequest{Subscription: sub, Consumer: consumer, Max: max, Wait: "100ms"})
	msgs, err := api.DecodeMessages(data)
	Expect(err).NotTo(HaveOccurred())
	return msgs
}

// ackAll acknowledges, per unit, the highest offset of msgs.
func (s *server) ackAll(topic, sub, consumer string, msgs []api.Message) {
	GinkgoHelper()
	last := map[[2]uint64]uint64{}
	for _, m := range msgs {
		k := [2]uint64{m.Segment, uint64(m.Bucket)}
		if m.Offset >= last[k] {
			last[k] = m.Offset
		}
	}
	req := api.AckRequest{Subscription: sub, Consumer: consumer}
	for u, off := range last {
		req.Acks = append(req.Acks, api.Position{Segment: u[0], Bucket: int(u[1]), Offset: off})
	}
	s.consume(api.ConsumeAck, topic, req)
}
