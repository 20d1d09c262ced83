// Command profile writes a CPU profile of Braid's produce (or replay) path (client and
// server in one process) for `go tool pprof`.
//
//	go run ./benchmarks/profile [-size 100] [-messages 300000] [-out cpu.prof]
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"runtime/pprof"

	"github.com/braidmq/braid/benchmarks/workload"
	"github.com/braidmq/braid/client"
)

func main() {
	size := flag.Int("size", 100, "payload bytes")
	messages := flag.Int("messages", 300_000, "messages")
	durability := flag.String("durability", "always", "always, interval or none")
	out := flag.String("out", "cpu.prof", "profile file")
	buckets := flag.Int("buckets", 16, "entry buckets of the 4-segment topic")
	batchBytes := flag.Int("batch-bytes", client.DefaultBatchBytes, "bytes of one produce batch (client.WithBatch)")
	pipeline := flag.Int("pipeline", client.DefaultUnitPipeline, "batches one unit may have in flight (client.WithUnitPipeline)")
	replay := flag.Bool("replay", false, "profile reading the messages back with one stream consumer instead of producing them")
	flag.Parse()
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "braid-profile-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	node, nc, err := workload.StartBraid(dir, *durability)
	if err != nil {
		log.Fatal(err)
	}
	defer node.Close()
	defer nc.Close()
	const uri = "topic://public/default/profile"
	if err := workload.CreateTopic(ctx, nc, uri, 4, *buckets); err != nil {
		log.Fatal(err)
	}
	spec := workload.Spec{Messages: *messages, Size: *size, Keys: 10_000}
	if *replay {
		if _, err := workload.ProduceBraid(ctx, nc, uri, spec, client.WithMaxInFlight(workload.ProduceWindow)); err != nil {
			log.Fatal(err)
		}
	}
	f, err := os.Create(*out)
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	if err := pprof.StartCPUProfile(f); err != nil {
		log.Fatal(err)
	}
	var res workload.Result
	if *replay {
		res, err = workload.ConsumeBraid(ctx, nc, uri, "profile", spec.Messages, 1)
		res.Name = "replay"
	} else {
		res, err = workload.ProduceBraid(ctx, nc, uri, spec, client.WithMaxInFlight(workload.ProduceWindow), client.WithUnitPipeline(*pipeline),
			client.WithBatch(client.DefaultBatchRecords, *batchBytes))
		res.Name = "produce"
	}
	pprof.StopCPUProfile()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res)
	fmt.Println("profile written to", *out)
}
