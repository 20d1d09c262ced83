// Package crashtest kills a real `braid serve` process with SIGKILL, many
// times, under a producer and a consumer, and checks after the last restart
// that every acknowledged message is stored exactly once, in per-key order,
// and that no answered consumer ack was lost.
//
// `go test ./crashtest/` (and so `make test`) runs 6 kills; `make
// crash-test` runs BRAID_CRASH_KILLS=60. BRAID_CRASH_RATE sets the
// producer's messages per second (default 2000, in steps of 1000), and
// BRAID_CRASH_SEED replays an earlier run's random choices (its seed is
// logged; the timing is not replayed).
package crashtest

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/braidmq/braid/internal/poll"

	"github.com/nats-io/nats.go"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/client"
)

const (
	topicName    = "crash"
	topicURI     = "topic://public/default/" + topicName
	subscription = "crash-audit"
	keys         = 64
	// The producer sends every tick, by default 2 messages (2,000 msg/s).
	tick = time.Millisecond
	// defaultKills is the size of a plain `go test` run.
	defaultKills = 6
)

// config is the run's size and seed, from the environment.
type config struct {
	kills, perTick int
	seed           uint64
}

func configFromEnv(t *testing.T) config {
	t.Helper()
	cfg := config{kills: defaultKills, perTick: 2, seed: uint64(time.Now().UnixNano())}
	positive := func(name string, into *int, scale int) {
		if s := os.Getenv(name); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < scale {
				t.Fatalf("%s=%q: want a number of at least %d", name, s, scale)
			}
			*into = n / scale
		}
	}
	positive("BRAID_CRASH_KILLS", &cfg.kills, 1)
	positive("BRAID_CRASH_RATE", &cfg.perTick, int(time.Second/tick)) // messages per second
	if s := os.Getenv("BRAID_CRASH_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("BRAID_CRASH_SEED=%q: want an unsigned number", s)
		}
		cfg.seed = n
	}
	return cfg
}

// crashRun is one run of the crash test: the server, the workload on it
// and the kill schedule.
type crashRun struct {
	t     *testing.T
	cfg   config
	begin time.Time
	built time.Duration // how long building the server took
	srv   *childServer
	ctl   *nats.Conn // admin requests, readiness probes and the final read
	admin *client.Admin
	k     *killer

	p        *client.Producer
	prod     *producer
	cons     *consumer
	stopProd context.CancelFunc
	prodDone sync.WaitGroup
	stopCons context.CancelFunc
	consDone sync.WaitGroup
}

func TestKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills a real server; skipped with -short")
	}
	r := &crashRun{t: t, cfg: configFromEnv(t), begin: time.Now()}
	t.Logf("kills %d, %d msg/s, seed %d (BRAID_CRASH_SEED=%d replays the random choices, not the timing)",
		r.cfg.kills, r.cfg.perTick*int(time.Second/tick), r.cfg.seed, r.cfg.seed)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)

	r.setUp(ctx)
	for i := range r.cfg.kills {
		if err := r.k.round(ctx, i); err != nil {
			t.Fatalf("round %d: %v", i+1, err)
		}
		sent, acked, failed, _ := r.prod.stats()
		t.Logf("kill %d (%s) at %s: sent %d, acked %d, failed %d", i+1, r.k.last,
			time.Since(r.begin).Round(time.Millisecond), sent, acked, failed)
	}
	if err := r.k.ready(ctx); err != nil {
		t.Fatal(err)
	}
	acked := r.quiesce(ctx)
	r.killQuiesced(ctx)
	r.judge(ctx, acked)
}

// setUp builds and starts the server, creates the topic (2 segments, 4
// entry buckets, automatic scaling off: the layout changes are the
// schedule's) and starts the consumer and the producer.
func (r *crashRun) setUp(ctx context.Context) {
	t := r.t
	r.srv = newChildServer(t, buildBraid(t))
	r.built = time.Since(r.begin)
	if err := r.srv.start(); err != nil {
		t.Fatal(err)
	}
	r.ctl = connect(t, r.srv.url(), "crash-control")
	r.admin = client.NewAdmin(r.ctl, client.WithRequestTimeout(2*time.Second))
	if err := r.srv.waitReady(ctx, r.ctl, func(ctx context.Context) error { _, err := r.admin.ListTenants(ctx); return err }); err != nil {
		t.Fatal(err)
	}
	off := false
	// The storage worker rolls the topic's logs every 50 ms (the server
	// runs it every 20 ms) and offloads every closed file to the remote
	// tier, dropping its local copy at once, so that kills land in rolls
	// and in each step of offloads too, and the consumer and the checker
	// read most of the topic back from the tier; retention forever keeps
	// every acknowledged message for the checker.
	rollMs, forever, offload, dropLocal := int64(50), "-1s", true, int64(0)
	if _, err := r.admin.CreateTopic(ctx, topicURI, 2, client.WithTopicBuckets(4),
		client.WithTopicPolicies(&api.Policies{AutoScale: &off, SegmentMs: &rollMs, Retention: &forever, Offload: &offload, LocalRetentionMs: &dropLocal})); err != nil {
		t.Fatalf("create %s: %v", topicURI, err)
	}

	r.k = &killer{srv: r.srv, ctl: r.ctl, admin: r.admin, rng: newRand(r.cfg.seed, 1)}
	r.cons = newConsumer(connect(t, r.srv.url(), "crash-consumer"), topicName, subscription, "c1", r.cfg.seed,
		func() int { return int(r.k.kills.Load()) })
	r.k.cons = r.cons
	t.Cleanup(func() { // on an early failure too: stop the goroutines before the connections close
		if r.stopProd != nil {
			r.stopProd()
		}
		r.stopCons()
		r.prodDone.Wait()
		r.consDone.Wait()
	})
	r.startConsumer(ctx)

	var err error
	r.p, err = client.NewProducer(connect(t, r.srv.url(), "crash-producer"), topicURI,
		client.WithRequestTimeout(time.Second), client.WithMaxInFlight(4000))
	if err != nil {
		t.Fatalf("producer: %v", err)
	}
	r.prod = newProducer(r.p, keys)
	prodCtx, stop := context.WithCancel(ctx)
	r.stopProd = stop
	r.prodDone.Go(func() { r.prod.run(prodCtx, tick, r.cfg.perTick) })
}

func (r *crashRun) startConsumer(ctx context.Context) {
	consCtx, stop := context.WithCancel(ctx)
	r.stopCons = stop
	r.consDone.Go(func() { r.cons.run(consCtx) })
}

func (r *crashRun) stopConsumer() {
	r.stopCons()
	r.consDone.Wait()
}

// quiesce stops producing and settles every send, then lets the consumer
// be delivered every acknowledged message and acknowledge it. It returns
// the acknowledged sends.
func (r *crashRun) quiesce(ctx context.Context) map[msgID]api.Position {
	t := r.t
	r.stopProd()
	r.prodDone.Wait()
	closeCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	if err := r.p.Close(closeCtx); err != nil {
		t.Errorf("closing the producer: %v", err)
	}
	cancel()
	if sent, acked, failed, _ := r.prod.stats(); sent != acked+failed {
		t.Errorf("sent %d, but only %d callbacks ran (%d acked, %d failed)", sent, acked+failed, acked, failed)
	}
	acked := r.prod.ackedCopy() // the producer is closed: no callback runs any more
	// Errorf, not Fatal: judge still reads the topic back and says more.
	var undelivered int
	if !poll.Until(60*time.Second, func() bool { undelivered = r.cons.undelivered(acked); return undelivered == 0 }) {
		t.Errorf("draining the subscription: after 60s: %d acknowledged messages not delivered to the consumer", undelivered)
	}
	var err error
	if !poll.Until(30*time.Second, func() bool { err = backlogZero(ctx, r.admin); return err == nil }) {
		t.Errorf("the subscription's acks: after 30s: %v", err)
	}
	r.stopConsumer()
	return acked
}

// killQuiesced kills the server once more with everything acknowledged;
// after the restart the consumer, fetching again, must be delivered
// nothing at all (the checker sees any delivery below an acked cursor).
func (r *crashRun) killQuiesced(ctx context.Context) {
	t := r.t
	if err := r.k.killAndRestart("quiesced"); err != nil {
		t.Fatal(err)
	}
	if err := r.k.ready(ctx); err != nil {
		t.Fatal(err)
	}
	from := r.cons.fetches.Load()
	r.startConsumer(ctx)
	if !poll.Until(30*time.Second, func() bool { return r.cons.fetches.Load()-from >= 10 }) {
		t.Errorf("consumer after the last restart: after 30s: %d fetches answered after the last restart, want 10", r.cons.fetches.Load()-from)
	}
	r.stopConsumer()
}

// judge reads the whole topic back, checks it and the consumer's history,
// and logs the summary.
func (r *crashRun) judge(ctx context.Context, acked map[msgID]api.Position) {
	t := r.t
	all, holes, err := readAll(ctx, r.ctl)
	if err != nil {
		t.Fatalf("reading the topic back: %v", err)
	}
	d, err := r.admin.DescribeTopic(ctx, topicURI)
	if err != nil {
		t.Fatal(err)
	}
	parents := map[uint64][]uint64{}
	for _, s := range d.Segments {
		parents[s.ID] = s.Parents
	}
	events, consErrs := r.cons.snapshot()
	f := check(evidence{acked: acked, stored: all, parents: parents, events: events})

	deliveries := 0
	for _, e := range events {
		if !e.ack {
			deliveries++
		}
	}
	sent, ackedN, failedN, prodErrs := r.prod.stats()
	t.Logf("producer: sent %d, acked %d, failed %d %v", sent, ackedN, failedN, prodErrs)
	t.Logf("consumer: %d deliveries, %d redelivered, %d ack requests answered; failures %v", deliveries, f.redelivered, f.ackRequests, consErrs)
	t.Logf("kills: %s; layout requests %s; restarts took %s on average, at most %s", r.k.kindSummary(), r.k.layoutSummary(),
		r.k.avgReady(), r.k.maxReady.Round(time.Millisecond))
	t.Logf("topic: %d segments at epoch %d, %d messages stored, %d holes in unit offsets; %d asynchronous client errors",
		len(d.Segments), d.Epoch, len(all), holes, asyncErrors.Load())
	st, err := r.admin.Stats(ctx, topicURI)
	if err != nil {
		t.Fatal(err)
	}
	var tierOnly uint64
	for _, b := range st.Buckets {
		if b.LocalFirstOffset > b.FirstOffset {
			tierOnly += b.LocalFirstOffset - b.FirstOffset
		}
	}
	t.Logf("remote tier: %d bytes, %d of the %d messages there only (read back from it)", st.TierBytes, tierOnly, len(all))
	if st.TierBytes == 0 || tierOnly == 0 {
		t.Errorf("the topic offloads every closed file, yet the tier holds %d bytes and %d messages only there", st.TierBytes, tierOnly)
	}
	for _, level := range []string{"ERROR", "WARN"} {
		counts := r.srv.logMessages(level)
		for _, msg := range slices.Sorted(maps.Keys(counts)) {
			t.Logf("server log: %d %s %s", counts[msg], level, msg)
		}
	}
	if races := r.srv.logLines("WARNING: DATA RACE"); len(races) > 0 {
		t.Errorf("the server reported %d data races; the first:\n%s", len(races), r.srv.logFrom("WARNING: DATA RACE", 80))
	}
	for _, line := range f.details {
		t.Log(line)
	}
	t.Logf("SUMMARY kills %d, acked messages %d, acked consumer acks %d, lost %d, duplicated %d (acked %d), reordered %d, "+
		"misplaced %d, off-chain %d, consumer acks lost %d, acked never delivered %d, delivered out of key order %d; build %s, total %s",
		r.k.kills.Load(), f.acked, f.ackRequests, f.lost, f.ackedDup+f.unackedDup, f.ackedDup, f.reordered,
		f.misplaced, f.chain, f.ackLost, f.consumerMissed, f.consumerReordered,
		r.built.Round(time.Millisecond), time.Since(r.begin).Round(time.Millisecond))
	if f.failed() {
		t.Errorf("durability broken (seed %d): see the lines above", r.cfg.seed)
	}
	if f.unackedDup > 0 {
		t.Logf("note: %d unacknowledged sends are stored more than once; the producer never resends", f.unackedDup)
	}
	if f.acked == 0 || f.ackRequests == 0 {
		t.Errorf("the workload did nothing: %d messages and %d consumer acks acknowledged", f.acked, f.ackRequests)
	}
}

func backlogZero(ctx context.Context, admin *client.Admin) error {
	st, err := admin.Stats(ctx, topicURI)
	if err != nil {
		return err
	}
	for _, s := range st.Subscriptions {
		if s.Name == subscription {
			if s.Backlog > 0 {
				return fmt.Errorf("backlog %d", s.Backlog)
			}
			return nil
		}
	}
	return fmt.Errorf("no subscription %q in the topic's stats", subscription)
}

// readAll reads every unit of the topic from its first offset to its end
// with read.fetch, and counts the holes in the offsets (offsets are dense).
func readAll(ctx context.Context, nc *nats.Conn) (all []stored, holes int, err error) {
	var offsets api.OffsetsReply
	if err := requestJSON(ctx, nc, api.ReadSubject(api.ReadOffsets, "public", "default", topicName), api.OffsetsRequest{}, &offsets); err != nil {
		return nil, 0, err
	}
	for _, u := range offsets.Units {
		if u.First != 0 {
			return nil, 0, fmt.Errorf("unit %d/%d starts at offset %d: retention removed some", u.Segment, u.Bucket, u.First)
		}
		for off := u.First; off < u.Next; {
			req := api.ReadRequest{Units: []api.ReadUnit{{Segment: u.Segment, Bucket: u.Bucket, Offset: off}}, Max: 10000}
			data, err := request(ctx, nc, api.ReadSubject(api.ReadFetch, "public", "default", topicName), req)
			if err != nil {
				return nil, 0, err
			}
			r, err := api.DecodeReadReply(data)
			if err != nil {
				return nil, 0, err
			}
			if len(r.Units) != 1 || r.Units[0].Code != 0 {
				return nil, 0, fmt.Errorf("read of %d/%d at %d: unit status %+v", u.Segment, u.Bucket, off, r.Units)
			}
			if len(r.Messages) == 0 {
				return nil, 0, fmt.Errorf("read of %d/%d at %d: nothing, but offsets said it ends at %d", u.Segment, u.Bucket, off, u.Next)
			}
			for i := range r.Messages {
				m := &r.Messages[i]
				if m.Offset != off {
					holes++
				}
				id, err := decode(m)
				if err != nil {
					return nil, 0, err
				}
				all = append(all, stored{id: id, pos: api.Position{Segment: m.Segment, Bucket: m.Bucket, Offset: m.Offset}})
				off = m.Offset + 1
			}
		}
	}
	return all, holes, nil
}
