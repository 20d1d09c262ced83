package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"time"

	"github.com/braidmq/braid/meta"
	"github.com/braidmq/braid/wal/tier"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
)

// clusterOptions makes the embedded NATS server a member of the NATS
// cluster of the node's peers: a route listener on ClusterListen, routes
// to Routes, and the node id as its server name (JetStream's clustered
// mode names its peers so).
func (n *Node) clusterOptions(opts *server.Options) error {
	host, port, err := splitHostPort(n.cfg.ClusterListen)
	if err != nil {
		return fmt.Errorf("cluster listen: %w", err)
	}
	if port > 0 {
		l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			return fmt.Errorf("the NATS cluster listener cannot listen on %s (--cluster-listen): %w", n.cfg.ClusterListen, err)
		}
		l.Close()
	}
	opts.ServerName = n.nodeID
	// A route to a server that stopped answering (killed without a close,
	// stopped, cut off) is dropped after about a third of a lease, and
	// with it the subscriptions it carried: NATS then stops handing
	// requests to that node (the default is minutes).
	ping := max(n.cfg.LeaseTTL/9, 100*time.Millisecond)
	// What else the NATS configuration says of the cluster (its routes'
	// authorization and TLS) stays.
	opts.Cluster.Name, opts.Cluster.Host, opts.Cluster.Port = n.cfg.ClusterName, host, port
	opts.Cluster.PingInterval, opts.Cluster.MaxPingsOut = ping, 3
	if n.cfg.ClusterAdvertise != "" {
		opts.Cluster.Advertise = n.cfg.ClusterAdvertise
	}
	for _, r := range n.cfg.Routes {
		urls := server.RoutesFromStr(r)
		if len(urls) == 0 {
			return fmt.Errorf("route %q: want nats://host:port", r)
		}
		opts.Routes = append(opts.Routes, urls...)
	}
	return nil
}

// metaOpenRetry is how often the node tries again to open the metadata
// store while the JetStream cluster forms.
const metaOpenRetry = 250 * time.Millisecond

// openMeta opens the metadata store with the configured replicas. In a
// cluster, JetStream answers only once enough servers have joined (a
// replicated bucket needs its replicas' servers): the node tries again
// until it does or ctx ends, saying what it waits for.
func (n *Node) openMeta(ctx context.Context, js jetstream.JetStream) (*meta.Store, error) {
	return untilJetStream(ctx, n, "the metadata store", func(ctx context.Context) (*meta.Store, error) {
		return meta.Open(ctx, js, meta.DefaultBucket, n.cfg.MetaReplicas)
	})
}

// openTier opens the remote tier's object store bucket, with the
// metadata's replicas, as openMeta opens the metadata store.
func (n *Node) openTier(ctx context.Context, js jetstream.JetStream) (*tier.Tier, error) {
	return untilJetStream(ctx, n, "the remote tier", func(ctx context.Context) (*tier.Tier, error) {
		return tier.Open(ctx, js, tier.Config{Root: filepath.Join(n.cfg.DataDir, "topics"), CacheDir: filepath.Join(n.cfg.DataDir, "tier-cache"),
			CacheBytes: n.cfg.TierCacheBytes, Replicas: n.cfg.MetaReplicas})
	})
}

// untilJetStream runs open (which makes or binds a replicated JetStream
// asset) until it succeeds or ctx ends: alone, once; in a cluster, again
// and again while the JetStream cluster forms and elects its leaders.
func untilJetStream[T any](ctx context.Context, n *Node, what string, open func(context.Context) (T, error)) (T, error) {
	if n.cfg.ClusterListen == "" {
		return open(ctx)
	}
	t0 := time.Now()
	lastLog := t0
	// JetStream answers nothing until its cluster has elected a leader:
	// short attempts at first, longer ones once a leader may be busy
	// creating the replicated asset.
	attempt := time.Second
	for {
		octx, cancel := context.WithTimeout(ctx, attempt)
		attempt = min(2*attempt, 10*time.Second)
		v, err := open(octx)
		cancel()
		if err == nil {
			n.log.Info(what+" ready", "replicas", n.cfg.MetaReplicas, "waited", time.Since(t0).Round(time.Millisecond))
			return v, nil
		}
		if time.Since(lastLog) >= 5*time.Second {
			lastLog = time.Now()
			n.log.Warn("waiting for the NATS cluster to form ("+what+" needs its replicas' servers)",
				"replicas", n.cfg.MetaReplicas, "routes", n.cfg.Routes, "waited", time.Since(t0).Round(time.Second), "err", err)
		}
		select {
		case <-ctx.Done():
			var zero T
			return zero, fmt.Errorf("opening %s (%d replicas) in the NATS cluster: %w (last: %v)", what, n.cfg.MetaReplicas, ctx.Err(), err)
		case <-time.After(metaOpenRetry):
		}
		if errors.Is(err, context.Canceled) && ctx.Err() != nil {
			var zero T
			return zero, err
		}
	}
}
