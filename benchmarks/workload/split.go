package workload

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/client"
	"github.com/nats-io/nats.go"
)

// SplitResult is the outcome of SplitUnderLoad.
type SplitResult struct {
	Sent           int
	PauseP99       time.Duration // p99 append latency of sends within ±500 ms of the split
	PauseMax       time.Duration
	SteadyP99      time.Duration // p99 append latency of the other sends
	SplitTook      time.Duration // the admin request's round trip
	Lost           int           // acknowledged but never consumed
	Reordered      int           // consumed out of per-key production order
	Duplicates     int
	ProduceErrors  int
	ConsumedOrders int
}

func (r SplitResult) String() string {
	return fmt.Sprintf("sent %d, split took %s, p99 append latency around the split %s (max %s), elsewhere %s; lost %d, reordered %d, duplicates %d, produce errors %d",
		r.Sent, r.SplitTook.Round(time.Microsecond), r.PauseP99.Round(10*time.Microsecond), r.PauseMax.Round(10*time.Microsecond),
		r.SteadyP99.Round(10*time.Microsecond), r.Lost, r.Reordered, r.Duplicates, r.ProduceErrors)
}

// SplitUnderLoad produces at a steady rate (msg/s) for d over keys keys,
// splits segment seg halfway through, then reads everything back with a
// stream consumer and checks that nothing acknowledged was lost or
// reordered per key.
func SplitUnderLoad(ctx context.Context, nc *nats.Conn, uri string, seg uint64, rate int, d time.Duration, keys int) (SplitResult, error) {
	p, err := client.NewProducer(nc, uri)
	if err != nil {
		return SplitResult{}, err
	}
	type sample struct {
		sent time.Time
		lat  time.Duration
		err  bool
	}
	var mu sync.Mutex
	var samples []sample
	seq := make([]uint64, keys)
	var splitAt time.Time
	var splitTook time.Duration
	start := time.Now()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	sent := 0
	for now := range tick.C {
		el := now.Sub(start)
		if el >= d {
			break
		}
		if splitAt.IsZero() && el >= d/2 {
			splitAt = time.Now()
			go func() {
				t0 := time.Now()
				_, err := client.NewAdmin(nc).Split(ctx, uri, seg, nil)
				mu.Lock()
				splitTook = time.Since(t0)
				if err != nil {
					splitTook = -1
				}
				mu.Unlock()
			}()
		}
		due := int(el.Seconds() * float64(rate))
		for ; sent < due; sent++ {
			k := sent % keys
			payload := make([]byte, 100)
			binary.BigEndian.PutUint64(payload, seq[k])
			seq[k]++
			sentAt := time.Now()
			mu.Lock()
			idx := len(samples)
			samples = append(samples, sample{sent: sentAt})
			mu.Unlock()
			err := p.Send(ctx, api.Record{Key: []byte(fmt.Sprintf("key-%05d", k)), Payload: payload}, func(_ client.MessageID, err error) {
				mu.Lock()
				samples[idx].lat = time.Since(sentAt)
				samples[idx].err = err != nil
				mu.Unlock()
			})
			if err != nil {
				return SplitResult{}, err
			}
		}
	}
	if err := p.Flush(ctx); err != nil {
		return SplitResult{}, err
	}
	_ = p.Close(ctx)
	mu.Lock()
	res := SplitResult{Sent: sent, SplitTook: splitTook}
	var around, steady []time.Duration
	for _, s := range samples {
		if s.err {
			res.ProduceErrors++
			continue
		}
		if s.sent.Sub(splitAt).Abs() <= 500*time.Millisecond {
			around = append(around, s.lat)
			res.PauseMax = max(res.PauseMax, s.lat)
		} else {
			steady = append(steady, s.lat)
		}
	}
	mu.Unlock()
	if splitTook < 0 {
		return res, fmt.Errorf("split of segment %d failed", seg)
	}
	_, res.PauseP99 = percentiles(around)
	_, res.SteadyP99 = percentiles(steady)

	// Read everything back and check per-key order.
	want := sent - res.ProduceErrors
	lost, dup, reordered, err := CheckOrder(ctx, nc, uri, "split-check", want)
	res.Lost, res.Duplicates, res.Reordered = lost, dup, reordered
	res.ConsumedOrders = want - lost + dup
	return res, err
}
