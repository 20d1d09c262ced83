package workload

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// JetStream is a NATS server with JetStream (a child process, or embedded
// in this program in-process) and one file-storage stream.
type JetStream struct {
	NC *nats.Conn
	JS jetstream.JetStream

	url    string
	server *server.Server // in-process
	proc   *Process       // child process
}

// StreamName is the benchmark stream; its subjects are bench.<key>.
const StreamName = "BENCH"

// StartJetStream starts a NATS server with JetStream storing in dir,
// connects to it and creates the benchmark stream. With syncAlways every
// write is fsynced before the ack (the server's sync_interval: always);
// otherwise JetStream syncs on its default 2-minute interval. A child
// process runs as `nats-server -js -sd <dir> -a 127.0.0.1 -p <port>`, with
// a configuration file holding just `jetstream { sync_interval: always }`
// for syncAlways, and its monitoring port (-m) to learn when it is up.
func (s *Servers) StartJetStream(dir string, syncAlways bool) (*JetStream, error) {
	j := &JetStream{}
	if s.noJS {
		return nil, errors.New("braid/benchmarks: these Servers run Braid only (RegisterBraidFlags)")
	}
	if s.inProc {
		ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true,
			StoreDir: filepath.Join(dir, "js"), SyncAlways: syncAlways, NoSigs: true, NoLog: true})
		if err != nil {
			return nil, err
		}
		ns.Start()
		if !ns.ReadyForConnections(10 * time.Second) {
			ns.Shutdown()
			return nil, errors.New("jetstream server did not start")
		}
		j.server, j.url = ns, ns.ClientURL()
	} else if err := j.startProcess(s, dir, syncAlways); err != nil {
		return nil, err
	}
	nc, err := nats.Connect(j.url)
	if err != nil {
		j.Close()
		return nil, err
	}
	j.NC = nc
	if j.JS, err = jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(10000)); err != nil {
		j.Close()
		return nil, err
	}
	_, err = j.JS.CreateStream(context.Background(), jetstream.StreamConfig{Name: StreamName, Subjects: []string{"bench.>"},
		Storage: jetstream.FileStorage})
	if err != nil {
		j.Close()
		return nil, err
	}
	return j, nil
}

// startProcess runs nats-server as a child and waits until its /healthz
// answers; with syncAlways it checks in /varz that the server took the
// setting.
func (j *JetStream) startProcess(s *Servers, dir string, syncAlways bool) error {
	addr, err := FreeAddr()
	if err != nil {
		return err
	}
	monitor, err := FreeAddr()
	if err != nil {
		return err
	}
	host, port, _ := strings.Cut(addr, ":")
	_, monitorPort, _ := strings.Cut(monitor, ":")
	args := []string{"-js", "-sd", filepath.Join(dir, "js"), "-a", host, "-p", port, "-m", monitorPort}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if syncAlways {
		conf := filepath.Join(dir, "sync-always.conf")
		if err := os.WriteFile(conf, []byte("jetstream {\n  sync_interval: always\n}\n"), 0o644); err != nil {
			return err
		}
		args = append(args, "-c", conf)
	}
	if j.proc, err = StartProcess("nats-server", s.logPath("nats-server"), s.natsBin, args...); err != nil {
		return err
	}
	j.url = "nats://" + addr
	// The monitor listens on the host of -a too.
	base := "http://" + host + ":" + monitorPort
	if err := j.proc.WaitReady(readyTimeout, func() error { return httpOK(base + "/healthz") }); err != nil {
		_ = j.proc.Stop(stopTimeout)
		return err
	}
	if syncAlways {
		if err := checkSyncAlways(base + "/varz"); err != nil {
			_ = j.proc.Stop(stopTimeout)
			return err
		}
	}
	return nil
}

// checkSyncAlways fails unless the server's /varz says its JetStream
// syncs always.
func checkSyncAlways(varz string) error {
	resp, err := http.Get(varz)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var v struct {
		JetStream struct {
			Config struct {
				SyncAlways bool `json:"sync_always"`
			} `json:"config"`
		} `json:"jetstream"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return fmt.Errorf("%s: %w", varz, err)
	}
	if !v.JetStream.Config.SyncAlways {
		return fmt.Errorf("nats-server runs without sync always (%s: jetstream.config.sync_always false)", varz)
	}
	return nil
}

// URL is the server's client URL.
func (j *JetStream) URL() string { return j.url }

// Close closes the connection and stops the server (a child: SIGTERM, then
// SIGKILL if it has not exited within 30 s).
func (j *JetStream) Close() error {
	if j.NC != nil {
		j.NC.Close()
	}
	if j.server != nil {
		j.server.Shutdown()
		j.server.WaitForShutdown()
		return nil
	}
	return j.proc.Stop(stopTimeout)
}

// CPU is the CPU time the server has used so far; in-process, this whole
// program's.
func (j *JetStream) CPU() (time.Duration, error) {
	if j.server != nil {
		return SelfCPU()
	}
	return j.proc.CPU()
}

// MeterCPU starts measuring the CPU the server and this program use.
func (j *JetStream) MeterCPU() CPUMeter { return startCPU(j.CPU, j.server != nil) }

// Produce publishes spec's messages asynchronously (subject bench.<key>)
// and measures per-message latency (publish to ack, in publish order).
func (j *JetStream) Produce(ctx context.Context, spec Spec) (Result, error) {
	type inflight struct {
		fut  jetstream.PubAckFuture
		sent time.Time
	}
	lat := make([]time.Duration, 0, spec.Messages)
	futures := make(chan inflight, 20000)
	var errs atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for f := range futures {
			select {
			case <-f.fut.Ok():
			case <-f.fut.Err():
				errs.Add(1)
			}
			lat = append(lat, time.Since(f.sent))
		}
	}()
	subjects := make([]string, max(spec.Keys, 1))
	for i := range subjects {
		subjects[i] = "bench.k" + spec.Key(i)
		if spec.Keys == 0 {
			subjects[i] = "bench.unkeyed"
		}
	}
	payload := make([]byte, spec.Size)
	start := time.Now()
	for i := 0; i < spec.Messages; i++ {
		sent := time.Now()
		// Wait for room in the pending window rather than fail: with
		// sync always an ack takes milliseconds.
		fut, err := j.JS.PublishAsync(subjects[i%len(subjects)], payload, jetstream.WithStallWait(time.Minute))
		if err != nil {
			close(futures)
			return Result{}, err
		}
		futures <- inflight{fut, sent}
	}
	close(futures)
	<-done
	el := time.Since(start)
	p50, p99 := percentiles(lat)
	return Result{Messages: spec.Messages, Elapsed: el, P50: p50, P99: p99, Errors: int(errs.Load())}, nil
}

// ConsumeOrdered replays n messages with an ordered consumer.
func (j *JetStream) ConsumeOrdered(ctx context.Context, n int) (Result, error) {
	cons, err := j.JS.OrderedConsumer(ctx, StreamName, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return Result{}, err
	}
	start := time.Now()
	var got atomic.Int64
	finished := make(chan struct{})
	cc, err := cons.Consume(func(m jetstream.Msg) {
		if got.Add(1) == int64(n) {
			close(finished)
		}
	})
	if err != nil {
		return Result{}, err
	}
	defer cc.Stop()
	select {
	case <-finished:
	case <-ctx.Done():
		return Result{}, ctx.Err()
	}
	return Result{Messages: n, Elapsed: time.Since(start)}, nil
}
