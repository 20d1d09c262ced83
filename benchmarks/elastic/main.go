// Command elastic measures how Braid's elastic topics follow load, with the
// default policies, on this machine, against `braid serve` as its own
// process (-inproc: the node inside this program, the old mode):
//
//  1. a load step from 1 % to 10x the split threshold (10,000 msg/s in) on
//     a one-segment topic: the time until the topic has enough segments
//     that no segment is offered more than the threshold, the producer's
//     latency during it, and the acknowledged rate in every window after
//     the step (it should never drop); then the topic is read back to check
//     that every message came once and in per-key order;
//
//  2. produce throughput of one topic at 1, 2, 4, 8 and 16 segments
//     (automatic scaling off, the default entry-bucket budget).
//
//     go run ./benchmarks/elastic [-before 100] [-after 100000] [-warmup 5s] [-hold 12s] [-keys 10000] [-size 100]
//     [-verify=true] [-messages 1000000] [-skip-step] [-skip-throughput] [-inproc] [-braid bin]
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"runtime"
	"time"

	"github.com/braidmq/braid/benchmarks/workload"
	"github.com/braidmq/braid/client"
	"github.com/braidmq/braid/scaling"
)

func main() {
	threshold := scaling.Default.Split.MsgIn
	before := flag.Float64("before", threshold/100, "msg/s before the step (1% of the split threshold)")
	after := flag.Float64("after", 10*threshold, "msg/s after the step (10x the split threshold)")
	warmup := flag.Duration("warmup", 5*time.Second, "time at the low rate before the step")
	hold := flag.Duration("hold", 12*time.Second, "time at the high rate")
	keys := flag.Int("keys", 10_000, "distinct keys")
	size := flag.Int("size", 100, "payload bytes")
	verify := flag.Bool("verify", true, "read the step's topic back and check order")
	messages := flag.Int("messages", 1_000_000, "messages per throughput run")
	skipStep := flag.Bool("skip-step", false, "skip the load step")
	skipThroughput := flag.Bool("skip-throughput", false, "skip the throughput runs")
	serverFlags := workload.RegisterBraidFlags(flag.CommandLine)
	flag.Parse()
	ctx := context.Background()
	var err error
	servers, err = serverFlags.Servers()
	check(err)
	defer servers.Close()
	fmt.Println(servers.Mode())

	fmt.Printf("machine: %d CPUs, %s/%s, %s; durability always (the default)\n\n", runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version())
	if !*skipStep {
		spec := workload.StepSpec{Keys: *keys, Size: *size, Before: *before, After: *after, Warmup: *warmup, Hold: *hold,
			Threshold: threshold, Window: 500 * time.Millisecond}
		step(ctx, spec, *verify)
	}
	if *skipThroughput {
		return
	}
	fmt.Printf("\nthroughput of one topic by segment count (%d x %d B, %d keys, auto_scale off, entry-bucket budget 4):\n", *messages, *size, *keys)
	for _, segments := range []int{1, 2, 4, 8, 16} {
		res, units := throughput(ctx, segments, workload.Spec{Messages: *messages, Size: *size, Keys: *keys})
		res.Name = fmt.Sprintf("%2d segments, %2d entry buckets", segments, units)
		fmt.Println(res)
	}
}

func step(ctx context.Context, spec workload.StepSpec, verify bool) {
	check(servers.WithBraid(workload.BraidConfig{Durability: "always"}, func(b *workload.Braid) error {
		nc := b.NC
		const uri = "topic://public/default/step"
		if err := workload.CreateTopicWith(ctx, nc, uri, 1, 0, ""); err != nil {
			return err
		}
		fmt.Printf("load step %.0f -> %.0f msg/s (split threshold %.0f), %d keys, default policies:\n", spec.Before, spec.After, spec.Threshold, spec.Keys)
		res, err := workload.StepLoad(ctx, nc, uri, spec)
		if err != nil {
			return err
		}
		fmt.Println(" ", res)
		fmt.Printf("  sent msg/s per %s after the step:  %s\n", spec.Window, workload.FormatRates(res.SendRates))
		fmt.Printf("  acked msg/s per %s after the step: %s\n", spec.Window, workload.FormatRates(res.AckRates))
		// The first window holds the ramp (a 1000x step into one segment),
		// the last is partial.
		last := len(res.AckRates) - 1
		fmt.Printf("  lowest acked rate: %.1fk msg/s in the ramp window, %.1fk msg/s after it",
			res.AckRates[0]/1000, workload.MinRate(res.AckRates, 1, last)/1000)
		if res.Settled > 0 {
			at := int(res.Settled / spec.Window)
			fmt.Printf(", %.1fk msg/s within 1 s of the split", workload.MinRate(res.AckRates, at-2, at+3)/1000)
		}
		fmt.Println()
		if !verify {
			return nil
		}
		lost, dup, reordered, err := workload.CheckOrder(ctx, nc, uri, "order-check", res.Acked)
		fmt.Printf("  read back %d: lost %d, duplicates %d, out of per-key order %d\n", res.Acked, lost, dup, reordered)
		return err
	}))
}

func throughput(ctx context.Context, segments int, spec workload.Spec) (res workload.Result, units int) {
	check(servers.WithBraid(workload.BraidConfig{Durability: "always"}, func(b *workload.Braid) error {
		const uri = "topic://public/default/tp"
		if err := workload.CreateTopicWith(ctx, b.NC, uri, segments, 0, `{"auto_scale":false}`); err != nil {
			return err
		}
		var err error
		res, err = workload.Measure(b.MeterCPU, func() (workload.Result, error) {
			return workload.ProduceBraid(ctx, b.NC, uri, spec, client.WithMaxInFlight(50_000))
		})
		return err
	}))
	return res, max(segments, 4)
}

// servers runs the Braid servers.
var servers *workload.Servers

func check(err error) {
	if err != nil {
		if servers != nil {
			servers.Close()
		}
		log.Fatal(err)
	}
}
