package specs

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/client"
	"github.com/braidmq/braid/examples/secure/gen"
	braidnode "github.com/braidmq/braid/node"
	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// The same isolation with decentralized JWT authentication: an operator,
// accounts signed by it (Braid's exporting its services, two tenants
// importing theirs), users as .creds files, and TLS. Accounts are known by
// their public keys on the wire, so Braid is told which is which tenant
// (--tenant-accounts).
var _ = Describe("Tenant isolation with JWTs and .creds files", func() {
	It("serves a tenant connecting with a .creds file over TLS, and refuses it another tenant's topics and the operator's operations", func() {
		dir := GinkgoT().TempDir()
		files, err := gen.Generate(filepath.Join(dir, "generated"))
		Expect(err).NotTo(HaveOccurred())
		z := newJWTs(dir)
		braid := z.account("BRAID", func(c *jwt.AccountClaims) {
			c.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
			for _, s := range []string{"braid.v1.produce.*.*.*", "braid.v1.produce-batch.*.*.*", "braid.v1.produce-multi.*",
				"braid.v1.consume.*.*.*.*", "braid.v1.read.*.*.*.*", "braid.v1.admin.>"} {
				c.Exports.Add(&jwt.Export{Subject: jwt.Subject(s), Type: jwt.Service})
			}
			c.Exports.Add(&jwt.Export{Subject: "braid.v1.layout.>", Type: jwt.Stream})
		})
		tenant := func(name string) jwtAccount {
			return z.account(name, func(c *jwt.AccountClaims) {
				for _, s := range []string{"braid.v1.produce." + name + ".*.*", "braid.v1.produce-batch." + name + ".*.*",
					"braid.v1.produce-multi." + name, "braid.v1.consume.*." + name + ".*.*", "braid.v1.read.*." + name + ".*.*", "braid.v1.admin.>"} {
					c.Imports.Add(&jwt.Import{Subject: jwt.Subject(s), Account: braid.pub, Type: jwt.Service})
				}
				c.Imports.Add(&jwt.Import{Subject: jwt.Subject("braid.v1.layout." + name + ".*.*"), Account: braid.pub, Type: jwt.Stream})
			})
		}
		acme, globex := tenant("acme"), tenant("globex")
		conf := z.config(`include "generated/tls.conf"`)
		Expect(os.WriteFile(filepath.Join(dir, "nats.conf"), []byte(conf), 0o600)).To(Succeed())

		node, err := braidnode.Start(context.Background(), braidnode.Config{DataDir: filepath.Join(dir, "data"),
			NATSConfig: filepath.Join(dir, "nats.conf"), NATSCreds: z.creds(braid, "braid"), BraidAccount: braid.pub,
			TenantAccounts: map[string]string{acme.pub: "acme", globex.pub: "globex"},
			MetricsListen:  "127.0.0.1:0", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		Expect(err).NotTo(HaveOccurred())
		defer func() { Expect(node.Close()).To(Succeed()) }()
		dial := func(creds string) *nats.Conn {
			nc, err := nats.Connect(node.ClientURL(), nats.UserCredentials(creds), nats.RootCAs(files.CA))
			Expect(err).NotTo(HaveOccurred())
			DeferCleanup(nc.Close)
			return nc
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// Braid's own account administers everything.
		op := client.NewAdmin(dial(z.creds(braid, "admin")))
		Expect(op.CreateTenant(ctx, "acme")).To(Succeed())
		Expect(op.CreateTenant(ctx, "globex")).To(Succeed())
		Expect(op.CreateNamespace(ctx, "globex/default", nil, 0)).To(Succeed())
		_, err = op.CreateTopic(ctx, "topic://globex/default/secret", 1)
		Expect(err).NotTo(HaveOccurred())

		nc := dial(z.creds(acme, "app"))
		admin := client.NewAdmin(nc)
		Expect(admin.CreateNamespace(ctx, "acme/orders", nil, 0)).To(Succeed())
		_, err = admin.CreateTopic(ctx, "topic://acme/orders/payments", 2)
		Expect(err).NotTo(HaveOccurred())
		produce(nc, "topic://acme/orders/payments", 40)
		c, err := client.NewStreamConsumer(nc, "topic://acme/orders/payments", "s")
		Expect(err).NotTo(HaveOccurred())
		for range 40 {
			m, err := c.Next(ctx)
			Expect(err).NotTo(HaveOccurred())
			m.Ack()
		}
		Expect(c.Close(ctx)).To(Succeed())

		Expect(admin.CreateTenant(ctx, "acme2")).To(MatchError(api.ErrForbidden))
		_, err = admin.DescribeTopic(ctx, "topic://globex/default/secret")
		Expect(err).To(MatchError(api.ErrForbidden))
		Expect(admin.DeleteTopic(ctx, "topic://globex/default/secret")).To(MatchError(api.ErrForbidden))
		tenants, err := admin.ListTenants(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(tenants).To(Equal([]string{"acme"}))
		_, err = op.DescribeTopic(ctx, "topic://globex/default/secret")
		Expect(err).NotTo(HaveOccurred(), "globex's topic is still there")
	})
})

// jwts makes an operator, its accounts and their users' .creds files.
type jwts struct {
	dir      string
	operator nkeys.KeyPair
	opJWT    string
	sys      jwtAccount
	accounts []jwtAccount
}

type jwtAccount struct {
	kp       nkeys.KeyPair
	pub, jwt string
}

func newJWTs(dir string) *jwts {
	GinkgoHelper()
	op, err := nkeys.CreateOperator()
	Expect(err).NotTo(HaveOccurred())
	pub, err := op.PublicKey()
	Expect(err).NotTo(HaveOccurred())
	z := &jwts{dir: dir, operator: op}
	z.opJWT, err = jwt.NewOperatorClaims(pub).Encode(op)
	Expect(err).NotTo(HaveOccurred())
	z.sys = z.account("SYS", nil)
	return z
}

func (z *jwts) account(name string, edit func(*jwt.AccountClaims)) jwtAccount {
	GinkgoHelper()
	kp, err := nkeys.CreateAccount()
	Expect(err).NotTo(HaveOccurred())
	pub, err := kp.PublicKey()
	Expect(err).NotTo(HaveOccurred())
	c := jwt.NewAccountClaims(pub)
	c.Name = name
	if edit != nil {
		edit(c)
	}
	token, err := c.Encode(z.operator)
	Expect(err).NotTo(HaveOccurred())
	a := jwtAccount{kp: kp, pub: pub, jwt: token}
	z.accounts = append(z.accounts, a)
	return a
}

// creds writes a .creds file of a new user of account a.
func (z *jwts) creds(a jwtAccount, user string) string {
	GinkgoHelper()
	kp, err := nkeys.CreateUser()
	Expect(err).NotTo(HaveOccurred())
	pub, err := kp.PublicKey()
	Expect(err).NotTo(HaveOccurred())
	uc := jwt.NewUserClaims(pub)
	uc.Name = user
	token, err := uc.Encode(a.kp)
	Expect(err).NotTo(HaveOccurred())
	seed, err := kp.Seed()
	Expect(err).NotTo(HaveOccurred())
	b, err := jwt.FormatUserConfig(token, seed)
	Expect(err).NotTo(HaveOccurred())
	path := filepath.Join(z.dir, fmt.Sprintf("%s-%s.creds", user, a.pub[:8]))
	Expect(os.WriteFile(path, b, 0o600)).To(Succeed())
	return path
}

// config is the nats-server configuration trusting the operator, with
// every account preloaded, and extra lines.
func (z *jwts) config(extra string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "listen: 127.0.0.1:-1\n%s\noperator: %s\nsystem_account: %s\nresolver: MEMORY\nresolver_preload: {\n", extra, z.opJWT, z.sys.pub)
	for _, a := range z.accounts {
		fmt.Fprintf(&b, "  %s: %s\n", a.pub, a.jwt)
	}
	b.WriteString("}\n")
	return b.String()
}
