package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/client"
)

// goProducers are Go client producers, one per topic, made before a run
// so that making them is not timed.
type goProducers struct {
	list []*client.Producer
}

// newGoProducers makes a producer for each topic (each reads its topic's
// layout, which activates the topic).
func newGoProducers(nc *nats.Conn, tenant, ns string, topics []string) (*goProducers, error) {
	g := &goProducers{}
	for _, t := range topics {
		p, err := client.NewProducer(nc, "topic://"+tenant+"/"+ns+"/"+t)
		if err != nil {
			g.close()
			return nil, fmt.Errorf("producer for %s: %w", t, err)
		}
		g.list = append(g.list, p)
	}
	return g, nil
}

func (g *goProducers) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, p := range g.list {
		_ = p.Close(ctx)
	}
}

// produceGo sends messages through the Go client: message i to the
// producer of topics[i%len(topics)], keyed as produce keys them, with at
// most concurrency records unanswered across all producers (the same
// load as the plain client's: concurrency requests in flight).
func produceGo(s *server, g *goProducers, messages, size, concurrency int, timeout time.Duration) poolResult {
	res := poolResult{errs: newErrCounts()}
	const keys = 1000
	keyNames := make([][]byte, keys)
	for k := range keyNames {
		keyNames[k] = []byte("k" + strconv.Itoa(k))
	}
	payload := make([]byte, size)
	for i := range payload {
		payload[i] = byte('a' + i%26)
	}
	lat := make([]time.Duration, messages)
	slots := make(chan struct{}, concurrency)
	var ok atomic.Int64
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(context.Background(), timeout+time.Duration(messages)*time.Millisecond)
	defer cancel()
	mark := cpuMark(s)
	t0 := time.Now()
	sent := 0
	for i := range messages {
		if s.dead() {
			break
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		p := g.list[i%len(g.list)]
		rec := api.Record{Key: keyNames[(i/len(g.list))%keys], Payload: payload}
		start := time.Now()
		wg.Add(1)
		err := p.Send(ctx, rec, func(_ client.MessageID, err error) {
			defer wg.Done()
			lat[i] = time.Since(start)
			<-slots
			if err != nil {
				res.errs.add(goErrCode(err), err.Error())
				return
			}
			ok.Add(1)
		})
		if err != nil {
			wg.Done()
			<-slots
			res.errs.add(goErrCode(err), err.Error())
		}
		sent++
	}
	for _, p := range g.list {
		_ = p.Flush(ctx)
	}
	wg.Wait()
	res.elapsed = time.Since(t0)
	res.serverCPU, res.selfCPU = mark.since(s)
	res.ok = int(ok.Load())
	if sent < messages {
		res.aborted = fmt.Sprintf("stopped after %d of %d messages", sent, messages)
	}
	res.p50, res.p99 = percentiles(lat[:sent])
	return res
}

// goErrCode is the code a Go client error is counted under.
func goErrCode(err error) string {
	var e *api.Error
	switch {
	case errors.As(err, &e):
		return strconv.Itoa(e.Code.Number)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, client.ErrTimeout):
		return "timeout"
	default:
		return "client"
	}
}
