// Command secure measures what tenant isolation costs on the produce path:
// a tenant (acme) producing through its service imports over TLS to a
// Braid configured as examples/secure, against an open Braid (no accounts,
// no TLS) in the same process, alternating rounds; the Go producer and a
// plain NATS client (one message per request, a window in flight).
//
//	go run ./benchmarks/secure -messages 200000 -rounds 5
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"time"

	"github.com/braidmq/braid/benchmarks/workload"
	"github.com/braidmq/braid/client"
	"github.com/braidmq/braid/examples/secure/gen"
	braidnode "github.com/braidmq/braid/node"
	"github.com/nats-io/nats.go"
)

func main() {
	messages := flag.Int("messages", 200000, "messages a run")
	rounds := flag.Int("rounds", 5, "alternating rounds")
	size := flag.Int("size", 100, "payload bytes")
	window := flag.Int("window", 512, "requests in flight of the plain client")
	useTLS := flag.Bool("tls", true, "the secured listener takes TLS only (false: accounts and imports alone)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the secured plain runs to this file")
	flag.Parse()
	dir, err := os.MkdirTemp("", "braid-secure-bench-")
	check(err)
	defer os.RemoveAll(dir)
	ctx := context.Background()

	// The secured node: examples/secure's accounts, TLS only.
	files, err := gen.Generate(filepath.Join(dir, "generated"))
	check(err)
	accounts, err := os.ReadFile("examples/secure/accounts.conf")
	check(err)
	check(os.WriteFile(filepath.Join(dir, "accounts.conf"), accounts, 0o600))
	conf := "listen: 127.0.0.1:-1\ninclude \"accounts.conf\"\n"
	if *useTLS {
		conf += "include \"generated/tls.conf\"\n"
	}
	check(os.WriteFile(filepath.Join(dir, "nats.conf"), []byte(conf), 0o600))
	secured, err := braidnode.Start(ctx, braidnode.Config{DataDir: filepath.Join(dir, "secure"), NATSConfig: filepath.Join(dir, "nats.conf"),
		OperatorAccount: "OPS", MetricsListen: "off", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	check(err)
	defer secured.Close()
	tlsOpt := nats.RootCAs(files.CA)
	if !*useTLS {
		tlsOpt = func(*nats.Options) error { return nil }
	}
	ops, err := nats.Connect(secured.ClientURL(), nats.UserInfo("ops", "ops-secret"), tlsOpt)
	check(err)
	check(client.NewAdmin(ops).CreateTenant(ctx, "acme"))
	acme, err := nats.Connect(secured.ClientURL(), nats.UserInfo("acme", "acme-secret"), tlsOpt)
	check(err)
	check(client.NewAdmin(acme).CreateNamespace(ctx, "acme/bench", nil, 0))

	// The open node.
	open, plain, err := workload.StartBraid(filepath.Join(dir, "open"), "always")
	check(err)
	defer open.Close()
	check(client.NewAdmin(plain).CreateNamespace(ctx, "public/bench", nil, 0))

	spec := workload.Spec{Messages: *messages, Size: *size, Keys: 1000}
	type system struct {
		name   string
		nc     *nats.Conn
		tenant string
	}
	systems := []system{{"open", plain, "public"}, {"acme over imports and TLS", acme, "acme"}}
	rates := map[string][]float64{}
	for r := range *rounds {
		order := systems
		if r%2 == 1 {
			order = []system{systems[1], systems[0]}
		}
		for _, s := range order {
			for _, kind := range []string{"go", "plain"} {
				topic := fmt.Sprintf("t%d%s", r, kind)
				uri := fmt.Sprintf("topic://%s/bench/%s", s.tenant, topic)
				check(workload.CreateTopic(ctx, s.nc, uri, 4, 0))
				var res workload.Result
				if kind == "go" {
					res, err = workload.ProduceBraid(ctx, s.nc, uri, spec)
				} else {
					if *cpuprofile != "" && s.tenant == "acme" {
						f, err := os.Create(*cpuprofile)
						check(err)
						check(pprof.StartCPUProfile(f))
						defer pprof.StopCPUProfile()
					}
					res, err = workload.PlainProduce(ctx, s.nc, workload.BraidTarget(s.tenant, "bench", topic, spec), spec, *window, time.Minute)
				}
				check(err)
				rates[s.name+" "+kind] = append(rates[s.name+" "+kind], res.Rate())
			}
		}
	}
	fmt.Printf("%d messages of %d bytes over 1000 keys, 4 segments, fsync before ack; %d alternating rounds; secured listener TLS only: %v\n\n", *messages, *size, *rounds, *useTLS)
	fmt.Println("| client | open msg/s | acme (imports, TLS) msg/s | secured/open median [min, max] |")
	fmt.Println("|---|---|---|---|")
	for _, kind := range []string{"go", "plain"} {
		o, a := rates["open "+kind], rates["acme over imports and TLS "+kind]
		ratios := make([]float64, len(o))
		for i := range o {
			ratios[i] = a[i] / o[i]
		}
		fmt.Printf("| %s | %.0f | %.0f | %.2f [%.2f, %.2f] |\n", kind, workload.Median(o), workload.Median(a),
			workload.Median(ratios), slices.Min(ratios), slices.Max(ratios))
	}
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "secure:", err)
		os.Exit(1)
	}
}
