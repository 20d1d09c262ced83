// Command storage measures the storage lifecycle: the cost of the storage
// worker to produce throughput (two `braid serve` processes side by side,
// one whose worker rolls and trims every -tick, one with no worker,
// alternating rounds), and what a topic with a retention of seconds holds
// on disk while a producer writes steadily (it should stay flat), and the
// replay of a topic whose files are in the remote tier (offloaded, local
// copies dropped, a read cache smaller than the data) against the replay
// of the same data on local disk, alternating rounds.
//
//	go run ./benchmarks/storage -messages 100000 -rounds 5 -steady 60s -replay 200000
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/benchmarks/workload"
	"github.com/braidmq/braid/client"
)

func main() {
	messages := flag.Int("messages", 100_000, "messages per produce run")
	rounds := flag.Int("rounds", 5, "alternating rounds")
	conc := flag.Int("concurrency", 256, "produce requests in flight")
	size := flag.Int("size", 100, "payload bytes")
	tick := flag.Duration("tick", 100*time.Millisecond, "the storage worker's tick on the node that runs one")
	steady := flag.Duration("steady", 60*time.Second, "then produce steadily this long to a topic of retention -retention and sample its bytes on disk (0: skip)")
	retention := flag.String("retention", "5s", "the steady topic's retention")
	rate := flag.Int("rate", 5000, "messages a second of the steady producer")
	bin := flag.String("braid", "", "a braid binary (default: go build ./cmd/braid)")
	replay := flag.Int("replay", 200_000, "messages of the replay from the remote tier vs. local disk (0: skip)")
	flag.Parse()

	dir, err := os.MkdirTemp("", "braid-storage-bench-")
	check(err)
	defer os.RemoveAll(dir)
	if *bin == "" {
		*bin, err = workload.BuildBraid(dir)
		check(err)
	}
	fmt.Printf("machine: %d CPUs, %s/%s, %s; %d messages of %d B per run, %d in flight, %d rounds; worker tick %s\n",
		runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version(), *messages, *size, *conc, *rounds, *tick)
	with := start(*bin, filepath.Join(dir, "with"), tick.String(), "--tier-cache-bytes", "4194304")
	defer with.stop()
	without := start(*bin, filepath.Join(dir, "without"), "-1s")
	defer without.stop()

	// The same policies on both: files roll every 200 ms and expire after
	// 2 s (only the node with a worker acts on them).
	policies := `{"retention":"2s","segment_ms":200,"segment_bytes":1048576}`
	createTopic(with.nc, "topic://public/default/bench", policies)
	createTopic(without.nc, "topic://public/default/bench", policies)
	payload := make([]byte, *size)
	var a, b, ratios []float64
	for r := 1; r <= *rounds; r++ {
		x := produce(with.nc, "topic://public/default/bench", *messages, *conc, *size)
		y := produce(without.nc, "topic://public/default/bench", *messages, *conc, *size)
		fmt.Printf("round %d: worker every %s %.0f msg/s, no worker %.0f msg/s (%.2fx)\n", r, *tick, x, y, x/y)
		a, b, ratios = append(a, x), append(b, y), append(ratios, x/y)
	}
	fmt.Printf("\n| run | worker every %s msg/s | no worker msg/s | ratio [min, max] |\n|---|---|---|---|\n", *tick)
	fmt.Printf("| produce, files rolling every 200 ms, retention 2 s | %.0f | %.0f | %.2fx [%.2f, %.2f] |\n",
		workload.Median(a), workload.Median(b), workload.Median(ratios), slices.Min(ratios), slices.Max(ratios))
	fmt.Printf("files removed by the worker: %s\n", metric(with, "braid_storage_files_removed_total"))

	if *replay > 0 {
		replayBench(with, *replay, *rounds, *size)
	}

	if *steady <= 0 {
		return
	}
	uri := "topic://public/default/steady"
	createTopic(with.nc, uri, fmt.Sprintf(`{"retention":%q,"segment_ms":1000}`, *retention))
	topicDir := filepath.Join(with.dir, "topics", "public", "default", "steady")
	var stop atomic.Bool
	var sent atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		subject := subjectOf(uri)
		every := time.Second / time.Duration(*rate)
		next := time.Now()
		for i := 0; !stop.Load(); i++ {
			m := &nats.Msg{Subject: subject, Header: nats.Header{api.HeaderKey: []string{"k" + strconv.Itoa(i%64)}}, Data: payload}
			if err := with.nc.PublishMsg(m); err != nil { // fire and forget: the rate, not the replies
				check(err)
			}
			sent.Add(1)
			next = next.Add(every)
			if d := time.Until(next); d > 0 {
				time.Sleep(d)
			}
		}
	}()
	fmt.Printf("\nsteady produce of %d msg/s of %d B to %s (retention %s, files of 1 s, worker every %s), bytes on disk:\n", *rate, *size, uri, *retention, *tick)
	var samples []int64
	for t0 := time.Now(); time.Since(t0) < *steady; {
		time.Sleep(5 * time.Second)
		n := workload.DirBytes(topicDir)
		samples = append(samples, n)
		fmt.Printf("  t=%3.0fs sent %8d, on disk %8d bytes\n", time.Since(t0).Seconds(), sent.Load(), n)
	}
	stop.Store(true)
	<-done
	half := samples[len(samples)/2:]
	fmt.Printf("second half: min %d, max %d bytes on disk (%.0f s of data at the rate is %d bytes)\n",
		slices.Min(half), slices.Max(half), mustDuration(*retention).Seconds(), int64(*rate)*int64(*size+40)*int64(mustDuration(*retention).Seconds()))
}

// replayBench fills a topic that keeps its files local and one that
// offloads them (one segment each; files of 1 MiB, local copies dropped at once) with the
// same messages, waits for the offload, then replays both from the
// earliest offset with a checkpoint consumer, alternating rounds. The
// server's tier cache (4 MiB) is smaller than the data: every round of
// the tiered topic downloads its files again.
func replayBench(s *server, messages, rounds, size int) {
	local, tiered := "topic://public/default/replay-local", "topic://public/default/replay-tiered"
	createTopic(s.nc, local, `{"auto_scale":false,"segment_bytes":1048576,"segment_ms":200,"retention":"1h"}`)
	createTopic(s.nc, tiered, `{"auto_scale":false,"segment_bytes":1048576,"segment_ms":200,"retention":"1h","offload":true,"local_retention_ms":0}`)
	produce(s.nc, local, messages, 256, size)
	produce(s.nc, tiered, messages, 256, size)
	admin := client.NewAdmin(s.nc)
	deadline := time.Now().Add(5 * time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		st, err := admin.Stats(ctx, tiered)
		cancel()
		check(err)
		var local, total uint64
		for _, b := range st.Buckets {
			local += b.NextOffset - max(b.LocalFirstOffset, b.FirstOffset)
			total += b.NextOffset - b.FirstOffset
		}
		if total > 0 && local*20 < total { // over 95% in the tier only
			fmt.Printf("\nreplay of %d messages of %d B: %.1f%% of the tiered topic in the tier only (%d bytes there)\n",
				messages, size, 100*float64(total-local)/float64(total), st.TierBytes)
			break
		}
		if time.Now().After(deadline) {
			check(fmt.Errorf("the tiered topic was not offloaded in 5 minutes: %d of %d local", local, total))
		}
		time.Sleep(200 * time.Millisecond)
	}
	var a, b, ratios []float64
	for r := 1; r <= rounds; r++ {
		x := replayRate(s.nc, tiered, messages)
		y := replayRate(s.nc, local, messages)
		fmt.Printf("round %d: from the tier %.0f msg/s, from local disk %.0f msg/s (%.2fx)\n", r, x, y, x/y)
		a, b, ratios = append(a, x), append(b, y), append(ratios, x/y)
	}
	fmt.Printf("\n| replay from earliest | tier msg/s | local msg/s | ratio [min, max] |\n|---|---|---|---|\n")
	fmt.Printf("| %d messages, checkpoint consumer, tier cache 4 MiB | %.0f | %.0f | %.2fx [%.2f, %.2f] |\n",
		messages, workload.Median(a), workload.Median(b), workload.Median(ratios), slices.Min(ratios), slices.Max(ratios))
	fmt.Printf("tier reads: %s ok, %s file downloads, %s cache hits\n", metric(s, `braid_tier_reads_total{result="ok"}`),
		metric(s, "braid_tier_cache_downloads_total"), metric(s, "braid_tier_cache_hits_total"))
}

func replayRate(nc *nats.Conn, uri string, messages int) float64 {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	r, err := workload.ReplayCheckpointBraid(ctx, nc, uri, messages)
	check(err)
	return r.Rate()
}

type server struct {
	cmd *exec.Cmd
	nc  *nats.Conn
	dir string
	url string
}

func start(bin, dir, tick string, extra ...string) *server {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	check(err)
	addr := l.Addr().String()
	l.Close()
	metrics, err := net.Listen("tcp", "127.0.0.1:0")
	check(err)
	maddr := metrics.Addr().String()
	metrics.Close()
	args := append([]string{"serve", "--data-dir", dir, "--nats-listen", addr, "--metrics-listen", maddr, "--log-level", "warn", "--storage-tick", tick}, extra...)
	cmd := exec.Command(bin, args...)
	logf, err := os.Create(dir + ".log")
	check(err)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	check(cmd.Start())
	s := &server{cmd: cmd, dir: dir, url: "http://" + maddr + "/metrics"}
	deadline := time.Now().Add(time.Minute)
	for {
		nc, err := nats.Connect("nats://" + addr)
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_, err = client.NewAdmin(nc).ListNodes(ctx)
			cancel()
			if err == nil {
				s.nc = nc
				return s
			}
			nc.Close()
		}
		if time.Now().After(deadline) {
			check(fmt.Errorf("braid serve in %s not ready in a minute", dir))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (s *server) stop() {
	s.nc.Close()
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	_ = s.cmd.Wait()
}

// metric returns the value of a metric line of the server's /metrics.
func metric(s *server, name string) string {
	out, err := exec.Command("curl", "-s", s.url).Output()
	if err != nil {
		return "?"
	}
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, name+" ") {
			return strings.TrimPrefix(line, name+" ")
		}
	}
	return "?"
}

func createTopic(nc *nats.Conn, uri, policies string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	check(workload.CreateTopicWith(ctx, nc, uri, 1, 0, policies))
}

func subjectOf(uri string) string {
	p := strings.Split(strings.TrimPrefix(uri, "topic://"), "/")
	return api.TopicSubject(api.ProducePrefix, p[0], p[1], p[2])
}

// produce sends messages plain single-message requests over 1,000 keys,
// concurrency in flight (workload.PlainProduce), and returns the rate.
func produce(nc *nats.Conn, uri string, messages, concurrency, size int) float64 {
	p := strings.Split(strings.TrimPrefix(uri, "topic://"), "/")
	spec := workload.Spec{Messages: messages, Size: size, Keys: 1000}
	r, err := workload.PlainProduce(context.Background(), nc, workload.BraidTarget(p[0], p[1], p[2], spec), spec, concurrency, 10*time.Second)
	check(err)
	if r.Errors > 0 {
		fmt.Printf("  %d produce requests failed\n", r.Errors)
	}
	return r.Rate()
}

func mustDuration(s string) time.Duration {
	d, err := time.ParseDuration(s)
	check(err)
	return d
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "storage benchmark:", err)
		os.Exit(1)
	}
}
