// Command compaction measures topic compaction side by side with NATS
// JetStream's per-subject limit (a stream with max_msgs_per_subject 1, as
// a KV bucket keeps its latest values) in one run: produce updates over a
// set of keys into each, compact the Braid topic (throughput, bytes
// before and after), then replay the latest values from the start — Braid
// reading its compacted view with read.fetch, JetStream with an ordered
// consumer over its stream — alternating rounds, and Braid's own full
// replay for scale.
//
// Durability is compared like for like: Braid acknowledges after an fsync
// (durability always, its default) and the JetStream server runs with
// sync_always.
//
// Each server is its own process (`braid serve`, `nats-server -js`, on
// their defaults) and this program the client only; -inproc runs them
// inside this program (the old mode).
//
//	go run ./benchmarks/compaction -messages 1000000 -keys 10000 -rounds 5 [-size 100] [-cpuprofile file]
//	    [-inproc] [-braid bin] [-nats-server bin]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/benchmarks/workload"
	"github.com/braidmq/braid/client"
)

const (
	topic = "prices"
	uri   = "topic://public/default/" + topic
)

func main() {
	messages := flag.Int("messages", 1_000_000, "updates produced")
	keys := flag.Int("keys", 10_000, "keys they are spread over")
	size := flag.Int("size", 100, "payload bytes")
	rounds := flag.Int("rounds", 5, "alternating replay rounds")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of 50 more Braid compacted replays to this file (of the client only, unless -inproc)")
	serverFlags := workload.RegisterServerFlags(flag.CommandLine)
	flag.Parse()
	var err error
	servers, err = serverFlags.Servers()
	check(err)
	defer servers.Close()
	dir, err := os.MkdirTemp("", "braid-compaction-bench-")
	check(err)
	defer os.RemoveAll(dir)
	ctx := context.Background()
	fmt.Println(servers.Mode())
	fmt.Printf("machine: %d CPUs, %s/%s, %s; %d updates of %d B over %d keys; both fsync before acknowledging\n",
		runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version(), *messages, *size, *keys)

	braid, err := servers.StartBraid(dir+"/braid", workload.BraidConfig{Durability: "always"})
	check(err)
	defer warnOnClose(braid.Close)
	nc := braid.NC
	check(workload.CreateTopic(ctx, nc, uri, 1, 4))
	js, err := servers.StartJetStream(dir+"/js", true)
	check(err)
	defer warnOnClose(js.Close)
	_, err = js.JS.UpdateStream(ctx, jetstream.StreamConfig{Name: workload.StreamName, Subjects: []string{"bench.>"},
		Storage: jetstream.FileStorage, MaxMsgsPerSubject: 1})
	check(err)

	// And a JetStream that syncs on its default 2-minute interval, for the
	// produce rate without the fsyncs (not like for like: said so).
	js2, err := servers.StartJetStream(dir+"/js2", false)
	check(err)
	defer warnOnClose(js2.Close)
	_, err = js2.JS.UpdateStream(ctx, jetstream.StreamConfig{Name: workload.StreamName, Subjects: []string{"bench.>"},
		Storage: jetstream.FileStorage, MaxMsgsPerSubject: 1})
	check(err)

	spec := workload.Spec{Messages: *messages, Size: *size, Keys: *keys}
	bp, err := workload.Measure(braid.MeterCPU, func() (workload.Result, error) { return workload.ProduceBraid(ctx, nc, uri, spec) })
	check(err)
	jp, err := workload.Measure(js.MeterCPU, func() (workload.Result, error) { return js.Produce(ctx, spec) })
	check(err)
	jp2, err := workload.Measure(js2.MeterCPU, func() (workload.Result, error) { return js2.Produce(ctx, spec) })
	check(err)
	fmt.Printf("\nproduce: Braid %.0f msg/s, JetStream (max_msgs_per_subject 1) %.0f msg/s with sync_always (%.2fx), %.0f msg/s with its default sync (%.2fx)\n",
		bp.Rate(), jp.Rate(), bp.Rate()/jp.Rate(), jp2.Rate(), bp.Rate()/jp2.Rate())
	fmt.Printf("produce %s: Braid %s; JetStream sync_always %s; JetStream default sync %s\n", "CPU",
		bp.CPU.PerMessage(bp.Messages), jp.CPU.PerMessage(jp.Messages), jp2.CPU.PerMessage(jp2.Messages))

	adm := client.NewAdmin(nc, client.WithRequestTimeout(time.Minute))
	begin := time.Now()
	st, err := adm.Compact(ctx, uri)
	check(err)
	for st.Running {
		time.Sleep(20 * time.Millisecond) // polling the compaction's status
		st, err = adm.Compaction(ctx, uri)
		check(err)
	}
	took := time.Since(begin)
	if st.Error != "" {
		check(fmt.Errorf("compaction failed: %s", st.Error))
	}
	fmt.Printf("compaction: %d records read, %d keys, %d kept, %d -> %d bytes in %s (server: %d ms): %.1f MB/s of log\n",
		st.Read, st.Keys, st.Kept, st.BytesBefore, st.BytesAfter, took.Round(time.Millisecond), st.DurationMs,
		float64(st.BytesBefore)/1e6/took.Seconds())

	var bt, jt, ratios []float64
	for r := 1; r <= *rounds; r++ {
		b := replayCompacted(nc, *keys)
		j, err := js.ConsumeOrdered(ctx, *keys)
		check(err)
		fmt.Printf("round %d: latest values, Braid compacted %s, JetStream ordered consumer %s (%.2fx)\n", r,
			b.Round(time.Microsecond), j.Elapsed.Round(time.Microsecond), j.Elapsed.Seconds()/b.Seconds())
		bt, jt, ratios = append(bt, b.Seconds()), append(jt, j.Elapsed.Seconds()), append(ratios, j.Elapsed.Seconds()/b.Seconds())
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		check(err)
		check(pprof.StartCPUProfile(f))
		for range 50 {
			replayCompacted(nc, *keys)
		}
		pprof.StopCPUProfile()
		check(f.Close())
	}
	full := time.Now()
	n := replay(nc, false)
	fullTook := time.Since(full)
	fmt.Printf("\n%s\n", servers.Mode())
	fmt.Printf("| run | Braid | JetStream | Braid's speed-up [min, max] |\n|---|---|---|---|\n")
	fmt.Printf("| produce %d updates over %d keys, both fsyncing | %.0f msg/s | %.0f msg/s | %.2fx |\n", *messages, *keys, bp.Rate(), jp.Rate(), bp.Rate()/jp.Rate())
	fmt.Printf("| the same, JetStream on its default sync (not like for like) | %.0f msg/s | %.0f msg/s | %.2fx |\n", bp.Rate(), jp2.Rate(), bp.Rate()/jp2.Rate())
	fmt.Printf("| replay the %d latest values from the start | %s | %s | %.2fx [%.2f, %.2f] |\n", *keys,
		secs(workload.Median(bt)), secs(workload.Median(jt)), workload.Median(ratios), slices.Min(ratios), slices.Max(ratios))
	fmt.Printf("Braid's full replay (read.fetch, not compacted): %d messages in %s; compaction %.1f MB/s, %d -> %d bytes\n",
		n, fullTook.Round(time.Millisecond), float64(st.BytesBefore)/1e6/took.Seconds(), st.BytesBefore, st.BytesAfter)
}

// replayCompacted reads the compacted view from the start and returns how
// long it took; it must find keys messages.
func replayCompacted(nc *nats.Conn, keys int) time.Duration {
	start := time.Now()
	if n := replay(nc, true); n != keys {
		check(fmt.Errorf("the compacted view holds %d messages, want %d", n, keys))
	}
	return time.Since(start)
}

// replay reads every unit of the topic from offset 0 with read.fetch and
// returns how many messages it read.
func replay(nc *nats.Conn, compacted bool) int {
	var d api.TopicDescription
	req, _ := json.Marshal(api.TopicRequest{Topic: uri})
	m, err := nc.Request(api.AdminSubject(api.AdminTopicDescribe), req, 10*time.Second)
	check(err)
	check(json.Unmarshal(m.Data, &d))
	var units []api.ReadUnit
	for _, s := range d.Segments {
		for b := 0; b < s.Buckets; b++ {
			units = append(units, api.ReadUnit{Segment: s.ID, Bucket: b})
		}
	}
	subject := api.ReadSubject(api.ReadFetch, "public", "default", topic)
	total := 0
	for len(units) > 0 {
		body, _ := json.Marshal(api.ReadRequest{Units: units, Max: 10000, MaxBytes: 8 << 20, Compacted: compacted})
		m, err := nc.Request(subject, body, 30*time.Second)
		check(err)
		reply, err := api.DecodeReadReply(m.Data)
		check(err)
		last := map[[2]uint64]uint64{}
		for _, msg := range reply.Messages {
			last[[2]uint64{msg.Segment, uint64(msg.Bucket)}] = msg.Offset + 1
		}
		total += len(reply.Messages)
		var next []api.ReadUnit
		for i, u := range units {
			st := reply.Units[i]
			if st.Code != 0 {
				check(fmt.Errorf("unit %d/%d: code %d %s", u.Segment, u.Bucket, st.Code, st.Message))
			}
			if off, ok := last[[2]uint64{u.Segment, uint64(u.Bucket)}]; ok {
				u.Offset = off
			}
			if compacted {
				u.Offset = st.Resume // past what compaction removed too
			}
			if u.Offset < st.Next {
				next = append(next, u)
			}
		}
		units = next
	}
	return total
}

func secs(s float64) string {
	return time.Duration(s * float64(time.Second)).Round(time.Microsecond).String()
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
		fmt.Fprintln(os.Stderr, "compaction benchmark:", err)
		if servers != nil {
			servers.Close()
		}
		os.Exit(1)
	}
}
