package main

import (
	"context"
	"fmt"
	"math/rand/v2"

	"github.com/braidmq/braid/benchmarks/workload"
	"github.com/braidmq/braid/client"
	"github.com/spf13/cobra"
)

// benchCommand measures produce and replay throughput against a running
// server. For the side-by-side comparison with JetStream see
// benchmarks/sidebyside.
func benchCommand() *cobra.Command {
	var cf clientFlags
	cmd := &cobra.Command{Use: "bench", Short: "produce, then replay, a temporary topic against a running server", Args: cobra.NoArgs}
	cf.register(cmd)
	messages := cmd.Flags().Int("messages", 1_000_000, "messages to produce, then to replay")
	size := cmd.Flags().Int("size", 100, "payload bytes")
	keys := cmd.Flags().Int("keys", 10_000, "distinct keys (0: unkeyed)")
	segments := cmd.Flags().Int("segments", 4, "segments of the benchmark topic")
	buckets := cmd.Flags().Int("buckets", 16, "entry buckets of the benchmark topic in all")
	consumers := cmd.Flags().Int("consumers", 1, "stream consumers replaying")
	inflight := cmd.Flags().Int("inflight", 50_000, "producer in-flight window")
	keep := cmd.Flags().Bool("keep", false, "keep the benchmark topic afterwards")
	cmd.RunE = func(c *cobra.Command, _ []string) error {
		for _, f := range []struct {
			name  string
			v, lo int
		}{{"messages", *messages, 1}, {"size", *size, 0}, {"keys", *keys, 0}, {"segments", *segments, 1}, {"buckets", *buckets, 1},
			{"consumers", *consumers, 1}, {"inflight", *inflight, 1}} {
			if err := positive(f.name, f.v, f.lo); err != nil {
				return err
			}
		}
		nc, ctx, done, err := cf.session()
		if err != nil {
			return err
		}
		defer done()
		uri := fmt.Sprintf("topic://public/default/bench-%08x", rand.Uint32())
		if err := workload.CreateTopic(ctx, nc, uri, *segments, *buckets); err != nil {
			return err
		}
		if !*keep {
			defer client.NewAdmin(nc).DeleteTopic(context.Background(), uri)
		}
		fmt.Fprintf(c.ErrOrStderr(), "topic %s: %d segments, %d buckets; %d x %d B messages over %d keys\n", uri, *segments, *buckets, *messages, *size, *keys)
		bar := newProgress(c.ErrOrStderr(), "produce", int64(*messages))
		prod, err := workload.ProduceBraid(ctx, nc, uri, workload.Spec{Messages: *messages, Size: *size, Keys: *keys, Progress: bar.set},
			client.WithMaxInFlight(*inflight))
		bar.finish(int64(*messages))
		if err != nil {
			return err
		}
		prod.Name = "produce"
		fmt.Fprintln(c.OutOrStdout(), prod)
		bar = newProgress(c.ErrOrStderr(), "replay", int64(*messages))
		cons, err := workload.ConsumeBraidProgress(ctx, nc, uri, "bench", *messages, *consumers, bar.set)
		bar.finish(int64(*messages))
		if err != nil {
			return err
		}
		cons.Name = fmt.Sprintf("replay (%d stream consumers)", *consumers)
		fmt.Fprintln(c.OutOrStdout(), cons)
		return nil
	}
	return cmd
}
