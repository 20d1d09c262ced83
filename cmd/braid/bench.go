package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"

	"github.com/braidmq/braid/benchmarks/workload"
	"github.com/braidmq/braid/client"
)

// benchCmd measures produce and replay throughput against a running server.
// For the side-by-side comparison with JetStream see benchmarks/sidebyside.
func benchCmd(args []string) error {
	fs := flag.NewFlagSet("bench", flag.ExitOnError)
	fs.Usage = usageOf(fs, "braid bench [--messages N] [--size B] [--keys K] [--segments S] [--buckets B] [--keep]")
	var cf clientFlags
	cf.register(fs)
	messages := fs.Int("messages", 1_000_000, "messages to produce, then to replay")
	size := fs.Int("size", 100, "payload bytes")
	keys := fs.Int("keys", 10_000, "distinct keys (0: unkeyed)")
	segments := fs.Int("segments", 4, "segments of the benchmark topic")
	buckets := fs.Int("buckets", 16, "entry buckets of the benchmark topic in all")
	consumers := fs.Int("consumers", 1, "stream consumers replaying")
	inflight := fs.Int("inflight", 50_000, "producer in-flight window")
	keep := fs.Bool("keep", false, "keep the benchmark topic afterwards")
	if _, err := parseInterleaved(fs, args); err != nil {
		return err
	}
	if *messages < 1 || *size < 0 || *keys < 0 {
		return errors.New("bench: messages must be >= 1, size and keys >= 0")
	}
	nc, err := cf.connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, stop := signalContext()
	defer stop()
	uri := fmt.Sprintf("topic://public/default/bench-%08x", rand.Uint32())
	if err := workload.CreateTopic(ctx, nc, uri, *segments, *buckets); err != nil {
		return err
	}
	if !*keep {
		defer client.NewAdmin(nc).DeleteTopic(context.Background(), uri)
	}
	fmt.Fprintf(os.Stderr, "topic %s: %d segments, %d buckets; %d x %d B messages over %d keys\n", uri, *segments, *buckets, *messages, *size, *keys)
	prod, err := workload.ProduceBraid(ctx, nc, uri, workload.Spec{Messages: *messages, Size: *size, Keys: *keys}, client.WithMaxInFlight(*inflight))
	if err != nil {
		return err
	}
	prod.Name = "produce"
	fmt.Println(prod)
	cons, err := workload.ConsumeBraid(ctx, nc, uri, "bench", *messages, *consumers)
	if err != nil {
		return err
	}
	cons.Name = fmt.Sprintf("replay (%d stream consumers)", *consumers)
	fmt.Println(cons)
	return nil
}
