// Command consumers measures Braid's queue and checkpoint consumers against
// a NATS JetStream durable pull consumer with explicit acks, on the same
// data, in one run: the same number of 100-byte keyed messages is written
// to both first, then read back. Each server is its own process
// (`braid serve`, `nats-server -js`, on their defaults) and this program
// the client only; -inproc runs them inside this program (the old mode).
//
//	go run ./benchmarks/consumers [-messages 200000] [-keys 10000] [-durability always] [-inproc] [-braid bin] [-nats-server bin]
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"runtime"

	"github.com/braidmq/braid/benchmarks/workload"
	"github.com/braidmq/braid/client"
)

const uri = "topic://public/default/bench"

func main() {
	messages := flag.Int("messages", 200_000, "messages written, then read by each run")
	keys := flag.Int("keys", 10_000, "distinct keys")
	durability := flag.String("durability", "always", "Braid's durability (topic logs and subscription logs): always, interval, none")
	serverFlags := workload.RegisterServerFlags(flag.CommandLine)
	flag.Parse()
	ctx := context.Background()
	spec := workload.Spec{Messages: *messages, Size: 100, Keys: *keys}
	var err error
	servers, err = serverFlags.Servers()
	check(err)
	defer servers.Close()
	fmt.Println(servers.Mode())
	fmt.Printf("machine: %d CPUs, %s/%s, %s; %d x 100 B messages over %d keys, braid durability %s\n\n",
		runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version(), *messages, *keys, *durability)

	dir, err := os.MkdirTemp("", "braid-bench-consumers-")
	check(err)
	defer os.RemoveAll(dir)
	braid, err := servers.StartBraid(dir+"/braid", workload.BraidConfig{Durability: *durability})
	check(err)
	defer warnOnClose(braid.Close)
	nc := braid.NC
	check(workload.CreateTopic(ctx, nc, uri, 4, 16))
	_, err = workload.ProduceBraid(ctx, nc, uri, spec, client.WithMaxInFlight(workload.ProduceWindow))
	check(err)

	js, err := servers.StartJetStream(dir+"/js", false)
	check(err)
	defer warnOnClose(js.Close)
	check(js.Fill(ctx, spec))

	var rows [][2]workload.Result
	for _, n := range []int{1, 8} {
		b, err := workload.Measure(braid.MeterCPU, func() (workload.Result, error) {
			return workload.AckQueueBraid(ctx, nc, uri, fmt.Sprintf("queue-%d", n), *messages, n)
		})
		check(err)
		b.Name = fmt.Sprintf("queue, %d consumer(s), ack each", n)
		j, err := workload.Measure(js.MeterCPU, func() (workload.Result, error) {
			return js.AckDurable(ctx, fmt.Sprintf("durable-%d", n), *messages, n)
		})
		check(err)
		j.Name = fmt.Sprintf("durable pull, %d consumer(s), AckExplicit", n)
		rows = append(rows, [2]workload.Result{b, j})
	}
	b, err := workload.Measure(braid.MeterCPU, func() (workload.Result, error) {
		return workload.ReplayCheckpointBraid(ctx, nc, uri, *messages)
	})
	check(err)
	b.Name = "checkpoint consumer replay"
	j, err := workload.Measure(js.MeterCPU, func() (workload.Result, error) { return js.ConsumeOrdered(ctx, *messages) })
	check(err)
	j.Name = "ordered consumer replay"
	rows = append(rows, [2]workload.Result{b, j})

	fmt.Printf("%-36s | %-14s | %-42s | %-14s | %s\n", "braid", "msg/s", "jetstream (default sync)", "msg/s", "braid / jetstream")
	for _, r := range rows {
		fmt.Printf("%-36s | %14.0f | %-42s | %14.0f | %.2fx\n", r[0].Name, r[0].Rate(), r[1].Name, r[1].Rate(), r[0].Rate()/r[1].Rate())
	}
	if !servers.InProc() {
		fmt.Println("\nCPU per message:")
		for _, r := range rows {
			fmt.Printf("  %-36s %s;  %-42s %s\n", r[0].Name, r[0].CPU.PerMessage(r[0].Messages), r[1].Name, r[1].CPU.PerMessage(r[1].Messages))
		}
	}
}

// servers runs the Braid and JetStream servers.
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
		if servers != nil {
			servers.Close()
		}
		log.Fatal(err)
	}
}
