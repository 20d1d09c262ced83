package node

import (
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
)

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"nats://127.0.0.1:4222":                   "nats://127.0.0.1:4222",
		"nats://alice:s3cret@10.0.0.1:4222":       "nats://alice:xxxxx@10.0.0.1:4222",
		"nats://tok3n@10.0.0.1:4222":              "nats://xxxxx@10.0.0.1:4222",
		"nats://a:p1@h1:4222,nats://a:p2@h2:4222": "nats://a:xxxxx@h1:4222,nats://a:xxxxx@h2:4222",
		"tls://bob:pa%20ss@example.com:4443":      "tls://bob:xxxxx@example.com:4443",
	} {
		got := redactURL(in)
		if got != want {
			t.Errorf("redactURL(%q) = %q, want %q", in, got, want)
		}
		for _, secret := range []string{"s3cret", "tok3n", "p1", "p2", "pa"} {
			if strings.Contains(got, secret+"@") {
				t.Errorf("redactURL(%q) = %q still shows %q", in, got, secret)
			}
		}
	}
}

// The node adds its own user to Braid's account, refuses configurations
// it cannot serve tenants apart with, and says when nothing is
// authenticated.
func TestSecureEmbedded(t *testing.T) {
	n := &Node{cfg: Config{BraidAccount: "BRAID"}, nodeID: "n1"}
	open, err := n.secureEmbedded(&server.Options{})
	if err != nil || !open.open || open.internal != nil {
		t.Fatalf("no auth: %+v, %v", open, err)
	}
	braid, acme := server.NewAccount("BRAID"), server.NewAccount("acme")
	opts := &server.Options{Accounts: []*server.Account{braid, acme},
		Users: []*server.User{{Username: "u", Password: "p", Account: acme}}}
	auth, err := n.secureEmbedded(opts)
	if err != nil || auth.internal == nil || auth.open {
		t.Fatalf("accounts: %+v, %v", auth, err)
	}
	last := opts.Users[len(opts.Users)-1]
	if last.Account != braid || last.Username != auth.internal.user || last.Password != auth.internal.password || len(last.Password) < 32 {
		t.Fatalf("the node's user: %+v", last)
	}
	if _, err := (&Node{cfg: Config{BraidAccount: "MISSING"}}).secureEmbedded(&server.Options{Accounts: []*server.Account{acme},
		Users: []*server.User{{Username: "u", Password: "p", Account: acme}}}); err == nil || !strings.Contains(err.Error(), `no account "MISSING"`) {
		t.Fatalf("no Braid account: %v", err)
	}
	if _, err := n.secureEmbedded(&server.Options{Username: "all", Password: "x"}); err == nil {
		t.Fatal("a single user for everyone is refused: tenants cannot be told apart")
	}
	if _, err := n.secureEmbedded(&server.Options{TrustedKeys: []string{"O..."}}); err == nil || !strings.Contains(err.Error(), "--nats-creds") {
		t.Fatalf("JWTs without creds: %v", err)
	}
}
