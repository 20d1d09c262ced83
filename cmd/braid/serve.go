package main

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/braidmq/braid/actors"
	"github.com/braidmq/braid/node"
	"github.com/braidmq/braid/ui"
	"github.com/braidmq/braid/wal"
	"github.com/nats-io/nats-server/v2/conf"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// parseTenantAccounts parses tenant=account,... into account -> tenant.
func parseTenantAccounts(s string) (map[string]string, error) {
	out := map[string]string{}
	for _, pair := range strings.Split(s, ",") {
		if pair = strings.TrimSpace(pair); pair == "" {
			continue
		}
		tenant, account, ok := strings.Cut(pair, "=")
		if !ok || tenant == "" || account == "" {
			return nil, fmt.Errorf("--tenant-accounts: %q: want tenant=account", pair)
		}
		if _, dup := out[account]; dup {
			return nil, fmt.Errorf("--tenant-accounts: account %s is named twice", account)
		}
		out[account] = tenant
	}
	return out, nil
}

// applyConfigFile sets the flags of fs that path (a file in nats-server's
// configuration format, keys the flags' names with - or _) names and the
// command line did not, and returns every flag set either way. Unknown
// keys are refused.
func applyConfigFile(fs *pflag.FlagSet, path string) (map[string]bool, error) {
	set := map[string]bool{}
	fs.Visit(func(f *pflag.Flag) { set[f.Name] = true })
	if path == "" {
		return set, nil
	}
	m, err := conf.ParseFile(path)
	if err != nil {
		return nil, fmt.Errorf("--config %s: %w", path, err)
	}
	keys := slices.Sorted(maps.Keys(m))
	for _, k := range keys {
		name := strings.ReplaceAll(k, "_", "-")
		if fs.Lookup(name) == nil || name == "config" {
			return nil, fmt.Errorf("--config %s: %q is not a flag of braid serve", path, k)
		}
		if set[name] {
			continue // the command line wins
		}
		var value string
		switch v := m[k].(type) {
		case []any:
			parts := make([]string, len(v))
			for i, p := range v {
				parts[i] = fmt.Sprint(p)
			}
			value = strings.Join(parts, ",")
		default:
			value = fmt.Sprint(v)
		}
		if err := fs.Set(name, value); err != nil {
			return nil, fmt.Errorf("--config %s: %s: %w", path, k, err)
		}
		set[name] = true
	}
	return set, nil
}

func serveCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "serve", Args: cobra.NoArgs,
		Short: "run a Braid server (embedded NATS by default)",
		Example: `  braid serve --data-dir ./data
  braid serve --config examples/secure/braid.conf
  braid serve --node-id n1 --cluster-listen 127.0.0.1:6222 --routes nats://127.0.0.1:6223,nats://127.0.0.1:6224`}
	fs := cmd.Flags()
	var cfg node.Config
	fs.StringVar(&cfg.DataDir, "data-dir", node.DefaultDataDir, "directory for logs, subscriptions and the embedded NATS store")
	fs.StringVar(&cfg.NATSListen, "nats-listen", node.DefaultNATSListen, "host:port of the embedded NATS server")
	fs.StringVar(&cfg.NATSURL, "nats-url", "", "use this external NATS (with JetStream) instead of embedding one")
	fs.StringVar(&cfg.MetricsListen, "metrics-listen", node.DefaultMetricsListen, "host:port serving /metrics (\"off\" to disable)")
	fs.BoolVar(&cfg.Pprof, "pprof", false, "serve Go's profiles under /debug/pprof/ on the metrics listener")
	fs.StringVar(&cfg.Durability, "durability", "always", "default durability of logs: always (fsync before ack), interval, none")
	fs.IntVar(&cfg.MaxPayloadBytes, "max-payload", 1<<20, "default max payload of one message, in bytes")
	fs.DurationVar(&cfg.TopicIdleTimeout, "topic-idle-timeout", actors.DefaultIdleTimeout, "stop the actors and close the logs of a topic unused this long (it activates again on its next request; negative: never)")
	fs.IntVar(&cfg.MaxOpenLogs, "max-open-logs", 0, "most bucket logs open at once (0: ten for each descriptor of --max-open-files)")
	fs.IntVar(&cfg.MaxOpenFiles, "max-open-files", 0, "most file descriptors bucket logs hold at once; their files close and open again as needed (0: half the process's file limit)")
	fs.StringVar(&cfg.CommitSync, "commit-sync", node.CommitAuto, "how a round of bucket log commits is made durable: auto (a log with under 16 KiB written since its last commit through the node's journal, any other by an fdatasync of its own file), journal (every round: one write and fdatasync of the node's journal), syncfs (one syncfs of the data directory's file system) or fdatasync (one per log, submitted together)")
	fs.StringVar(&cfg.NodeID, "node-id", "", "this node's id in its cluster (default: the one its data directory holds, or a new one written there)")
	fs.StringVar(&cfg.ClusterListen, "cluster-listen", "", "host:port of the embedded NATS server's cluster (route) listener; runs the node in a cluster")
	fs.StringVar(&cfg.ActorListen, "actor-listen", "", "host:port of the actor listener other nodes read this node's segments through (default: the cluster listener's host, any free port)")
	fs.StringToStringVar(&cfg.ActorDial, "actor-dial", nil, "other nodes' actor addresses and what to dial for each instead, comma-separated (host:port=host:port,...): a proxy or NAT between the nodes")
	fs.StringVar(&cfg.ClusterAdvertise, "cluster-advertise", "", "the route address the embedded NATS server gives its peers (default: its cluster listener): the address through a proxy or NAT")
	fs.StringVar(&cfg.ClusterName, "cluster-name", node.DefaultClusterName, "the NATS cluster's name")
	routes := fs.String("routes", "", "the other nodes' cluster listeners, comma-separated (nats://host:port,...)")
	fs.IntVar(&cfg.MetaReplicas, "meta-replicas", 0, "replicas of the metadata store (0: 3 when the cluster has three or more servers, else 1)")
	fs.DurationVar(&cfg.StorageTick, "storage-tick", node.DefaultStorageTick, "how often the storage worker rolls the open bucket logs by segment_ms, offloads closed files to the remote tier (offload policy) and removes files past retention or retention_bytes (negative: never)")
	fs.Int64Var(&cfg.TierCacheBytes, "tier-cache-bytes", node.DefaultTierCacheBytes, "bytes of files downloaded from the remote tier (the JetStream object store bucket braid-tier) kept on local disk for reads")
	fs.DurationVar(&cfg.RebalanceInterval, "rebalance-interval", node.DefaultRebalanceInterval, "how often the entry node compares the nodes' active segments and moves topics from the most to the least loaded (negative: never)")
	fs.DurationVar(&cfg.LeaseTTL, "lease-ttl", node.DefaultLeaseTTL, "how long the node's membership lease holds unrenewed (renewed every third of it)")
	fs.IntVar(&cfg.ReplicationFactor, "replication-factor", 0, "copies of each bucket log the segments of new layouts get, on as many nodes, replicated by raft, and of their consumer groups' state: a produce or an ack is answered once durable on a majority of them (0: 3 when the cluster has three or more nodes, else 1; at most 7)")
	fs.IntVar(&cfg.GroupCompactAfter, "group-compact-after", node.DefaultGroupCompactAfter, "records a consumer group's state log holds before it is rewritten as one snapshot (a replicated group's starts a new raft group then)")
	fs.DurationVar(&cfg.DeadAfter, "dead-after", 30*time.Second, "how long a node may be gone before the copies it holds count as lost: the active segments that had one are sealed and given successors with a full set of replicas (a node back with an empty data directory counts at once)")
	fs.Int64Var(&cfg.ReplicaCopyRate, "replica-copy-rate", node.DefaultReplicaCopyRate, "bytes a second this node copies from others to make lost copies of sealed replicated segments again (-1: no bound)")
	fs.DurationVar(&cfg.RaftTick, "raft-tick", 100*time.Millisecond, "the tick of the node's raft groups: a group whose leader is gone elects another in 10 to 20 ticks")
	heapFloor := fs.Uint64("gc-heap-floor", defaultHeapFloor, "bytes the Go heap may grow to before it is collected while the live heap is under half of it (GOGC raised for a small heap: fewer collections under load for some memory; 0, or GOGC in the environment: Go's default)")
	level := fs.String("log-level", "info", "debug, info, warn or error")
	cfg.Version = buildVersion()
	cfg.UI = ui.Handler
	fs.StringVar(&cfg.NATSConfig, "nats-config", "", "nats-server configuration file for the embedded server: accounts, users, TLS, cluster (see examples/secure)")
	fs.StringVar(&cfg.BraidAccount, "braid-account", node.DefaultBraidAccount, "the NATS account Braid's services and metadata live in, when the NATS configuration has accounts")
	fs.StringVar(&cfg.OperatorAccount, "operator-account", "", "the NATS account that may create tenants, drain nodes and address every tenant (Braid's own account always may)")
	fs.StringVar(&cfg.NATSCreds, "nats-creds", "", "a .creds file (JWT and nkey seed) Braid connects to NATS with")
	fs.StringVar(&cfg.NATSNkey, "nats-nkey", "", "an nkey seed file Braid connects to NATS with")
	fs.StringVar(&cfg.TLSCA, "tls-ca", "", "CA certificate file to trust for NATS's TLS")
	fs.StringVar(&cfg.TLSCert, "tls-cert", "", "client certificate file for NATS's TLS (with --tls-key)")
	fs.StringVar(&cfg.TLSKey, "tls-key", "", "client key file for NATS's TLS (with --tls-cert)")
	tenantAccounts := fs.String("tenant-accounts", "", "accounts not named as their tenants, as tenant=account,... (with JWTs an account is known by its public key)")
	config := fs.String("config", "", "a configuration file of serve's flags (nats-server's format: data_dir: \"/var/lib/braid\"; flags given on the command line win)")
	cmd.RunE = func(c *cobra.Command, _ []string) error {
		return serve(fs, &cfg, *routes, *level, *tenantAccounts, *config, heapFloor)
	}
	return cmd
}

// defaultHeapFloor is --gc-heap-floor's default (see startHeapFloor).
const defaultHeapFloor = 64 << 20

func serve(fs *pflag.FlagSet, cfg *node.Config, routes, level, tenantAccounts, config string, heapFloor *uint64) error {
	set, err := applyConfigFile(fs, config)
	if err != nil {
		return err
	}
	// The file may have set these.
	routes, level, tenantAccounts = fs.Lookup("routes").Value.String(), fs.Lookup("log-level").Value.String(), fs.Lookup("tenant-accounts").Value.String()
	if cfg.TenantAccounts, err = parseTenantAccounts(tenantAccounts); err != nil {
		return err
	}
	if cfg.NATSConfig != "" && !set["nats-listen"] {
		cfg.NATSListen = "" // the NATS configuration's listen, or NATS's default
	}
	for _, r := range strings.Split(routes, ",") {
		if r = strings.TrimSpace(r); r != "" {
			cfg.Routes = append(cfg.Routes, r)
		}
	}

	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return usagef("--log-level %q: want debug, info, warn or error", level)
	}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
	startHeapFloor(*heapFloor) // after the file: it may set gc_heap_floor
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if powerLossFS != nil {
		cfg.LogFS = powerLossFS
		cfg.Logger.Warn("a test build: the logs' writes are kept in memory until synced, so that kill -9 loses what a power cut would (the fault suite's; docs/faults.md)")
	}
	if diskFaults != nil {
		base := cfg.LogFS
		if base == nil {
			base = wal.OSFS
		}
		cfg.LogFS = diskFaults(cfg.DataDir, base, cfg.Logger)
		cfg.Logger.Warn("a test build: the logs' writes and syncs fail as <data-dir>/disk-fault says (the fault suite's; docs/faults.md)")
	}
	if steppedClock != nil {
		cfg.LeaseClock = steppedClock(cfg.DataDir, cfg.Logger)
		cfg.Logger.Warn("a test build: the wall clock steps by what <data-dir>/clock-step says (the fault suite's; docs/faults.md)")
	}
	n, err := node.Start(ctx, *cfg)
	if err != nil {
		return err
	}
	cfg.Logger.Info("serving; Ctrl-C to stop", "node", n.NodeID(), "serving_topics", n.Serving(), "nats", n.ClientURL(), "gomaxprocs", runtime.GOMAXPROCS(0))
	<-ctx.Done()
	cfg.Logger.Info("shutting down: flushing and closing every log")
	return n.Close()
}
