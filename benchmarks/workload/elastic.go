package workload

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/client"
	"github.com/braidmq/braid/routing"
	"github.com/braidmq/braid/topology"
	"github.com/nats-io/nats.go"
)

// StepSpec is a load step: Before msg/s for Warmup, then After msg/s for
// Hold, over Keys uniformly used keys, each payload Size bytes.
type StepSpec struct {
	Keys          int
	Size          int
	Before, After float64
	Warmup, Hold  time.Duration
	// Threshold is the topic's split_msg_rate_in: the step has settled when
	// no active segment is offered more than it.
	Threshold float64
	// Window is the width of the windows the ack rate is reported in.
	Window time.Duration
}

// StepResult is the outcome of StepLoad.
type StepResult struct {
	Sent, Acked, Errors int
	// Settled is how long after the step the layout first gave no active
	// segment more than Threshold (by the keys' hashes); 0 if it never did.
	Settled time.Duration
	// Segments is the active segment count then; Changes the layout
	// changes seen from the step to the end.
	Segments, Changes int
	// Latency of the sends before the step, of those from the step until
	// it settled (or the end), and of those after.
	BeforeP50, BeforeP99, DuringP50, DuringP99, AfterP50, AfterP99 time.Duration
	// AckRates are the acknowledged msg/s per Window from the step on, by
	// the time each acknowledgement arrived: a pause of the producer shows
	// as a dip.
	AckRates []float64
	// SendRates are the msg/s handed to the producer per Window.
	SendRates []float64
}

func (r StepResult) String() string {
	return fmt.Sprintf("settled %s after the step with %d segments (%d layout changes)\n"+
		"  produce latency p50/p99: before the step %s/%s, from the step until settled %s/%s, after %s/%s\n"+
		"  sent %d, acked %d, errors %d",
		r.Settled.Round(time.Millisecond), r.Segments, r.Changes, short(r.BeforeP50), short(r.BeforeP99),
		short(r.DuringP50), short(r.DuringP99), short(r.AfterP50), short(r.AfterP99), r.Sent, r.Acked, r.Errors)
}

func short(d time.Duration) string { return d.Round(10 * time.Microsecond).String() }

// MinRate returns the smallest of rates[from:to], clamped to the rates.
func MinRate(rates []float64, from, to int) float64 {
	from, to = max(from, 0), min(to, len(rates))
	m := -1.0
	for _, r := range rates[min(from, to):to] {
		if m < 0 || r < m {
			m = r
		}
	}
	return m
}

// StepLoad produces spec's load step into uri through the Go producer and
// watches the layout pushes for the split that answers it. Each payload
// starts with the key's sequence number (8 bytes, big endian), for
// CheckOrder.
func StepLoad(ctx context.Context, nc *nats.Conn, uri string, spec StepSpec) (StepResult, error) {
	name, err := routing.ParseTopic(uri)
	if err != nil {
		return StepResult{}, err
	}
	keys := make([][]byte, spec.Keys)
	hashes := make([]uint64, spec.Keys)
	for i := range keys {
		keys[i] = []byte(fmt.Sprintf("key-%05d", i))
		hashes[i] = routing.KeyHash(keys[i])
	}
	var mu sync.Mutex
	var stepAt, settledAt time.Time
	var segments, changes int
	// hottest is the largest number of keys one active segment holds.
	hottest := func(d api.TopicDescription) (int, int) {
		most, active := 0, 0
		for _, s := range d.Segments {
			if s.State != string(topology.StateActive) {
				continue
			}
			active++
			lo, _ := topology.ParseHash(s.Range[0])
			hi, _ := topology.ParseHash(s.Range[1])
			n := 0
			for _, h := range hashes {
				if lo <= h && h <= hi {
					n++
				}
			}
			most = max(most, n)
		}
		return most, active
	}
	sub, err := nc.Subscribe(api.TopicSubject(api.LayoutPrefix, name.Tenant, name.Namespace, name.Name), func(m *nats.Msg) {
		var d api.TopicDescription
		if json.Unmarshal(m.Data, &d) != nil {
			return
		}
		now := time.Now()
		mu.Lock()
		defer mu.Unlock()
		if stepAt.IsZero() {
			return
		}
		changes++
		most, active := hottest(d)
		if settledAt.IsZero() && float64(most)/float64(spec.Keys)*spec.After <= spec.Threshold {
			settledAt, segments = now, active
		}
	})
	if err != nil {
		return StepResult{}, err
	}
	defer sub.Unsubscribe()

	p, err := client.NewProducer(nc, uri, client.WithMaxInFlight(1_000_000))
	if err != nil {
		return StepResult{}, err
	}
	type sample struct {
		sent time.Time
		lat  time.Duration
		done bool
		err  bool
	}
	samples := make([]sample, 0, int(spec.Before*spec.Warmup.Seconds()+spec.After*spec.Hold.Seconds())+1024)
	var smu sync.Mutex
	seq := make([]uint64, spec.Keys)
	payload := make([]byte, max(spec.Size, 8))
	start := time.Now()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	sent, owed := 0, 0.0
	last := start
	for now := range tick.C {
		el := now.Sub(start)
		if el >= spec.Warmup+spec.Hold {
			break
		}
		rate := spec.Before
		if el >= spec.Warmup {
			rate = spec.After
			mu.Lock()
			if stepAt.IsZero() {
				stepAt = now
			}
			mu.Unlock()
		}
		owed += rate * now.Sub(last).Seconds()
		last = now
		for ; owed >= 1; owed-- {
			k := sent % spec.Keys
			buf := make([]byte, len(payload))
			binary.BigEndian.PutUint64(buf, seq[k])
			seq[k]++
			sentAt := time.Now()
			smu.Lock()
			idx := len(samples)
			samples = append(samples, sample{sent: sentAt})
			smu.Unlock()
			if err := p.Send(ctx, api.Record{Key: keys[k], Payload: buf}, func(_ client.MessageID, err error) {
				lat := time.Since(sentAt)
				smu.Lock()
				samples[idx].lat, samples[idx].done, samples[idx].err = lat, true, err != nil
				smu.Unlock()
			}); err != nil {
				return StepResult{}, err
			}
			sent++
		}
	}
	if err := p.Flush(ctx); err != nil {
		return StepResult{}, err
	}
	_ = p.Close(ctx)

	mu.Lock()
	res := StepResult{Sent: sent, Segments: segments, Changes: changes}
	if !settledAt.IsZero() {
		res.Settled = settledAt.Sub(stepAt)
	}
	end := settledAt
	if end.IsZero() {
		end = time.Now()
	}
	step := stepAt
	mu.Unlock()

	smu.Lock()
	defer smu.Unlock()
	var before, during, after []time.Duration
	windows := int(spec.Hold/spec.Window) + 1
	acked, offered := make([]float64, windows), make([]float64, windows)
	for _, s := range samples {
		if s.err {
			res.Errors++
			continue
		}
		if s.done {
			res.Acked++
		}
		switch {
		case s.sent.Before(step):
			before = append(before, s.lat)
		case !s.sent.After(end):
			during = append(during, s.lat)
		default:
			after = append(after, s.lat)
		}
		if w := int(s.sent.Sub(step) / spec.Window); !s.sent.Before(step) && w < windows {
			offered[w]++
		}
		if w := int(s.sent.Add(s.lat).Sub(step) / spec.Window); s.done && !s.sent.Add(s.lat).Before(step) && w < windows {
			acked[w]++
		}
	}
	res.BeforeP50, res.BeforeP99 = percentiles(before)
	res.DuringP50, res.DuringP99 = percentiles(during)
	res.AfterP50, res.AfterP99 = percentiles(after)
	for w := range windows {
		res.AckRates = append(res.AckRates, acked[w]/spec.Window.Seconds())
		res.SendRates = append(res.SendRates, offered[w]/spec.Window.Seconds())
	}
	return res, nil
}

// CheckOrder reads the whole topic back with a stream consumer of the new
// subscription sub and counts messages lost, duplicated and out of per-key
// order, by the sequence number that starts each payload (8 bytes, big
// endian, counting from 0 per key). want is how many were acknowledged.
func CheckOrder(ctx context.Context, nc *nats.Conn, uri, sub string, want int) (lost, duplicates, reordered int, err error) {
	c, err := client.NewStreamConsumer(nc, uri, sub, client.WithFetch(5000, 4<<20, 200*time.Millisecond))
	if err != nil {
		return 0, 0, 0, err
	}
	defer c.Close(context.Background())
	next := map[string]uint64{}
	got := 0
	for got < want {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		m, err := c.Next(rctx)
		cancel()
		if err != nil {
			break
		}
		got++
		m.Ack()
		k, s := string(m.Key), binary.BigEndian.Uint64(m.Payload)
		switch {
		case s == next[k]:
			next[k]++
		case s < next[k]:
			duplicates++
		default:
			reordered++
			next[k] = s + 1
		}
	}
	return max(0, want-got+duplicates), duplicates, reordered, nil
}

// CreateTopicWith creates a topic with policies given as JSON.
func CreateTopicWith(ctx context.Context, nc *nats.Conn, uri string, segments, buckets int, policies string) error {
	var p api.Policies
	if policies != "" {
		if err := json.Unmarshal([]byte(policies), &p); err != nil {
			return err
		}
	}
	opts := []client.TopicOption{client.WithTopicPolicies(&p)}
	if buckets > 0 {
		opts = append(opts, client.WithTopicBuckets(buckets))
	}
	_, err := client.NewAdmin(nc).CreateTopic(ctx, uri, segments, opts...)
	return err
}

// FormatRates formats rates as "12.3k 45.6k ...".
func FormatRates(rates []float64) string {
	out := ""
	for i, r := range rates {
		if i > 0 {
			out += " "
		}
		out += strconv.FormatFloat(r/1000, 'f', 1, 64) + "k"
	}
	return out
}
