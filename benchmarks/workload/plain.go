package workload

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// PlainTarget says where a plain NATS client sends message i and how it
// reads the reply: the only difference between producing to Braid and to a
// JetStream stream with PlainProduce.
type PlainTarget struct {
	// Prepare fills m (subject, headers) for message i; Data and Reply are
	// set by PlainProduce.
	Prepare func(i int, m *nats.Msg)
	// Failed reports whether a reply is an error.
	Failed func(m *nats.Msg) bool
}

// BraidTarget sends every message to Braid's produce subject of uri's
// tokens, keyed by spec.Key(i) in the Braid-Key header (unkeyed when spec
// has no keys), the way any NATS client would.
func BraidTarget(tenant, namespace, topic string, spec Spec) PlainTarget {
	subject := api.TopicSubject(api.ProducePrefix, tenant, namespace, topic)
	headers := make([]nats.Header, spec.Keys)
	for i := range headers {
		headers[i] = nats.Header{api.HeaderKey: []string{spec.Key(i)}}
	}
	return PlainTarget{
		Prepare: func(i int, m *nats.Msg) {
			m.Subject = subject
			if spec.Keys > 0 {
				m.Header = headers[i%spec.Keys]
			}
		},
		Failed: func(m *nats.Msg) bool { return m.Header.Get(micro.ErrorCodeHeader) != "" },
	}
}

// JetStreamTarget publishes message i to the benchmark stream's subject of
// its key (bench.k<key>), as JetStream users key messages.
func JetStreamTarget(spec Spec) PlainTarget {
	subjects := make([]string, max(spec.Keys, 1))
	for i := range subjects {
		subjects[i] = "bench.k" + spec.Key(i)
		if spec.Keys == 0 {
			subjects[i] = "bench.unkeyed"
		}
	}
	return PlainTarget{
		Prepare: func(i int, m *nats.Msg) { m.Subject = subjects[i%len(subjects)] },
		Failed:  func(m *nats.Msg) bool { return bytes.Contains(m.Data, []byte(`"error"`)) },
	}
}

// PlainProduce sends spec's messages one per request with a plain nats.go
// connection, keeping up to window requests in flight (a publish with a
// reply subject per message and one wildcard reply subscription, as
// JetStream's asynchronous publish does), and measures per-message latency
// (publish to reply). It fails if a reply is missing after timeout.
func PlainProduce(ctx context.Context, nc *nats.Conn, target PlainTarget, spec Spec, window int, timeout time.Duration) (Result, error) {
	if window < 1 {
		return Result{}, fmt.Errorf("window must be at least 1, got %d", window)
	}
	inbox := nats.NewInbox()
	sent := make([]time.Time, spec.Messages)
	lat := make([]time.Duration, spec.Messages)
	var got, errs atomic.Int64
	slots := make(chan struct{}, window)
	all := make(chan struct{})
	var allOnce sync.Once
	sub, err := nc.Subscribe(inbox+".*", func(m *nats.Msg) {
		i, err := strconv.Atoi(m.Subject[len(inbox)+1:])
		if err != nil || i < 0 || i >= len(sent) {
			errs.Add(1)
			return
		}
		lat[i] = time.Since(sent[i])
		if target.Failed(m) {
			errs.Add(1)
		}
		<-slots
		if got.Add(1) == int64(spec.Messages) {
			allOnce.Do(func() { close(all) })
		}
	})
	if err != nil {
		return Result{}, err
	}
	defer sub.Unsubscribe()
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		return Result{}, err
	}
	payload := make([]byte, spec.Size)
	start := time.Now()
	for i := 0; i < spec.Messages; i++ {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return Result{}, ctx.Err()
		}
		m := &nats.Msg{Data: payload, Reply: inbox + "." + strconv.Itoa(i)}
		target.Prepare(i, m)
		sent[i] = time.Now()
		if err := nc.PublishMsg(m); err != nil {
			return Result{}, err
		}
	}
	select {
	case <-all:
	case <-time.After(timeout):
		return Result{}, fmt.Errorf("%d of %d replies missing after %s", int64(spec.Messages)-got.Load(), spec.Messages, timeout)
	}
	el := time.Since(start)
	p50, p99 := percentiles(lat)
	return Result{Messages: spec.Messages, Elapsed: el, P50: p50, P99: p99, Errors: int(errs.Load())}, nil
}
