package main

import (
	"context"
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
)

// clientFlags are the flags of every command that talks to a server.
type clientFlags struct {
	server  string
	timeout time.Duration
	// Credentials: a .creds file, an nkey seed file, TLS files.
	creds, nkey, tlsCA, tlsCert, tlsKey string
}

func (c *clientFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.server, "server", nats.DefaultURL, "NATS URL of the Braid server (nats://user:password@host:port for a password)")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Second, "timeout of one request")
	fs.StringVar(&c.creds, "creds", "", "a .creds file to connect with")
	fs.StringVar(&c.nkey, "nkey", "", "an nkey seed file to connect with")
	fs.StringVar(&c.tlsCA, "tls-ca", "", "CA certificate file to trust for TLS")
	fs.StringVar(&c.tlsCert, "tls-cert", "", "client certificate file for TLS (with --tls-key)")
	fs.StringVar(&c.tlsKey, "tls-key", "", "client key file for TLS")
}

func (c *clientFlags) connect() (*nats.Conn, error) {
	opts := []nats.Option{nats.Name("braid-cli")}
	if c.creds != "" {
		opts = append(opts, nats.UserCredentials(c.creds))
	}
	if c.nkey != "" {
		o, err := nats.NkeyOptionFromSeed(c.nkey)
		if err != nil {
			return nil, fmt.Errorf("--nkey %s: %w", c.nkey, err)
		}
		opts = append(opts, o)
	}
	if c.tlsCA != "" {
		opts = append(opts, nats.RootCAs(c.tlsCA))
	}
	if c.tlsCert != "" || c.tlsKey != "" {
		opts = append(opts, nats.ClientCert(c.tlsCert, c.tlsKey))
	}
	nc, err := nats.Connect(c.server, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", redactedURL(c.server), err)
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

// topicSession parses the flags and the one topic URI of a command, connects
// and returns a context cancelled by SIGINT or SIGTERM; done closes both.
func (c *clientFlags) topicSession(fs *flag.FlagSet, args []string) (uri string, nc *nats.Conn, ctx context.Context, done func(), err error) {
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return "", nil, nil, nil, err
	}
	if len(pos) != 1 {
		fs.Usage()
		return "", nil, nil, nil, fmt.Errorf("%s: want one topic URI", fs.Name())
	}
	if nc, err = c.connect(); err != nil {
		return "", nil, nil, nil, err
	}
	ctx, stop := signalContext()
	return pos[0], nc, ctx, func() { stop(); nc.Close() }, nil
}

// parseInterleaved parses flags that may come before or after positional
// arguments ("topic create URI --segments 4") and returns the positionals.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// signalContext is cancelled by SIGINT or SIGTERM.
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
}

func usageOf(fs *flag.FlagSet, synopsis string) func() {
	return func() {
		fmt.Fprintf(os.Stderr, "usage: %s\n\nflags:\n", synopsis)
		fs.PrintDefaults()
	}
}
