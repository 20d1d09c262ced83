package crashtest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/client"
	"github.com/braidmq/braid/topology"
)

// The kill schedule. Rounds cycle through four kinds of kill point; each
// waits a random time first, so the kills land anywhere in the traffic:
//
//   - mid-traffic: 20 ms to 1 s into the run;
//   - after-layout: a split or a merge is requested, and the server is
//     killed at once (the request may not even have left), 0-15 ms later,
//     or 0-10 ms after its answer;
//   - during-ack: the moment the consumer sends an ack request, or 0-3 ms
//     later;
//   - recovering: 0-60 ms after the process started, before or while it
//     recovers its logs (the round does not wait for it to serve).
var killKinds = []string{"mid-traffic", "after-layout", "during-ack", "recovering"}

func newRand(seed, stream uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, stream)) }

// killer runs the kill schedule and keeps its counts.
type killer struct {
	srv   *childServer
	ctl   *nats.Conn
	admin *client.Admin
	cons  *consumer
	rng   *rand.Rand

	kills    atomic.Int64
	last     string // the kind of the last kill
	byKind   map[string]int
	layout   layoutStats
	started  time.Time // when the running process was started
	readyN   int
	readySum time.Duration
	maxReady time.Duration
	// ackedEpoch is the newest layout epoch a split or merge was answered
	// with: a restart must never serve an older one.
	ackedEpoch atomic.Uint64
	pending    []chan struct{} // layout requests not finished yet
}

func (k *killer) kindSummary() string {
	keys := slices.Sorted(maps.Keys(k.byKind))
	s := fmt.Sprintf("%d:", k.kills.Load())
	for _, kind := range keys {
		s += fmt.Sprintf(" %s %d", kind, k.byKind[kind])
	}
	return s
}

func (k *killer) avgReady() time.Duration {
	if k.readyN == 0 {
		return 0
	}
	return (k.readySum / time.Duration(k.readyN)).Round(time.Millisecond)
}

// layoutStats counts split and merge requests by outcome; the request
// goroutines update them.
type layoutStats struct {
	splits, merges       atomic.Int64
	answered, refused    atomic.Int64
	unanswered, describe atomic.Int64
}

func (k *killer) layoutSummary() string {
	l := &k.layout
	return fmt.Sprintf("%d splits + %d merges: %d answered OK, %d refused, %d unanswered (%d describe failures)",
		l.splits.Load(), l.merges.Load(), l.answered.Load(), l.refused.Load(), l.unanswered.Load(), l.describe.Load())
}

// wait waits d, or less if ctx ends: a kill point's random delay.
func (k *killer) wait(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

func (k *killer) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(k.rng.Int64N(int64(hi-lo)+1))
}

// round runs kill number i (from 0) and restarts the server.
func (k *killer) round(ctx context.Context, i int) error {
	kind := killKinds[i%len(killKinds)]
	if kind != "recovering" {
		if err := k.ready(ctx); err != nil {
			return err
		}
	}
	switch kind {
	case "mid-traffic":
		k.wait(ctx, k.between(20*time.Millisecond, time.Second))
	case "after-layout":
		k.wait(ctx, k.between(20*time.Millisecond, 300*time.Millisecond))
		k.layoutChange(ctx)
	case "during-ack":
		k.wait(ctx, k.between(20*time.Millisecond, 200*time.Millisecond))
		select {
		case <-k.cons.acking:
			if k.rng.IntN(2) == 0 {
				k.wait(ctx, k.between(0, 3*time.Millisecond))
			}
		case <-time.After(5 * time.Second):
			kind = "during-ack (no ack within 5s)"
		case <-ctx.Done():
		}
	case "recovering":
		k.wait(ctx, time.Until(k.started.Add(k.between(0, 60*time.Millisecond))))
	}
	return k.killAndRestart(kind)
}

// killAndRestart SIGKILLs the server and starts it again on the same data
// directory and address, without waiting for it to serve.
func (k *killer) killAndRestart(kind string) error {
	if err := k.srv.kill(); err != nil {
		return err
	}
	k.kills.Add(1)
	if k.byKind == nil {
		k.byKind = map[string]int{}
	}
	k.byKind[kind]++
	k.last = kind
	if err := k.srv.start(); err != nil {
		return err
	}
	k.started = time.Now()
	return nil
}

// ready waits until the server serves the topic, then checks that its
// layout is not older than any split or merge it acknowledged.
func (k *killer) ready(ctx context.Context) error {
	err := k.srv.waitReady(ctx, k.ctl, func(ctx context.Context) error {
		_, err := k.admin.DescribeTopic(ctx, topicURI)
		return err
	})
	if err != nil {
		return err
	}
	if !k.started.IsZero() {
		took := time.Since(k.started)
		k.readyN++
		k.readySum += took
		k.maxReady = max(k.maxReady, took)
	}
	for _, done := range k.pending { // a request sent before a kill may be answered after the restart
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			return errors.New("a split or merge request neither answered nor failed after 10s")
		}
	}
	k.pending = nil
	d, err := k.admin.DescribeTopic(ctx, topicURI)
	if err != nil {
		return err
	}
	if acked := k.ackedEpoch.Load(); d.Epoch < acked {
		return fmt.Errorf("acknowledged layout change lost: the server serves epoch %d, a split or merge was answered with epoch %d", d.Epoch, acked)
	}
	return nil
}

// layoutChange requests a split or a merge and returns at a random point
// around it: at once, a few ms later, or shortly after its answer.
func (k *killer) layoutChange(ctx context.Context) {
	d, err := k.admin.DescribeTopic(ctx, topicURI)
	if err != nil {
		k.layout.describe.Add(1)
		return
	}
	active := activeByRange(d)
	if len(active) == 0 {
		k.layout.describe.Add(1)
		return
	}
	split := len(active) <= 2 || (len(active) < 6 && k.rng.IntN(2) == 0)
	var do func(context.Context) (api.TopicDescription, error)
	if split {
		seg := active[k.rng.IntN(len(active))].ID
		k.layout.splits.Add(1)
		do = func(ctx context.Context) (api.TopicDescription, error) { return k.admin.Split(ctx, topicURI, seg, nil) }
	} else {
		i := k.rng.IntN(len(active) - 1)
		a, b := active[i].ID, active[i+1].ID
		k.layout.merges.Add(1)
		do = func(ctx context.Context) (api.TopicDescription, error) { return k.admin.Merge(ctx, topicURI, a, b) }
	}
	done := make(chan struct{})
	k.pending = append(k.pending, done)
	go func() {
		defer close(done)
		nd, err := do(context.Background()) // bounded by the admin's 2s request timeout
		var apiErr *api.Error
		switch {
		case err == nil:
			k.layout.answered.Add(1)
			for {
				old := k.ackedEpoch.Load()
				if nd.Epoch <= old || k.ackedEpoch.CompareAndSwap(old, nd.Epoch) {
					break
				}
			}
		case errors.As(err, &apiErr):
			k.layout.refused.Add(1)
		default:
			k.layout.unanswered.Add(1)
		}
	}()
	switch k.rng.IntN(3) {
	case 0: // at once
	case 1:
		k.wait(ctx, k.between(0, 15*time.Millisecond))
	default:
		select {
		case <-done:
		case <-ctx.Done():
		}
		k.wait(ctx, k.between(0, 10*time.Millisecond))
	}
}

// activeByRange returns the active segments sorted by the start of their
// key range, so that neighbours in the slice are adjacent.
func activeByRange(d api.TopicDescription) []api.SegmentInfo {
	var active []api.SegmentInfo
	for _, s := range d.Segments {
		if s.State == "active" {
			active = append(active, s)
		}
	}
	lo := func(s api.SegmentInfo) uint64 { h, _ := topology.ParseHash(s.Range[0]); return h }
	slices.SortFunc(active, func(a, b api.SegmentInfo) int { return cmp.Compare(lo(a), lo(b)) })
	return active
}
