// Command sidebyside runs the same produce and replay workloads through
// Braid and through NATS JetStream (file storage) on this machine, in one
// run, and prints them side by side with ratios, then measures the
// producer-visible pause of a split under load.
//
// The machine is shared and noisy, so one run of each system says little.
// Every row is measured in -rounds rounds; a round runs the systems in
// turn (Braid, JetStream, Braid, JetStream), each on a new node or server
// in a new data directory with a new topic or stream, so that rounds are
// independent and a slow stretch of the machine falls on both systems
// alike. A ratio is computed per round, from that round's pair, and the
// program prints the median of a row's per-round ratios and their spread
// (min-max).
//
// Each server is its own process, as users run them: `braid serve` and
// `nats-server -js` on their defaults, this program the client only, and
// each run prints the CPU time the server and the client spent per
// message. -inproc runs both servers inside this program instead (the old
// mode), where JetStream gets the better of two GOMAXPROCS settings.
//
//	go run ./benchmarks/sidebyside [-rounds 3] [-messages 1000000] [-messages-1k 1000000] [-sync-messages 20000]
//	    [-sizes 100,1024] [-replay=true] [-split=true] [-inproc] [-braid bin] [-nats-server bin]
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
)

// The columns of a row, in the order a round runs them: the systems
// alternate, and each ratio's two cells run close together.
const (
	braidAlways = "braid always"
	jsDefault   = "jetstream default sync"
	braidNone   = "braid none"
	jsAlways    = "jetstream sync always"
)

var cols = []string{braidAlways, braidNone, jsDefault, jsAlways}

// ratios are the per-round ratios reported for each row; the first is the
// headline (what this program has always compared).
var ratios = []ratio{
	{braidAlways, jsDefault, "Braid fsyncs before the ack, JetStream does not: not like for like"},
	{braidAlways, jsAlways, "both fsync before the ack"},
	{braidNone, jsDefault, "neither fsyncs before the ack"},
}

func main() {
	messages := flag.Int("messages", 1_000_000, "messages per 100 B produce run and per replay")
	bigMessages := flag.Int("messages-1k", 1_000_000, "messages per 1 KiB produce run")
	syncMessages := flag.Int("sync-messages", 20_000, "messages for JetStream with sync always (it is slow)")
	keys := flag.Int("keys", 10_000, "distinct keys")
	splitRate := flag.Int("split-rate", 20_000, "steady produce rate of the split-under-load run (msg/s)")
	sizesFlag := flag.String("sizes", "100,1024", "payload sizes of the produce rows, comma-separated (empty: none)")
	doReplay := flag.Bool("replay", true, "measure the replay row")
	doSplit := flag.Bool("split", true, "measure the split under load")
	rounds := flag.Int("rounds", 3, "rounds per row (Braid and JetStream alternating, each on a new node or server)")
	serverFlags := workload.RegisterServerFlags(flag.CommandLine)
	flag.Parse()
	var sizes []int
	for _, f := range strings.FieldsFunc(*sizesFlag, func(r rune) bool { return r == ',' }) {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			log.Fatalf("-sizes: %q is not a payload size", f)
		}
		sizes = append(sizes, n)
	}
	if *rounds < 1 {
		log.Fatalf("-rounds: %d, want at least 1", *rounds)
	}
	ctx := context.Background()
	var err error
	servers, err = serverFlags.Servers()
	check(err)
	defer servers.Close()

	gomaxprocs := runtime.GOMAXPROCS(0)
	fmt.Println(servers.Mode())
	if servers.InProc() {
		fmt.Printf("machine: %d CPUs, %s/%s, %s; Braid runs with GOMAXPROCS=%d, JetStream with the better of %d and %d (per run)\n",
			runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version(), gomaxprocs, gomaxprocs, 2*gomaxprocs)
	} else {
		fmt.Printf("machine: %d CPUs, %s/%s, %s; each server with its default GOMAXPROCS (the CPUs)\n",
			runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version())
	}
	fmt.Println("durability:")
	fmt.Println("  braid always           acknowledges a produce batch after its fsync (Braid's default)")
	fmt.Println("  braid none             acknowledges after the write, before any fsync")
	fmt.Println("  jetstream default sync file store with its defaults: acknowledges after the write, fsyncs on a 2-minute")
	fmt.Println("                         interval (sync_interval), longer than any run here")
	fmt.Printf("  jetstream sync always  file store with sync always: fsyncs every write before the ack (%d messages per run)\n", *syncMessages)
	fmt.Printf("headline ratio: %s / %s (%s)\n", ratios[0].num, ratios[0].den, ratios[0].note)
	fmt.Printf("%d rounds per row; a round runs %s, %s, %s, %s, each on a new node or server\n",
		*rounds, braidAlways, jsDefault, braidNone, jsAlways)
	fmt.Println("in a new data directory; ratios are per round, then the median and the spread (min-max) of the rounds.")
	if *rounds < 3 {
		fmt.Printf("note: only %d round(s): the spread says little\n", *rounds)
	}
	fmt.Println()

	var rows []rowResult
	for _, size := range sizes {
		n := *messages
		if size > 100 {
			n = *bigMessages
		}
		spec := workload.Spec{Messages: n, Size: size, Keys: *keys}
		syncSpec := workload.Spec{Messages: min(n, *syncMessages), Size: size, Keys: *keys}
		r := row{
			name:   fmt.Sprintf("produce %d B, %d keys", size, *keys),
			detail: fmt.Sprintf("%d messages per run, %d with JetStream sync always", n, syncSpec.Messages),
			cells: []cell{
				{braidAlways, func() (workload.Result, error) { return braidProduce(ctx, "always", spec) }},
				{jsDefault, func() (workload.Result, error) {
					return jsRun(func(procs int) (workload.Result, error) { return jsProduce(ctx, false, procs, spec) })
				}},
				{braidNone, func() (workload.Result, error) { return braidProduce(ctx, "none", spec) }},
				{jsAlways, func() (workload.Result, error) {
					return jsRun(func(procs int) (workload.Result, error) { return jsProduce(ctx, true, procs, syncSpec) })
				}},
			},
		}
		rows = append(rows, r.measure(*rounds))
	}
	if *doReplay {
		// Replay: write n messages, then read them all back.
		spec := workload.Spec{Messages: *messages, Size: 100, Keys: *keys}
		r := row{
			name:   fmt.Sprintf("replay %d x 100 B", *messages),
			detail: "write the messages, then time reading them all back: one Braid stream consumer (acking each), one JetStream ordered consumer",
			cells: []cell{
				{braidAlways, func() (workload.Result, error) { return braidReplay(ctx, spec) }},
				{jsDefault, func() (workload.Result, error) {
					return jsRun(func(procs int) (workload.Result, error) { return jsReplay(ctx, procs, spec) })
				}},
			},
		}
		rows = append(rows, r.measure(*rounds))
	}

	if len(rows) > 0 {
		printMedians(rows)
		fmt.Println()
		printSummary(rows)
		fmt.Println(servers.Mode())
		if !servers.InProc() {
			fmt.Println()
			printServerCPU(rows)
		}
	}

	if !*doSplit {
		return
	}
	fmt.Println()
	runtime.GC()
	split, err := splitUnderLoad(ctx, *splitRate)
	check(err)
	fmt.Printf("split under load (%d msg/s, 4 s, braid always, one run): %s\n", *splitRate, split)
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

// servers runs the servers the rows measure.
var servers *workload.Servers

func check(err error) {
	if err != nil {
		if servers != nil {
			servers.Close()
		}
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
	err = servers.WithBraid(workload.BraidConfig{Durability: durability}, func(b *workload.Braid) error {
		if err := workload.CreateTopic(ctx, b.NC, uri, 4, 16); err != nil {
			return err
		}
		res, err = workload.Measure(b.MeterCPU, func() (workload.Result, error) {
			return workload.ProduceBraid(ctx, b.NC, uri, spec, client.WithMaxInFlight(workload.ProduceWindow))
		})
		return err
	})
	return res, err
}

func braidReplay(ctx context.Context, spec workload.Spec) (res workload.Result, err error) {
	err = servers.WithBraid(workload.BraidConfig{Durability: "always"}, func(b *workload.Braid) error {
		if err := workload.CreateTopic(ctx, b.NC, uri, 4, 16); err != nil {
			return err
		}
		if _, err := workload.ProduceBraid(ctx, b.NC, uri, spec, client.WithMaxInFlight(workload.ProduceWindow)); err != nil {
			return err
		}
		res, err = workload.Measure(b.MeterCPU, func() (workload.Result, error) {
			return workload.ConsumeBraid(ctx, b.NC, uri, "replay", spec.Messages, 1)
		})
		return err
	})
	return res, err
}

// jsRun runs a JetStream measurement: on the server's own GOMAXPROCS when
// it is its own process (procs 0), at its better of two settings
// in-process (bestOfProcs).
func jsRun(run func(procs int) (workload.Result, error)) (workload.Result, error) {
	if servers.InProc() {
		return bestOfProcs(run)
	}
	return run(0)
}

// bestOfProcs runs a JetStream measurement with GOMAXPROCS at the process's
// (the CPUs, as nats-server runs) and at twice that, each on its own
// server, and keeps the faster: the ratios compare Braid with JetStream at
// its better setting. The result's Note gives both rates.
func bestOfProcs(run func(procs int) (workload.Result, error)) (workload.Result, error) {
	var best workload.Result
	var rates []string
	bestProcs := 0
	base := runtime.GOMAXPROCS(0)
	for _, procs := range []int{base, 2 * base} {
		runtime.GC()
		res, err := run(procs)
		if err != nil {
			return workload.Result{}, err
		}
		rates = append(rates, fmt.Sprintf("%d: %.0f", procs, res.Rate()))
		if bestProcs == 0 || res.Rate() > best.Rate() {
			best, bestProcs = res, procs
		}
	}
	best.Note = fmt.Sprintf("(GOMAXPROCS %s; kept %d)", strings.Join(rates, ", "), bestProcs)
	return best, nil
}

// startJetStream starts a JetStream server in a new directory; in-process
// with procs set, this program runs at GOMAXPROCS procs until the
// returned stop.
func startJetStream(syncAlways bool, procs int) (js *workload.JetStream, stop func(), err error) {
	dir := tempDir()
	js, err = servers.StartJetStream(dir, syncAlways)
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	restore := runtime.GOMAXPROCS(0)
	if procs > 0 {
		runtime.GOMAXPROCS(procs)
	}
	return js, func() {
		runtime.GOMAXPROCS(restore)
		if err := js.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "warning:", err)
		}
		os.RemoveAll(dir)
	}, nil
}

func jsProduce(ctx context.Context, syncAlways bool, procs int, spec workload.Spec) (workload.Result, error) {
	js, stop, err := startJetStream(syncAlways, procs)
	if err != nil {
		return workload.Result{}, err
	}
	defer stop()
	return workload.Measure(js.MeterCPU, func() (workload.Result, error) { return js.Produce(ctx, spec) })
}

func jsReplay(ctx context.Context, procs int, spec workload.Spec) (workload.Result, error) {
	js, stop, err := startJetStream(false, procs)
	if err != nil {
		return workload.Result{}, err
	}
	defer stop()
	if _, err := js.Produce(ctx, spec); err != nil {
		return workload.Result{}, err
	}
	return workload.Measure(js.MeterCPU, func() (workload.Result, error) { return js.ConsumeOrdered(ctx, spec.Messages) })
}

func splitUnderLoad(ctx context.Context, rate int) (res workload.SplitResult, err error) {
	err = servers.WithBraid(workload.BraidConfig{Durability: "always"}, func(b *workload.Braid) error {
		if err := workload.CreateTopic(ctx, b.NC, uri, 4, 16); err != nil {
			return err
		}
		res, err = workload.SplitUnderLoad(ctx, b.NC, uri, 0, rate, 4*time.Second, 1000)
		return err
	})
	return res, err
}
