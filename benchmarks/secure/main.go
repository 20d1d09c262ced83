// Command secure measures what tenant isolation costs on the produce path:
// a tenant (acme) producing through its service imports over TLS to a
// Braid configured as examples/secure, against an open Braid (no accounts,
// no TLS), alternating rounds; the Go producer and a plain NATS client (one
// message per request, a window in flight). Both servers are `braid serve`
// processes of their own, this program the client only; -inproc runs them
// inside this program (the old mode).
//
//	go run ./benchmarks/secure -messages 200000 -rounds 5 [-size 100] [-window 512] [-tls=true] [-cpuprofile file]
//	    [-inproc] [-braid bin]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"time"

	"github.com/braidmq/braid/benchmarks/workload"
	"github.com/braidmq/braid/client"
	"github.com/braidmq/braid/examples/secure/gen"
	"github.com/nats-io/nats.go"
)

func main() {
	messages := flag.Int("messages", 200000, "messages a run")
	rounds := flag.Int("rounds", 5, "alternating rounds")
	size := flag.Int("size", 100, "payload bytes")
	window := flag.Int("window", 512, "requests in flight of the plain client")
	useTLS := flag.Bool("tls", true, "the secured listener takes TLS only (false: accounts and imports alone)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the secured plain runs to this file (of the client only, unless -inproc)")
	serverFlags := workload.RegisterBraidFlags(flag.CommandLine)
	flag.Parse()
	var err error
	servers, err = serverFlags.Servers()
	check(err)
	defer servers.Close()
	fmt.Println(servers.Mode())
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
	tlsOpt := nats.RootCAs(files.CA)
	if !*useTLS {
		tlsOpt = func(*nats.Options) error { return nil }
	}
	secured, err := servers.StartBraid(filepath.Join(dir, "secure"), workload.BraidConfig{NATSConfig: filepath.Join(dir, "nats.conf"),
		OperatorAccount: "OPS", Connect: []nats.Option{nats.UserInfo("ops", "ops-secret"), tlsOpt}})
	check(err)
	defer warnOnClose(secured.Close)
	check(client.NewAdmin(secured.NC).CreateTenant(ctx, "acme"))
	acme, err := nats.Connect(secured.URL(), nats.UserInfo("acme", "acme-secret"), tlsOpt)
	check(err)
	defer acme.Close()
	check(client.NewAdmin(acme).CreateNamespace(ctx, "acme/bench", nil, 0))

	// The open node.
	open, err := servers.StartBraid(filepath.Join(dir, "open"), workload.BraidConfig{Durability: "always"})
	check(err)
	defer warnOnClose(open.Close)
	check(client.NewAdmin(open.NC).CreateNamespace(ctx, "public/bench", nil, 0))

	spec := workload.Spec{Messages: *messages, Size: *size, Keys: 1000}
	type system struct {
		name   string
		nc     *nats.Conn
		tenant string
		server *workload.Braid
	}
	systems := []system{{"open", open.NC, "public", open}, {"acme over imports and TLS", acme, "acme", secured}}
	rates := map[string][]float64{}
	serverCPU := map[string][]float64{} // µs per message, child processes only
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
				if kind == "plain" && *cpuprofile != "" && s.tenant == "acme" {
					f, err := os.Create(*cpuprofile)
					check(err)
					check(pprof.StartCPUProfile(f))
					defer pprof.StopCPUProfile()
				}
				res, err := workload.Measure(s.server.MeterCPU, func() (workload.Result, error) {
					if kind == "go" {
						return workload.ProduceBraid(ctx, s.nc, uri, spec)
					}
					return workload.PlainProduce(ctx, s.nc, workload.BraidTarget(s.tenant, "bench", topic, spec), spec, *window, time.Minute)
				})
				check(err)
				rates[s.name+" "+kind] = append(rates[s.name+" "+kind], res.Rate())
				if per, ok := res.CPU.ServerPerMessage(res.Messages); ok {
					serverCPU[s.name+" "+kind] = append(serverCPU[s.name+" "+kind], float64(per)/float64(time.Microsecond))
				}
			}
		}
	}
	fmt.Printf("%d messages of %d bytes over 1000 keys, 4 segments, fsync before ack; %d alternating rounds; secured listener TLS only: %v\n\n", *messages, *size, *rounds, *useTLS)
	fmt.Println(servers.Mode())
	cpuHead := ""
	if !servers.InProc() {
		cpuHead = " server CPU/msg, open / acme (median µs) |"
	}
	fmt.Println("| client | open msg/s | acme (imports, TLS) msg/s | secured/open median [min, max] |" + cpuHead)
	sep := "|---|---|---|---|"
	if cpuHead != "" {
		sep += "---|"
	}
	fmt.Println(sep)
	for _, kind := range []string{"go", "plain"} {
		o, a := rates["open "+kind], rates["acme over imports and TLS "+kind]
		ratios := make([]float64, len(o))
		for i := range o {
			ratios[i] = a[i] / o[i]
		}
		line := fmt.Sprintf("| %s | %.0f | %.0f | %.2f [%.2f, %.2f] |", kind, workload.Median(o), workload.Median(a),
			workload.Median(ratios), slices.Min(ratios), slices.Max(ratios))
		if oc, ac := serverCPU["open "+kind], serverCPU["acme over imports and TLS "+kind]; len(oc) > 0 && len(ac) > 0 {
			line += fmt.Sprintf(" %.1f / %.1f |", workload.Median(oc), workload.Median(ac))
		}
		fmt.Println(line)
	}
}

// servers runs the two Braid servers.
var servers *workload.Servers

// warnOnClose stops a server, saying so on standard error if it did not
// stop cleanly.
func warnOnClose(close func() error) {
	if err := close(); err != nil {
		fmt.Fprintln(os.Stderr, "warning:", err)
	}
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "secure:", err)
		if servers != nil {
			servers.Close()
		}
		os.Exit(1)
	}
}
