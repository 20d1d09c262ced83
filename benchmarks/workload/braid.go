package workload

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/client"
	braidnode "github.com/braidmq/braid/node"
	"github.com/nats-io/nats.go"
)

// StartBraid starts a Braid node inside this program in dir, with an
// embedded NATS on a free port: for the programs that measure Braid alone
// in one process (benchmarks/profile, benchmarks/migrate); Servers starts
// it as users run it. Its logs are discarded unless BRAID_BENCH_LOG is set
// (then they go to standard error).
func StartBraid(dir, durability string) (*braidnode.Node, *nats.Conn, error) {
	node, err := startNode(dir, BraidConfig{Durability: durability})
	if err != nil {
		return nil, nil, err
	}
	nc, err := nats.Connect(node.ClientURL())
	if err != nil {
		node.Close()
		return nil, nil, err
	}
	return node, nc, nil
}

// startNode starts a node inside this program, with an embedded NATS on a
// free loopback port and no /metrics listener.
func startNode(dir string, cfg BraidConfig) (*braidnode.Node, error) {
	var logs io.Writer = io.Discard
	if os.Getenv("BRAID_BENCH_LOG") != "" {
		logs = os.Stderr
	}
	return braidnode.Start(context.Background(), braidnode.Config{DataDir: dir, NATSListen: "127.0.0.1:-1",
		NATSConfig: cfg.NATSConfig, OperatorAccount: cfg.OperatorAccount, MetricsListen: "off",
		Durability: cfg.Durability, Logger: slog.New(slog.NewTextHandler(logs, nil))})
}

// CreateTopic creates a topic with segments segments and buckets entry
// buckets in all, with automatic scaling off: the fixed-layout benchmarks
// measure the layout they ask for, not what the scaler makes of their load
// (benchmarks/elastic measures that).
func CreateTopic(ctx context.Context, nc *nats.Conn, uri string, segments, buckets int) error {
	return CreateTopicWith(ctx, nc, uri, segments, buckets, `{"auto_scale":false}`)
}

// ProduceBraid sends spec's messages through the Go producer as fast as its
// in-flight window allows and measures per-message latency (send to ack).
func ProduceBraid(ctx context.Context, nc *nats.Conn, uri string, spec Spec, opts ...client.ProducerOption) (Result, error) {
	p, err := client.NewProducer(nc, uri, opts...)
	if err != nil {
		return Result{}, err
	}
	lat := make([]time.Duration, spec.Messages)
	var errs, done atomic.Int64
	payload := make([]byte, spec.Size)
	keys := make([][]byte, spec.Keys)
	for i := range keys {
		keys[i] = []byte(spec.Key(i))
	}
	start := time.Now()
	for i := 0; i < spec.Messages; i++ {
		rec := api.Record{Payload: payload}
		if spec.Keys > 0 {
			rec.Key = keys[i%spec.Keys]
		}
		sent := time.Now()
		i := i
		if err := p.Send(ctx, rec, func(_ client.MessageID, err error) {
			lat[i] = time.Since(sent)
			if err != nil {
				errs.Add(1)
			}
			if d := done.Add(1); spec.Progress != nil && d%ProgressEvery == 0 {
				spec.Progress(d)
			}
		}); err != nil {
			return Result{}, err
		}
	}
	if err := p.Flush(ctx); err != nil {
		return Result{}, err
	}
	el := time.Since(start)
	_ = p.Close(ctx)
	p50, p99 := percentiles(lat)
	return Result{Messages: spec.Messages, Elapsed: el, P50: p50, P99: p99, Errors: int(errs.Load())}, nil
}

// ConsumeBraid reads n messages with stream consumers of a new
// subscription, acking each, and returns the replay rate.
func ConsumeBraid(ctx context.Context, nc *nats.Conn, uri, sub string, n, consumers int) (Result, error) {
	return ConsumeBraidProgress(ctx, nc, uri, sub, n, consumers, nil)
}

// ConsumeBraidProgress is ConsumeBraid telling progress (when not nil) how
// many messages were read, every ProgressEvery of them.
func ConsumeBraidProgress(ctx context.Context, nc *nats.Conn, uri, sub string, n, consumers int, progress func(int64)) (Result, error) {
	start := time.Now()
	var got atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, consumers)
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for c := 0; c < consumers; c++ {
		sc, err := client.NewStreamConsumer(nc, uri, sub, client.WithConsumerName(fmt.Sprintf("bench-%d", c)),
			client.WithFetch(5000, 4<<20, 200*time.Millisecond))
		if err != nil {
			return Result{}, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer sc.Close(context.Background())
			for got.Load() < int64(n) {
				m, err := sc.Next(cctx)
				if err != nil {
					if cctx.Err() == nil {
						errc <- err
					}
					return
				}
				m.Ack()
				g := got.Add(1)
				if progress != nil && g%ProgressEvery == 0 {
					progress(g)
				}
				if g >= int64(n) {
					cancel()
				}
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	select {
	case err := <-errc:
		return Result{}, err
	default:
	}
	return Result{Messages: int(got.Load()), Elapsed: el}, nil
}
