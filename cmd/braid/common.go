package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
)

// clientFlags are the flags of every command that talks to a server. They
// are persistent flags of the command that registers them, so they may
// come before or after its subcommand.
type clientFlags struct {
	server      string
	contextName string
	timeout     time.Duration
	// Credentials: a .creds file, an nkey seed file, TLS files.
	creds, nkey, tlsCA, tlsCert, tlsKey string
	cmd                                 *cobra.Command
}

func (c *clientFlags) register(cmd *cobra.Command) {
	c.cmd = cmd
	fs := cmd.PersistentFlags()
	fs.StringVarP(&c.server, "server", "s", nats.DefaultURL, "NATS URL of the Braid server (default: $NATS_URL, the nats context's, nats://127.0.0.1:4222); nats://user:password@host:port for a password, tls:// for TLS")
	fs.StringVar(&c.contextName, "context", "", "a nats CLI context to take the URL and credentials from (default: the selected one)")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Second, "timeout of one request")
	fs.StringVar(&c.creds, "creds", "", "a .creds file to connect with")
	fs.StringVar(&c.nkey, "nkey", "", "an nkey seed file to connect with")
	fs.StringVar(&c.tlsCA, "tls-ca", "", "CA certificate file to trust for TLS")
	fs.StringVar(&c.tlsCert, "tls-cert", "", "client certificate file for TLS (with --tls-key)")
	fs.StringVar(&c.tlsKey, "tls-key", "", "client key file for TLS")
}

// changed reports whether flag name was given on the command line.
func (c *clientFlags) changed(name string) bool {
	f := c.cmd.PersistentFlags().Lookup(name)
	return f != nil && f.Changed
}

// settings resolves the server URL and credentials: flags given, else
// $NATS_URL (the URL), else the nats context, else the defaults.
func (c *clientFlags) settings() (server string, opts []nats.Option, err error) {
	nctx, err := loadNATSContext(c.contextName)
	if err != nil {
		return "", nil, err
	}
	pick := func(flag, fromFlag, fromContext string) string {
		if c.changed(flag) || fromContext == "" {
			return fromFlag
		}
		return fromContext
	}
	server = c.server
	switch {
	case c.changed("server"):
	case os.Getenv("NATS_URL") != "":
		server = os.Getenv("NATS_URL")
	case nctx.URL != "":
		server = nctx.URL
	}
	creds, nkey := pick("creds", c.creds, nctx.Creds), pick("nkey", c.nkey, nctx.Nkey)
	ca, cert, key := pick("tls-ca", c.tlsCA, nctx.CA), pick("tls-cert", c.tlsCert, nctx.Cert), pick("tls-key", c.tlsKey, nctx.Key)
	opts = []nats.Option{nats.Name("braid-cli")}
	if nctx.User != "" && !c.changed("server") {
		opts = append(opts, nats.UserInfo(nctx.User, nctx.Pass))
	}
	if creds != "" {
		opts = append(opts, nats.UserCredentials(creds))
	}
	if nkey != "" {
		o, err := nats.NkeyOptionFromSeed(nkey)
		if err != nil {
			return "", nil, fmt.Errorf("--nkey %s: %w", nkey, err)
		}
		opts = append(opts, o)
	}
	if ca != "" {
		opts = append(opts, nats.RootCAs(ca))
	}
	if cert != "" || key != "" {
		opts = append(opts, nats.ClientCert(cert, key))
	}
	return server, opts, nil
}

func (c *clientFlags) connect() (*nats.Conn, error) {
	server, opts, err := c.settings()
	if err != nil {
		return nil, err
	}
	nc, err := nats.Connect(server, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", redactedURL(server), err)
	}
	return nc, nil
}

// redactedURL hides the password or token of a NATS URL.
func redactedURL(u string) string {
	p, err := url.Parse(u)
	if err != nil || p.User == nil {
		return u
	}
	return p.Redacted()
}

// session connects and returns a context cancelled by SIGINT or SIGTERM;
// done closes both.
func (c *clientFlags) session() (nc *nats.Conn, ctx context.Context, done func(), err error) {
	if nc, err = c.connect(); err != nil {
		return nil, nil, nil, err
	}
	ctx, stop := signalContext()
	return nc, ctx, func() { stop(); nc.Close() }, nil
}

// signalContext is cancelled by SIGINT or SIGTERM.
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
}

// positive refuses a flag value below lo: a count, a size.
func positive(name string, v, lo int) error {
	if v < lo {
		return usagef("--%s %d: want %d or more", name, v, lo)
	}
	return nil
}
