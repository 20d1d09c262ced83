package node

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/braidmq/braid/frontend"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Security (docs/security.md): NATS's own model. With a nats-server
// configuration that has accounts, Braid's services, metadata and
// JetStream live in Braid's account (Config.BraidAccount); tenants are
// accounts named as their tenants that import Braid's exports, which NATS
// limits to their own tenant token, and Braid authorizes admin requests
// by the account NATS stamps on them (package authz).

// internalUser is the user the node adds to Braid's account of its
// embedded server's configuration, and connects as: a name and password
// made at each start, never written or logged.
type internalUser struct{ user, password string }

// natsAuth is how the node's connections authenticate to NATS.
type natsAuth struct {
	internal *internalUser
	// open reports that the server has no authentication at all.
	open bool
	// tls reports that the embedded server's client listener takes TLS
	// connections only: the node's connections then go through memory
	// (in-process), which needs none.
	tls bool
	// creds reports that the node authenticates with a .creds file or an
	// nkey (signing the server's nonce, which the lean produce connection
	// does not do).
	creds bool
}

// embeddedOptions reads the embedded server's options: the nats-server
// configuration file when one is given, and then what Braid needs.
func (n *Node) embeddedOptions() (*server.Options, error) {
	opts := &server.Options{}
	if n.cfg.NATSConfig != "" {
		fo, err := server.ProcessConfigFile(n.cfg.NATSConfig)
		if err != nil {
			return nil, fmt.Errorf("NATS configuration %s (--nats-config): %w", n.cfg.NATSConfig, err)
		}
		opts = fo
	}
	return opts, nil
}

// secureEmbedded adds the node's own user to Braid's account of the
// embedded server's options when they authenticate clients, and says how
// the node connects.
func (n *Node) secureEmbedded(opts *server.Options) (natsAuth, error) {
	switch {
	case len(opts.TrustedOperators) > 0 || len(opts.TrustedKeys) > 0:
		// JWTs: the accounts come from a resolver; Braid's own user is a
		// .creds file like any other.
		if n.cfg.NATSCreds == "" {
			return natsAuth{}, errors.New("the NATS configuration trusts an operator (JWTs): give Braid's user in its account with --nats-creds")
		}
		return natsAuth{}, nil
	case opts.Username != "" || opts.Authorization != "":
		return natsAuth{}, errors.New("the NATS configuration has a single user or token for everyone: tenants cannot be told apart; use accounts (examples/secure/nats.conf)")
	case len(opts.Users) == 0 && len(opts.Nkeys) == 0:
		return natsAuth{open: true}, nil
	}
	var acc *server.Account
	var names []string
	for _, a := range opts.Accounts {
		names = append(names, a.Name)
		if a.Name == n.cfg.BraidAccount {
			acc = a
		}
	}
	if acc == nil {
		return natsAuth{}, fmt.Errorf("the NATS configuration authenticates clients but has no account %q for Braid (--braid-account; it has %s): add it with jetstream enabled and Braid's exports (examples/secure/nats.conf)",
			n.cfg.BraidAccount, strings.Join(names, ", "))
	}
	secret := make([]byte, 24)
	if _, err := rand.Read(secret); err != nil {
		return natsAuth{}, err
	}
	u := &internalUser{user: "braid-node-" + n.nodeID + "-" + hex.EncodeToString(secret[:4]), password: hex.EncodeToString(secret)}
	opts.Users = append(opts.Users, &server.User{Username: u.user, Password: u.password, Account: acc})
	return natsAuth{internal: u}, nil
}

// connectOptions are the options of the node's nats.go connection.
func (n *Node) connectOptions(auth natsAuth) ([]nats.Option, error) {
	var out []nats.Option
	if u := auth.internal; u != nil {
		out = append(out, nats.UserInfo(u.user, u.password))
	}
	if n.cfg.NATSCreds != "" {
		out = append(out, nats.UserCredentials(n.cfg.NATSCreds))
	}
	if n.cfg.NATSNkey != "" {
		opt, err := nats.NkeyOptionFromSeed(n.cfg.NATSNkey)
		if err != nil {
			return nil, fmt.Errorf("nkey seed file %s (--nats-nkey): %w", n.cfg.NATSNkey, err)
		}
		out = append(out, opt)
	}
	if n.cfg.TLSCA != "" {
		out = append(out, nats.RootCAs(n.cfg.TLSCA))
	}
	if n.cfg.TLSCert != "" {
		out = append(out, nats.ClientCert(n.cfg.TLSCert, n.cfg.TLSKey))
	}
	return out, nil
}

// checkBraidAccount refuses to start when the account the node connected
// to has no JetStream (the metadata store would wait for it forever).
func (n *Node) checkBraidAccount(ctx context.Context, js jetstream.JetStream) error {
	_, err := js.AccountInfo(ctx)
	if errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) || errors.Is(err, jetstream.ErrJetStreamNotEnabled) {
		return fmt.Errorf("the NATS account Braid connected to has no JetStream (Braid keeps its metadata there): enable it (jetstream: enabled in account %s)", n.cfg.BraidAccount)
	}
	return nil // other errors: a cluster still forming; openMeta waits for it
}

// redactURL returns a NATS URL with its password, or token, hidden.
func redactURL(u string) string {
	var out []string
	for _, one := range strings.Split(u, ",") {
		p, err := url.Parse(strings.TrimSpace(one))
		if err != nil || p.User == nil {
			out = append(out, one)
			continue
		}
		if _, hasPassword := p.User.Password(); hasPassword {
			p.User = url.UserPassword(p.User.Username(), "xxxxx")
		} else {
			p.User = url.User("xxxxx") // a token
		}
		out = append(out, p.String())
	}
	return strings.Join(out, ",")
}

// frontend is how the front-end's connections authenticate.
func (a natsAuth) frontend() frontend.Auth {
	f := frontend.Auth{TLS: a.tls, Creds: a.creds}
	if a.internal != nil {
		f.User, f.Password = a.internal.user, a.internal.password
	}
	return f
}
