package specs

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/client"
	braidnode "github.com/braidmq/braid/node"
	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// Braid on an external NATS configured with examples/secure's accounts,
// connecting over TLS as an nkey user of Braid's account (--nats-url,
// --nats-nkey, --tls-ca, --tls-cert, --tls-key).
var _ = Describe("Braid on an external NATS with accounts and TLS", func() {
	It("connects with an nkey over TLS, serves a tenant, and refuses it the operator's operations", func() {
		dir := GinkgoT().TempDir()
		files := secureConfig(dir)

		// The external server, with an nkey user in Braid's account.
		opts, err := natsserver.ProcessConfigFile(filepath.Join(dir, "nats.conf"))
		Expect(err).NotTo(HaveOccurred())
		kp, err := nkeys.CreateUser()
		Expect(err).NotTo(HaveOccurred())
		pub, _ := kp.PublicKey()
		seed, _ := kp.Seed()
		seedFile := filepath.Join(dir, "braid.nk")
		Expect(os.WriteFile(seedFile, seed, 0o600)).To(Succeed())
		for _, a := range opts.Accounts {
			if a.Name == "BRAID" {
				opts.Nkeys = append(opts.Nkeys, &natsserver.NkeyUser{Nkey: pub, Account: a})
			}
		}
		opts.JetStream, opts.StoreDir, opts.NoLog, opts.NoSigs = true, filepath.Join(dir, "js"), true, true
		ns, err := natsserver.NewServer(opts)
		Expect(err).NotTo(HaveOccurred())
		ns.Start()
		Expect(ns.ReadyForConnections(10 * time.Second)).To(BeTrue())
		defer func() {
			ns.Shutdown()
			ns.WaitForShutdown()
		}()

		node, err := braidnode.Start(context.Background(), braidnode.Config{DataDir: filepath.Join(dir, "data"), NATSURL: ns.ClientURL(),
			NATSNkey: seedFile, TLSCA: files.CA, TLSCert: files.ClientCert, TLSKey: files.ClientKey, OperatorAccount: "OPS",
			MetricsListen: "127.0.0.1:0", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		Expect(err).NotTo(HaveOccurred())
		defer func() { Expect(node.Close()).To(Succeed()) }()

		dial := func(user, password string) *nats.Conn {
			nc, err := nats.Connect(ns.ClientURL(), nats.UserInfo(user, password), nats.RootCAs(files.CA))
			Expect(err).NotTo(HaveOccurred())
			DeferCleanup(nc.Close)
			return nc
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		Expect(client.NewAdmin(dial("ops", "ops-secret")).CreateTenant(ctx, "acme")).To(Succeed())
		acme := dial("acme", "acme-secret")
		admin := client.NewAdmin(acme)
		Expect(admin.CreateNamespace(ctx, "acme/orders", nil, 0)).To(Succeed())
		_, err = admin.CreateTopic(ctx, "topic://acme/orders/payments", 2)
		Expect(err).NotTo(HaveOccurred())
		produce(acme, "topic://acme/orders/payments", 30)
		st, err := admin.Stats(ctx, "topic://acme/orders/payments")
		Expect(err).NotTo(HaveOccurred())
		Expect(st.Messages).To(Equal(uint64(30)))
		Expect(admin.CreateTenant(ctx, "other")).To(MatchError(api.ErrForbidden))
		_, err = admin.ListNodes(ctx)
		Expect(err).To(MatchError(api.ErrForbidden))
		// Braid's connection is the nkey user of its account over TLS: its
		// metadata is in that account's JetStream, not the tenant's.
		_, err = client.NewAdmin(dial("ops", "ops-secret")).ListNodes(ctx)
		Expect(err).NotTo(HaveOccurred())
	})
})
