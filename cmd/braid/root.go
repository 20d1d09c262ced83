package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

// version is the build's version: set with -ldflags "-X main.version=...",
// else the module's version or VCS revision as Go recorded it.
var version = ""

func buildVersion() string {
	if version != "" {
		return version
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := info.Main.Version
	for _, s := range info.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			v = strings.TrimSuffix(v, "(devel)") + s.Value[:12]
		}
	}
	if v == "" || v == "(devel)" {
		v = "devel"
	}
	return v
}

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:   "braid",
		Short: "Braid: an elastic message-streaming engine over NATS",
		Long: `braid runs a Braid server (serve) and drives one over NATS: topics,
tenants and namespaces, producing and consuming, the cluster's nodes.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(serveCommand(), topicCommand(), subscriptionCommand(), tenantCommand(), namespaceCommand(), produceCommand(),
		consumeCommand(), messageCommand(), nodeCommand(), benchCommand(), versionCommand())
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usageError{fmt.Sprintf("%s: %v (see '%s -h')", c.CommandPath(), err, c.CommandPath())}
	})
	return root
}

func versionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "print braid's version",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			fmt.Fprintln(c.OutOrStdout(), "braid", buildVersion())
			return nil
		},
	}
}

// output is the --output flag: how results print.
type output struct{ format string }

func (o *output) register(c *cobra.Command) {
	c.PersistentFlags().StringVarP(&o.format, "output", "o", "table", "how results print: table or json")
}

func (o *output) check() error {
	if o.format != "table" && o.format != "json" {
		return usagef("--output %q: want table or json", o.format)
	}
	return nil
}

func (o *output) json() bool { return o.format == "json" }

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// natsContext is what braid reads of a nats CLI context
// (~/.config/nats/context/<name>.json).
type natsContext struct {
	URL   string `json:"url"`
	Creds string `json:"creds"`
	Nkey  string `json:"nkey"`
	CA    string `json:"ca"`
	Cert  string `json:"cert"`
	Key   string `json:"key"`
	User  string `json:"user"`
	Pass  string `json:"password"`
}

// loadNATSContext reads context name, or the selected one when name is ""
// (none selected: a zero context).
func loadNATSContext(name string) (natsContext, error) {
	dir := os.Getenv("XDG_CONFIG_HOME")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return natsContext{}, nil
		}
		dir = filepath.Join(home, ".config")
	}
	dir = filepath.Join(dir, "nats")
	if name == "" {
		b, err := os.ReadFile(filepath.Join(dir, "context.txt"))
		if err != nil {
			return natsContext{}, nil
		}
		if name = strings.TrimSpace(string(b)); name == "" {
			return natsContext{}, nil
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "context", name+".json"))
	if err != nil {
		return natsContext{}, fmt.Errorf("nats context %q: %w", name, err)
	}
	var c natsContext
	if err := json.Unmarshal(b, &c); err != nil {
		return natsContext{}, fmt.Errorf("nats context %q: %w", name, err)
	}
	return c, nil
}
