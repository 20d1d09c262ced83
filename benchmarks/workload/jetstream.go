package workload

import (
	"context"
	"errors"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// JetStream is an embedded NATS server with one file-storage stream.
type JetStream struct {
	Server *server.Server
	NC     *nats.Conn
	JS     jetstream.JetStream
}

// StreamName is the benchmark stream; its subjects are bench.<key>.
const StreamName = "BENCH"

// StartJetStream starts an embedded server with JetStream in dir. With
// syncAlways every write is fsynced before the ack; otherwise JetStream
// syncs on its default 2-minute interval.
func StartJetStream(dir string, syncAlways bool) (*JetStream, error) {
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
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		ns.Shutdown()
		return nil, err
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(10000))
	if err != nil {
		return nil, err
	}
	_, err = js.CreateStream(context.Background(), jetstream.StreamConfig{Name: StreamName, Subjects: []string{"bench.>"},
		Storage: jetstream.FileStorage})
	if err != nil {
		return nil, err
	}
	return &JetStream{Server: ns, NC: nc, JS: js}, nil
}

// Close stops the server.
func (j *JetStream) Close() {
	j.NC.Close()
	j.Server.Shutdown()
	j.Server.WaitForShutdown()
}

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
