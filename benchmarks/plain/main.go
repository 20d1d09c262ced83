// Command plain produces through Braid's produce subject and through a
// JetStream stream subject with the same plain nats.go client (one message
// per request, a window of requests in flight, no Braid code), in
// alternating rounds of one run, and prints the ratio table: what a Python,
// Rust or Java user of either system gets.
//
//	go run ./benchmarks/plain [-messages 200000] [-sizes 100,1024] [-windows 64,512,4096] [-rounds 3]
//	    [-segments 4] [-buckets 0] [-keys 10000] [-durability always] [-only braid|jetstream]
//	    [-cpuprofile file] [-trace file] [-inproc] [-braid bin] [-nats-server bin]
//
// Braid: one topic with -segments segments (automatic scaling off, the
// default entry-bucket budget unless -buckets), durability always (each
// reply after fsync). JetStream: one file-storage stream with its default
// sync (an fsync every 2 minutes), subject per key. Each run starts its
// server afresh in a new directory, as its own process (`braid serve`,
// `nats-server -js`, on their defaults), this program being the client
// only; -inproc runs the servers inside this program instead (the old
// mode, client and servers sharing its CPUs).
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/braidmq/braid/benchmarks/workload"
	"github.com/nats-io/nats.go"
)

func main() {
	messages := flag.Int("messages", 200_000, "messages per run")
	sizesFlag := flag.String("sizes", "100,1024", "payload sizes, comma-separated")
	windowsFlag := flag.String("windows", "64,512,4096", "requests in flight, comma-separated")
	rounds := flag.Int("rounds", 3, "alternating rounds (the order of the two systems flips every round)")
	segments := flag.Int("segments", 4, "segments of the Braid topic")
	buckets := flag.Int("buckets", 0, "entry buckets of the Braid topic in all (0: the default budget)")
	keys := flag.Int("keys", 10_000, "distinct keys")
	durability := flag.String("durability", "always", "Braid's durability")
	only := flag.String("only", "", "run one system only: braid or jetstream (no ratios)")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the runs to this file (of the client only, unless -inproc)")
	traceFile := flag.String("trace", "", "write an execution trace of the runs to this file (of the client only, unless -inproc)")
	serverFlags := workload.RegisterServerFlags(flag.CommandLine)
	flag.Parse()
	var err error
	servers, err = serverFlags.Servers()
	check(err)
	defer servers.Close()
	if *traceFile != "" {
		f, err := os.Create(*traceFile)
		check(err)
		check(trace.Start(f))
		defer trace.Stop()
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		check(err)
		check(pprof.StartCPUProfile(f))
		defer pprof.StopCPUProfile()
	}
	sizes, windows := ints("sizes", *sizesFlag), ints("windows", *windowsFlag)
	ctx := context.Background()
	fmt.Println(servers.Mode())
	fmt.Printf("machine: %d CPUs, GOMAXPROCS %d, %s; %d messages per run, %d keys, Braid %d segments durability %s, JetStream file stream default sync\n\n",
		runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version(), *messages, *keys, *segments, *durability)

	type cell struct{ braid, js []workload.Result }
	cells := map[[2]int]*cell{}
	for round := 0; round < *rounds; round++ {
		for _, size := range sizes {
			for _, w := range windows {
				spec := workload.Spec{Messages: *messages, Size: size, Keys: *keys}
				c := cells[[2]int{size, w}]
				if c == nil {
					c = &cell{}
					cells[[2]int{size, w}] = c
				}
				runBraid := func() {
					res, err := braid(ctx, spec, w, *segments, *buckets, *durability)
					check(err)
					res.Name = "braid"
					c.braid = append(c.braid, res)
					fmt.Printf("round %d  %5d B  w=%-5d %s\n", round+1, size, w, res)
				}
				runJS := func() {
					res, err := jetstream(ctx, spec, w)
					check(err)
					res.Name = "jetstream"
					c.js = append(c.js, res)
					fmt.Printf("round %d  %5d B  w=%-5d %s\n", round+1, size, w, res)
				}
				switch {
				case *only == "braid":
					runBraid()
				case *only == "jetstream":
					runJS()
				case round%2 == 0:
					runBraid()
					runJS()
				default:
					runJS()
					runBraid()
				}
			}
		}
	}

	if *only != "" {
		return
	}
	fmt.Println()
	fmt.Println(servers.Mode())
	cpuHead := " server CPU/msg"
	if servers.InProc() {
		cpuHead = "" // one process: the server's share is not known
	}
	fmt.Printf("%-8s %-6s | %-40s | %-40s | %s\n", "size", "window", "Braid msg/s (p50 / p99)"+cpuHead, "JetStream msg/s (p50 / p99)"+cpuHead, "ratio: median [min, max] of rounds")
	fmt.Println(strings.Repeat("-", 130))
	for _, size := range sizes {
		for _, w := range windows {
			c := cells[[2]int{size, w}]
			var ratios []float64
			for i := range c.braid {
				ratios = append(ratios, c.braid[i].Rate()/c.js[i].Rate())
			}
			slices.Sort(ratios)
			b, j := median(c.braid), median(c.js)
			fmt.Printf("%-8s %-6d | %-40s | %-40s | %.2fx [%.2f, %.2f]\n", fmt.Sprintf("%d B", size), w,
				summary(b), summary(j), ratios[len(ratios)/2], ratios[0], ratios[len(ratios)-1])
		}
	}
}

// median returns the run of median rate.
func median(rs []workload.Result) workload.Result {
	s := slices.Clone(rs)
	slices.SortFunc(s, func(a, b workload.Result) int {
		switch {
		case a.Rate() < b.Rate():
			return -1
		case a.Rate() > b.Rate():
			return 1
		}
		return 0
	})
	return s[len(s)/2]
}

// summary is a run's rate, latency and server CPU time per message.
func summary(r workload.Result) string {
	s := fmt.Sprintf("%.0f (%s / %s)", r.Rate(), short(r.P50), short(r.P99))
	if per, ok := r.CPU.ServerPerMessage(r.Messages); ok {
		s += fmt.Sprintf(" %.1fµs", float64(per)/float64(time.Microsecond))
	}
	if r.Errors > 0 {
		s += fmt.Sprintf(" %d ERR", r.Errors)
	}
	return s
}

func short(d time.Duration) string {
	if d >= time.Millisecond {
		return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%dµs", d.Microseconds())
}

const (
	tenant, namespace, topic = "public", "default", "plain"
	replyTimeout             = 2 * time.Minute
)

// servers runs the servers the rounds measure.
var servers *workload.Servers

// braid measures one plain-client run against a new Braid server, and notes
// how many messages each of its log writes and fsyncs carried.
func braid(ctx context.Context, spec workload.Spec, window, segments, buckets int, durability string) (res workload.Result, err error) {
	err = servers.WithBraid(workload.BraidConfig{Durability: durability}, func(b *workload.Braid) error {
		uri := "topic://" + tenant + "/" + namespace + "/" + topic
		if err := workload.CreateTopic(ctx, b.NC, uri, segments, buckets); err != nil {
			return err
		}
		before, err := b.WALCounts()
		if err != nil {
			return err
		}
		res, err = workload.Measure(b.MeterCPU, func() (workload.Result, error) {
			return workload.PlainProduce(ctx, b.NC, workload.BraidTarget(tenant, namespace, topic, spec), spec, window, replyTimeout)
		})
		if err != nil {
			return err
		}
		io, err := b.WALCounts()
		if err != nil {
			return err
		}
		res.Note = fmt.Sprintf("%.1f msgs/write %.1f msgs/fsync", float64(spec.Messages)/float64(max(io.Writes-before.Writes, 1)),
			float64(spec.Messages)/float64(max(io.Syncs-before.Syncs, 1)))
		return nil
	})
	return res, err
}

func jetstream(ctx context.Context, spec workload.Spec, window int) (workload.Result, error) {
	dir, err := os.MkdirTemp("", "braid-bench-js-")
	if err != nil {
		return workload.Result{}, err
	}
	defer os.RemoveAll(dir)
	js, err := servers.StartJetStream(dir, false)
	if err != nil {
		return workload.Result{}, err
	}
	defer func() {
		if err := js.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "warning:", err)
		}
	}()
	nc, err := nats.Connect(js.URL())
	if err != nil {
		return workload.Result{}, err
	}
	defer nc.Close()
	return workload.Measure(js.MeterCPU, func() (workload.Result, error) {
		return workload.PlainProduce(ctx, nc, workload.JetStreamTarget(spec), spec, window, replyTimeout)
	})
}

func ints(name, s string) []int {
	var out []int
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' }) {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			log.Fatalf("-%s: %q is not a positive number", name, f)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		log.Fatalf("-%s: empty", name)
	}
	return out
}

func check(err error) {
	if err != nil {
		if servers != nil {
			servers.Close()
		}
		log.Fatal(err)
	}
}
