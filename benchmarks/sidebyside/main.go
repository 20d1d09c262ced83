// Command sidebyside runs the same produce and replay workloads through
// Braid and through NATS JetStream (file storage) on this machine, in one
// run, and prints them side by side with ratios, then measures the
// producer-visible pause of a split under load.
//
//	go run ./benchmarks/sidebyside [-messages 1000000] [-messages-1k 1000000] [-sync-messages 20000]
//	    [-sizes 100,1024] [-replay=true] [-split=true]
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/braidmq/braid/benchmarks/workload"
	"github.com/braidmq/braid/client"
	"github.com/nats-io/nats.go"
)

func main() {
	messages := flag.Int("messages", 1_000_000, "messages per 100 B produce run and per replay")
	bigMessages := flag.Int("messages-1k", 1_000_000, "messages per 1 KiB produce run")
	syncMessages := flag.Int("sync-messages", 20_000, "messages for JetStream with sync always (it is slow)")
	keys := flag.Int("keys", 10_000, "distinct keys")
	splitRate := flag.Int("split-rate", 20_000, "steady produce rate of the split-under-load run (msg/s)")
	sizesFlag := flag.String("sizes", "100,1024", "payload sizes of the produce rows, comma-separated (empty: none)")
	doReplay := flag.Bool("replay", true, "measure the replay row")
	doSplit := flag.Bool("split", true, "measure the split under load")
	flag.Parse()
	var sizes []int
	for _, f := range strings.FieldsFunc(*sizesFlag, func(r rune) bool { return r == ',' }) {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			log.Fatalf("-sizes: %q is not a payload size", f)
		}
		sizes = append(sizes, n)
	}
	ctx := context.Background()

	gomaxprocs := runtime.GOMAXPROCS(0)
	fmt.Printf("machine: %d CPUs, %s/%s, %s; Braid runs with GOMAXPROCS=%d, JetStream with the better of %d and %d\n\n",
		runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version(), gomaxprocs, gomaxprocs, 2*gomaxprocs)
	type row struct {
		name  string
		cells map[string]workload.Result
	}
	cols := []string{"braid always", "braid none", "jetstream default sync", "jetstream sync always"}
	var rows []row
	for _, size := range sizes {
		n := *messages
		if size > 100 {
			n = *bigMessages
		}
		r := row{name: fmt.Sprintf("produce %d B, %d keys", size, *keys), cells: map[string]workload.Result{}}
		for _, dur := range []string{"always", "none"} {
			res, err := braidProduce(ctx, dur, workload.Spec{Messages: n, Size: size, Keys: *keys})
			check(err)
			r.cells["braid "+dur] = res
		}
		for _, always := range []bool{false, true} {
			m := n
			name := "jetstream default sync"
			if always {
				m, name = min(n, *syncMessages), "jetstream sync always"
			}
			spec := workload.Spec{Messages: m, Size: size, Keys: *keys}
			r.cells[name] = bestOfProcs(r.name+", "+name, func(procs int) (workload.Result, error) {
				return jsProduce(ctx, always, procs, spec)
			})
		}
		rows = append(rows, r)
	}
	if *doReplay {
		// Replay: write n messages, then read them all back.
		replay := row{name: fmt.Sprintf("replay %d x 100 B", *messages), cells: map[string]workload.Result{}}
		res, err := braidReplay(ctx, workload.Spec{Messages: *messages, Size: 100, Keys: *keys})
		check(err)
		replay.cells["braid always"] = res
		replay.cells["jetstream default sync"] = bestOfProcs(replay.name+", jetstream", func(procs int) (workload.Result, error) {
			return jsReplay(ctx, procs, workload.Spec{Messages: *messages, Size: 100, Keys: *keys})
		})
		rows = append(rows, replay)
	}

	fmt.Printf("%-28s", "workload (msg/s; p50/p99)")
	for _, c := range cols {
		fmt.Printf(" | %-26s", c)
	}
	fmt.Printf(" | %s\n", "braid always / jetstream default")
	fmt.Println(strings.Repeat("-", 28+4*29+36))
	for _, r := range rows {
		fmt.Printf("%-28s", r.name)
		for _, c := range cols {
			cell := "-"
			if res, ok := r.cells[c]; ok {
				cell = fmt.Sprintf("%.0f", res.Rate())
				if res.P99 > 0 {
					cell += fmt.Sprintf(" (%s/%s)", short(res.P50), short(res.P99))
				}
				if res.Errors > 0 {
					cell += fmt.Sprintf(" %d ERR", res.Errors)
				}
			}
			fmt.Printf(" | %-26s", cell)
		}
		a, j := r.cells["braid always"], r.cells["jetstream default sync"]
		fmt.Printf(" | %.2fx\n", a.Rate()/j.Rate())
	}

	if !*doSplit {
		return
	}
	fmt.Println()
	split, err := splitUnderLoad(ctx, *splitRate)
	check(err)
	fmt.Printf("split under load (%d msg/s, 4 s, braid always): %s\n", *splitRate, split)
}

func short(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%dµs", d.Microseconds())
	}
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}

func tempDir() string {
	d, err := os.MkdirTemp("", "braid-bench-")
	check(err)
	return d
}

const uri = "topic://public/default/bench"

func braidProduce(ctx context.Context, durability string, spec workload.Spec) (res workload.Result, err error) {
	err = workload.WithBraid(durability, func(nc *nats.Conn) error {
		if err := workload.CreateTopic(ctx, nc, uri, 4, 16); err != nil {
			return err
		}
		res, err = workload.ProduceBraid(ctx, nc, uri, spec, client.WithMaxInFlight(workload.ProduceWindow))
		return err
	})
	return res, err
}

func braidReplay(ctx context.Context, spec workload.Spec) (res workload.Result, err error) {
	err = workload.WithBraid("always", func(nc *nats.Conn) error {
		if err := workload.CreateTopic(ctx, nc, uri, 4, 16); err != nil {
			return err
		}
		if _, err := workload.ProduceBraid(ctx, nc, uri, spec, client.WithMaxInFlight(workload.ProduceWindow)); err != nil {
			return err
		}
		res, err = workload.ConsumeBraid(ctx, nc, uri, "replay", spec.Messages, 1)
		return err
	})
	return res, err
}

// bestOfProcs runs a JetStream measurement with GOMAXPROCS at the process's
// (the CPUs, as nats-server runs) and at twice that, prints both, and keeps
// the faster: the ratios compare Braid with JetStream at its better setting.
func bestOfProcs(what string, run func(procs int) (workload.Result, error)) workload.Result {
	var best workload.Result
	var rates []string
	base := runtime.GOMAXPROCS(0)
	for _, procs := range []int{base, 2 * base} {
		res, err := run(procs)
		check(err)
		rates = append(rates, fmt.Sprintf("GOMAXPROCS=%d %.0f msg/s", procs, res.Rate()))
		if res.Rate() > best.Rate() {
			best = res
		}
	}
	fmt.Printf("%s: %s\n", what, strings.Join(rates, ", "))
	return best
}

func jsProduce(ctx context.Context, syncAlways bool, procs int, spec workload.Spec) (workload.Result, error) {
	dir := tempDir()
	defer os.RemoveAll(dir)
	js, err := workload.StartJetStream(dir, syncAlways)
	if err != nil {
		return workload.Result{}, err
	}
	defer js.Close()
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
	return js.Produce(ctx, spec)
}

func jsReplay(ctx context.Context, procs int, spec workload.Spec) (workload.Result, error) {
	dir := tempDir()
	defer os.RemoveAll(dir)
	js, err := workload.StartJetStream(dir, false)
	if err != nil {
		return workload.Result{}, err
	}
	defer js.Close()
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
	if _, err := js.Produce(ctx, spec); err != nil {
		return workload.Result{}, err
	}
	return js.ConsumeOrdered(ctx, spec.Messages)
}

func splitUnderLoad(ctx context.Context, rate int) (res workload.SplitResult, err error) {
	err = workload.WithBraid("always", func(nc *nats.Conn) error {
		if err := workload.CreateTopic(ctx, nc, uri, 4, 16); err != nil {
			return err
		}
		res, err = workload.SplitUnderLoad(ctx, nc, uri, 0, rate, 4*time.Second, 1000)
		return err
	})
	return res, err
}
