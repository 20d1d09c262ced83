package main

import (
	"github.com/spf13/pflag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A configuration file sets serve's flags (keys with - or _); the command
// line wins; unknown keys and bad values are refused.
func TestApplyConfigFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "braid.conf")
	conf := "# comment\ndata_dir: \"/var/lib/braid\"\nnats-config: \"nats.conf\"\nlease_ttl: \"9s\"\nmax_payload: 2048\nroutes: [\"nats://a:6222\", \"nats://b:6222\"]\npprof: true\n"
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	dataDir := fs.String("data-dir", "./data", "")
	natsConfig := fs.String("nats-config", "", "")
	lease := fs.Duration("lease-ttl", time.Second, "")
	payload := fs.Int("max-payload", 1, "")
	routes := fs.String("routes", "", "")
	pprof := fs.Bool("pprof", false, "")
	fs.String("config", "", "")
	if err := fs.Parse([]string{"--max-payload", "4096"}); err != nil {
		t.Fatal(err)
	}
	set, err := applyConfigFile(fs, path)
	if err != nil {
		t.Fatal(err)
	}
	if *dataDir != "/var/lib/braid" || *natsConfig != "nats.conf" || *lease != 9*time.Second || !*pprof ||
		*routes != "nats://a:6222,nats://b:6222" {
		t.Fatalf("flags from the file: %q %q %s %v %q", *dataDir, *natsConfig, *lease, *pprof, *routes)
	}
	if *payload != 4096 {
		t.Fatalf("max-payload %d: the command line's 4096 must win", *payload)
	}
	if !set["data-dir"] || !set["max-payload"] || set["config"] {
		t.Fatalf("set: %v", set)
	}
	for bad, want := range map[string]string{
		"no_such_flag: 1\n":  "is not a flag",
		"lease_ttl: \"x\"\n": "lease_ttl",
		"config: \"a\"\n":    "is not a flag",
		"data_dir: [\n":      "--config",
	} {
		if err := os.WriteFile(path, []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
		fs.String("data-dir", "", "")
		fs.Duration("lease-ttl", 0, "")
		fs.String("config", "", "")
		if _, err := applyConfigFile(fs, path); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error naming %q", bad, err, want)
		}
	}
}
