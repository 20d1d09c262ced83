package specs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/client"
	"github.com/braidmq/braid/examples/secure/gen"
	braidnode "github.com/braidmq/braid/node"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// Tenants that cannot see or touch each other (issue 16): the embedded
// server configured as examples/secure ships it — TLS only, Braid's
// account, an operator account (OPS) and two tenant accounts (acme with a
// password, globex with an nkey).
var _ = Describe("Tenant isolation through NATS accounts", Ordered, func() {
	var (
		dir                string
		node               *braidnode.Node
		files              gen.Files
		url                string
		ops, acme, globex  *nats.Conn
		acmeErrs           chan error
		ctx                context.Context
		cancel             context.CancelFunc
		globexURI, acmeURI = "topic://globex/default/secret", "topic://acme/orders/payments"
	)

	BeforeAll(func() {
		dir = GinkgoT().TempDir()
		files = secureConfig(dir)
		var err error
		node, err = braidnode.Start(context.Background(), braidnode.Config{DataDir: filepath.Join(dir, "data"), NATSConfig: filepath.Join(dir, "nats.conf"),
			OperatorAccount: "OPS", MetricsListen: "127.0.0.1:0", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		Expect(err).NotTo(HaveOccurred())
		url = node.ClientURL()
		Expect(url).To(HavePrefix("tls://"))
		dial := func(opts ...nats.Option) *nats.Conn {
			nc, err := nats.Connect(url, append(opts, nats.RootCAs(files.CA))...)
			Expect(err).NotTo(HaveOccurred())
			return nc
		}
		ops = dial(nats.UserInfo("ops", "ops-secret"))
		acmeErrs = make(chan error, 16)
		acme = dial(nats.UserInfo("acme", "acme-secret"), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case acmeErrs <- err:
			default:
			}
		}))
		nkey, err := nats.NkeyOptionFromSeed(files.GlobexSeed)
		Expect(err).NotTo(HaveOccurred())
		globex = dial(nkey, nats.ClientCert(files.ClientCert, files.ClientKey))
		ctx, cancel = context.WithTimeout(context.Background(), 2*time.Minute)

		// The operator makes the tenants; each makes its own topics.
		opsAdmin := client.NewAdmin(ops)
		Expect(opsAdmin.CreateTenant(ctx, "acme")).To(Succeed())
		Expect(opsAdmin.CreateTenant(ctx, "globex")).To(Succeed())
		Expect(client.NewAdmin(acme).CreateNamespace(ctx, "acme/orders", nil, 0)).To(Succeed())
		Expect(client.NewAdmin(globex).CreateNamespace(ctx, "globex/default", nil, 0)).To(Succeed())
		_, err = client.NewAdmin(acme).CreateTopic(ctx, acmeURI, 2)
		Expect(err).NotTo(HaveOccurred())
		_, err = client.NewAdmin(globex).CreateTopic(ctx, globexURI, 2)
		Expect(err).NotTo(HaveOccurred())
		produce(globex, globexURI, 50)
	})

	AfterAll(func() {
		cancel()
		for _, nc := range []*nats.Conn{ops, acme, globex} {
			if nc != nil {
				nc.Close()
			}
		}
		if node != nil {
			Expect(node.Close()).To(Succeed())
		}
	})

	It("lets a tenant produce, consume, read and administer its own topics with the Go client", func() {
		produce(acme, acmeURI, 100)
		c, err := client.NewStreamConsumer(acme, acmeURI, "s")
		Expect(err).NotTo(HaveOccurred())
		seen := map[string]bool{}
		for len(seen) < 100 {
			m, err := c.Next(ctx)
			Expect(err).NotTo(HaveOccurred())
			seen[string(m.Payload)] = true
			m.Ack()
		}
		Expect(c.Close(ctx)).To(Succeed())
		// read.fetch through the checkpoint consumer, and admin.
		cp, err := client.NewCheckpointConsumer(acme, acmeURI)
		Expect(err).NotTo(HaveOccurred())
		m, err := cp.Next(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(m.Payload).NotTo(BeEmpty())
		Expect(cp.Close()).To(Succeed())
		admin := client.NewAdmin(acme)
		_, err = admin.Split(ctx, acmeURI, 0, nil)
		Expect(err).NotTo(HaveOccurred())
		st, err := admin.Stats(ctx, acmeURI)
		Expect(err).NotTo(HaveOccurred())
		Expect(st.Messages).To(Equal(uint64(100)))
		tenants, err := admin.ListTenants(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(tenants).To(Equal([]string{"acme"}), "a tenant sees itself only")
	})

	It("refuses every attempt on another tenant, on tenants and nodes, FORBIDDEN, and changes nothing", func() {
		forbidden := []struct {
			op   string
			body string
		}{
			{api.AdminTopicDelete, `{"topic":"` + globexURI + `"}`},
			{api.AdminTopicDescribe, `{"topic":"` + globexURI + `"}`},
			{api.AdminTopicStats, `{"topic":"` + globexURI + `"}`},
			{api.AdminTopicSplit, `{"topic":"` + globexURI + `","segment":0}`},
			{api.AdminTopicCreate, `{"topic":"topic://globex/default/planted","segments":1}`},
			{api.AdminNamespaceCreate, `{"namespace":"globex/planted"}`},
			{api.AdminNamespaceList, `{"tenant":"globex"}`},
			{api.AdminNamespacePolicies, `{"namespace":"globex/default","policies":{"retention_ms":1}}`},
			{api.AdminTenantCreate, `{"tenant":"acme2"}`},
			{api.AdminNodeList, `{}`},
			{api.AdminNodeDrain, `{"node":"` + node.NodeID() + `"}`},
		}
		for _, f := range forbidden {
			_, err := call(acme, api.AdminSubject(f.op), []byte(f.body))
			Expect(err).To(MatchError(api.ErrForbidden), "%s %s", f.op, f.body)
		}
		// Data subjects of another tenant are not even imported.
		for _, subject := range []string{
			api.TopicSubject(api.ProducePrefix, "globex", "default", "secret"),
			api.ReadSubject(api.ReadFetch, "globex", "default", "secret"),
			api.ConsumeSubject(api.ConsumeJoin, "globex", "default", "secret"),
			api.ProduceMultiPrefix + ".globex",
		} {
			_, err := call(acme, subject, []byte(`{}`))
			Expect(err).To(MatchError(nats.ErrNoResponders), subject)
		}
		// A queue subscription of acme's cannot dead-letter into globex.
		_, err := call(acme, api.QueueSubject(api.QueueJoin, "acme", "orders", "payments"),
			[]byte(`{"subscription":"q","consumer":"c","dead_letter_topic":"`+globexURI+`"}`))
		Expect(err).To(MatchError(api.ErrForbidden))
		// Braid's metadata is not in acme's account.
		js, err := jetstream.New(acme)
		Expect(err).NotTo(HaveOccurred())
		_, err = js.KeyValue(ctx, "braid-meta")
		Expect(err).To(HaveOccurred())
		// Nothing changed: globex's topic, layout and messages are whole,
		// no tenant or namespace was made.
		d, err := client.NewAdmin(globex).DescribeTopic(ctx, globexURI)
		Expect(err).NotTo(HaveOccurred())
		Expect(d.Segments).To(HaveLen(2))
		st, err := client.NewAdmin(globex).Stats(ctx, globexURI)
		Expect(err).NotTo(HaveOccurred())
		Expect(st.Messages).To(Equal(uint64(50)))
		tenants, err := client.NewAdmin(ops).ListTenants(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(tenants).To(ConsistOf("public", "acme", "globex"))
		nss, err := client.NewAdmin(globex).ListNamespaces(ctx, "globex")
		Expect(err).NotTo(HaveOccurred())
		Expect(nss).To(ConsistOf("globex/default"))
		_, err = client.NewAdmin(ops).DescribeTopic(ctx, "topic://globex/default/planted")
		Expect(err).To(MatchError(api.ErrTopicNotFound))
		Expect((&server{node: node}).metric("braid_requests_forbidden_total")).To(BeNumerically(">=", float64(len(forbidden))))
	})

	It("makes forged replies impossible: no tenant can answer Braid's subjects or see another's requests", func() {
		// acme's users may not subscribe to Braid's subjects in their own
		// account (their requests would reach them too).
		sub, err := acme.SubscribeSync("braid.v1.produce.acme.>")
		Expect(err).NotTo(HaveOccurred())
		Expect(acme.Flush()).To(Succeed())
		Eventually(acmeErrs).WithTimeout(5 * time.Second).Should(Receive(MatchError(ContainSubstring("Permissions Violation"))))
		Expect(sub.Unsubscribe()).To(Succeed())
		// Another account, even unrestricted, sees nothing of acme's
		// requests and cannot answer them: acme gets Braid's own answers.
		spy, err := ops.SubscribeSync("braid.v1.produce.>")
		Expect(err).NotTo(HaveOccurred())
		_, err = ops.Subscribe("braid.v1.produce.acme.>", func(m *nats.Msg) {
			_ = m.Respond([]byte(`{"segment":0,"bucket":0,"offset":999999}`))
		})
		Expect(err).NotTo(HaveOccurred())
		Expect(ops.Flush()).To(Succeed())
		for i := range 20 {
			reply, err := acme.RequestMsg(&nats.Msg{Subject: "braid.v1.produce.acme.orders.payments",
				Header: nats.Header{api.HeaderKey: []string{"k"}}, Data: []byte(strconv.Itoa(i))}, 10*time.Second)
			Expect(err).NotTo(HaveOccurred())
			Expect(reply.Header.Get(micro.ErrorCodeHeader)).To(BeEmpty())
			var id struct{ Offset uint64 }
			Expect(json.Unmarshal(reply.Data, &id)).To(Succeed())
			Expect(id.Offset).To(BeNumerically("<", 999999), "a forged reply reached acme")
		}
		_, err = spy.NextMsg(100 * time.Millisecond)
		Expect(err).To(MatchError(nats.ErrTimeout), "the operator's account saw acme's requests")
	})

	It("refuses plain connections on the TLS-only listener and wrong credentials", func() {
		plain := "nats://" + url[len("tls://"):]
		_, err := nats.Connect(plain, nats.UserInfo("acme", "acme-secret"))
		Expect(err).To(HaveOccurred(), "a plain connection to a TLS-only listener")
		_, err = nats.Connect(url, nats.RootCAs(files.CA), nats.UserInfo("acme", "wrong"))
		Expect(err).To(MatchError(nats.ErrAuthorization))
		_, err = nats.Connect(url, nats.RootCAs(files.CA))
		Expect(err).To(MatchError(nats.ErrAuthorization), "an anonymous connection")
	})
})

// secureConfig writes into dir what examples/secure runs with, on any free
// port: generated/ (certificates, globex's nkey), accounts.conf (the
// example's own) and nats.conf (TLS only, the accounts).
func secureConfig(dir string) gen.Files {
	GinkgoHelper()
	files, err := gen.Generate(filepath.Join(dir, "generated"))
	Expect(err).NotTo(HaveOccurred())
	accounts, err := os.ReadFile("../examples/secure/accounts.conf")
	Expect(err).NotTo(HaveOccurred())
	Expect(os.WriteFile(filepath.Join(dir, "accounts.conf"), accounts, 0o600)).To(Succeed())
	conf := "listen: 127.0.0.1:-1\ninclude \"generated/tls.conf\"\ninclude \"accounts.conf\"\n"
	Expect(os.WriteFile(filepath.Join(dir, "nats.conf"), []byte(conf), 0o600)).To(Succeed())
	return files
}

// produce sends n messages to uri through the Go client.
func produce(nc *nats.Conn, uri string, n int) {
	GinkgoHelper()
	p, err := client.NewProducer(nc, uri)
	Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for i := range n {
		wg.Add(1)
		Expect(p.Send(ctx, api.Record{Key: []byte(fmt.Sprint("k", i%4)), Payload: []byte(strconv.Itoa(i))}, func(_ client.MessageID, err error) {
			defer wg.Done()
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})).To(Succeed())
	}
	wg.Wait()
	Expect(p.Close(ctx)).To(Succeed())
	Expect(errors.Join(errs...)).NotTo(HaveOccurred())
}

// call sends a request and returns its body or its error (the wire
// error, or NATS's).
func call(nc *nats.Conn, subject string, body []byte) ([]byte, error) {
	m, err := nc.RequestMsg(&nats.Msg{Subject: subject, Data: body}, 10*time.Second)
	if err != nil {
		return nil, err
	}
	if e := api.ParseError(m.Header.Get(micro.ErrorCodeHeader), m.Header.Get(micro.ErrorHeader)); e != nil {
		return nil, e
	}
	return m.Data, nil
}
