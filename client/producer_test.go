package client

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/braidmq/braid/internal/poll"

	"github.com/nats-io/nats.go"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/topology"
)

// produceKeyed sends n records over keys keys, each payload its sequence
// number, concurrently with during(i) called before record i. It returns
// the callbacks' outcomes by sequence number once all are in.
func produceKeyed(t *testing.T, p *Producer, n, keys int, during func(i int)) []error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	errs := make([]error, n)
	var wg sync.WaitGroup
	wg.Add(n)
	for i := range n {
		if during != nil {
			during(i)
		}
		rec := api.Record{Key: []byte("k" + strconv.Itoa(i%keys)), Payload: []byte(strconv.Itoa(i))}
		err := p.Send(ctx, rec, func(_ MessageID, err error) {
			errs[i] = err
			wg.Done()
		})
		if err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	return errs
}

// noSendErrors fails the test at the first record whose send failed.
func noSendErrors(t *testing.T, errs []error) {
	t.Helper()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
	}
}

// checkKeyOrder checks that every record 0..n-1 was appended exactly once
// and that an ordered reader sees every key's records in send order.
func checkKeyOrder(t *testing.T, f *fakeTopic, n, keys int) {
	t.Helper()
	total := 0
	for key, payloads := range f.keyOrder() {
		k, _ := strconv.Atoi(key[1:])
		want := k
		for _, p := range payloads {
			if p != strconv.Itoa(want) {
				t.Fatalf("key %s: read %s where %d was expected (read order %v)", key, p, want, payloads)
			}
			want += keys
		}
		total += len(payloads)
	}
	if total != n {
		t.Fatalf("%d records appended, want %d", total, n)
	}
}

func TestProducerAppendsInKeyOrder(t *testing.T) {
	f, nc := newFake(t, 2, 4)
	p, err := NewProducer(nc, fakeURI, WithBatch(50, 1<<20), WithLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	for i, err := range produceKeyed(t, p, 2000, 37, nil) {
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
	}
	checkKeyOrder(t, f, 2000, 37)
}

func TestProducerSendSyncReturnsID(t *testing.T) {
	f, nc := newFake(t, 1, 1)
	p, err := NewProducer(nc, fakeURI)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	for i := range 3 {
		id, err := p.SendSync(t.Context(), api.Record{Key: []byte("a"), Payload: []byte("x")})
		if err != nil {
			t.Fatal(err)
		}
		if id != (MessageID{0, 0, uint64(i)}) {
			t.Fatalf("record %d got id %v", i, id)
		}
	}
	if n := len(f.logs[unit{0, 0}]); n != 3 {
		t.Fatalf("%d records in the log, want 3", n)
	}
}

// TestProducerRuleSealed makes the fake route by a stale layout after each
// change, so appends hit sealed segments and come back SEGMENT_SEALED, with
// no layout push: the producer must refresh, wait, and re-route, losing and
// reordering nothing.
func TestProducerRuleSealed(t *testing.T) {
	f, nc := newFake(t, 2, 4)
	f.push = false
	p, err := NewProducer(nc, fakeURI, WithBatch(20, 1<<20), WithLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	const n, keys = 6000, 50
	errs := produceKeyed(t, p, n, keys, func(i int) {
		switch i {
		case 1000:
			f.change(func(l topology.Layout) (topology.Layout, error) { return l.Split(0, nil) }, 3)
		case 2500:
			f.change(func(l topology.Layout) (topology.Layout, error) { return l.Split(1, nil) }, 3)
		case 4000:
			f.change(func(l topology.Layout) (topology.Layout, error) { return l.Merge(2, 3) }, 3)
		case 5000:
			f.change(func(l topology.Layout) (topology.Layout, error) { return l.Rebucket(6, 5) }, 3)
		}
	})
	noSendErrors(t, errs)
	f.mu.Lock()
	sealed := f.sealedCount
	f.mu.Unlock()
	if sealed == 0 {
		t.Fatal("no append was rejected as sealed: the test did not exercise the producer rule")
	}
	t.Logf("%d appends rejected as sealed and re-routed", sealed)
	checkKeyOrder(t, f, n, keys)
}

// TestUnitPipeline: a saturated producer keeps several full batches of one
// unit in flight (up to WithUnitPipeline), and only one with the pipeline
// at 1; per-key order holds both ways, across a split whose seal refuses
// batches in flight.
func TestUnitPipeline(t *testing.T) {
	for _, depth := range []int{1, 4} {
		t.Run(strconv.Itoa(depth), func(t *testing.T) {
			f, nc := newFake(t, 1, 1) // one unit
			f.mu.Lock()
			f.produceDelay = 20 * time.Millisecond
			f.mu.Unlock()
			p, err := NewProducer(nc, fakeURI, WithBatch(50, 1<<20), WithUnitPipeline(depth), WithMaxInFlight(5000))
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close(context.Background())
			const n, keys = 3000, 20
			errs := produceKeyed(t, p, n, keys, func(i int) {
				if i == 1500 {
					f.change(func(l topology.Layout) (topology.Layout, error) { return l.Split(0, nil) }, 0)
				}
			})
			noSendErrors(t, errs)
			f.mu.Lock()
			most := f.maxUnanswered
			f.mu.Unlock()
			if depth == 1 && most > 2 { // one unit, then two after the split
				t.Fatalf("%d batches in flight at once with a pipeline of 1", most)
			}
			if depth > 1 && most < depth {
				t.Fatalf("at most %d batches in flight at once, want %d", most, depth)
			}
			checkKeyOrder(t, f, n, keys)
		})
	}
}

// TestProducerResumesAfterARolledBackSeal: a change seals a segment, the
// producer's records are refused with the epoch of a layout that never
// comes (the change is rolled back and the segment reopened); once
// sealRollbackAfter has passed with the segment active at the old epoch,
// the producer resends by the layout in force, losing and reordering
// nothing.
func TestProducerResumesAfterARolledBackSeal(t *testing.T) {
	defer func(d time.Duration) { sealRollbackAfter = d }(sealRollbackAfter)
	sealRollbackAfter = 200 * time.Millisecond
	f, nc := newFake(t, 2, 2)
	p, err := NewProducer(nc, fakeURI, WithBatch(20, 1<<20), WithLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = p.Close(ctx)
	}()
	const n, keys = 2000, 40
	errs := produceKeyed(t, p, n, keys, func(i int) {
		if i == 500 {
			f.mu.Lock()
			f.sealing = map[uint64]bool{0: true}
			f.mu.Unlock()
			time.AfterFunc(100*time.Millisecond, func() { // the change fails: unseal
				f.mu.Lock()
				f.sealing = nil
				f.mu.Unlock()
			})
		}
	})
	noSendErrors(t, errs)
	f.mu.Lock()
	sealed := f.sealedCount
	f.mu.Unlock()
	if sealed == 0 {
		t.Fatal("no append was refused: the test did not exercise the rollback")
	}
	checkKeyOrder(t, f, n, keys)
}

// TestCloseCompletesAnsweredBatchesBehindALostOne: with several batches of
// a unit in flight, the first one's reply is lost; the later ones are
// answered and wait behind it (outcomes go in send order). A Close that
// gives up must still call every callback exactly once.
func TestCloseCompletesAnsweredBatchesBehindALostOne(t *testing.T) {
	f, nc := newFake(t, 1, 1) // one unit
	f.mu.Lock()
	f.dropBatch = 1
	f.mu.Unlock()
	p, err := NewProducer(nc, fakeURI, WithBatch(10, 1<<20), WithUnitPipeline(4), WithLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	const n = 40
	var mu sync.Mutex
	calls := make([]int, n)
	for i := range n {
		if err := p.Send(t.Context(), api.Record{Key: []byte("k"), Payload: []byte(strconv.Itoa(i))}, func(_ MessageID, _ error) {
			mu.Lock()
			calls[i]++
			mu.Unlock()
		}); err != nil {
			t.Fatal(err)
		}
	}
	poll.Eventually(t, 10*time.Second, "four batches at the fake", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.batches >= 4
	})
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	if err := p.Close(ctx); err == nil {
		t.Fatal("Close returned nil with a batch unanswered")
	}
	mu.Lock()
	defer mu.Unlock()
	for i, c := range calls {
		if c != 1 {
			t.Fatalf("record %d: callback called %d times, want once", i, c)
		}
	}
}

// TestProducerRulePush changes the layout with a push and no stale routing.
func TestProducerRulePush(t *testing.T) {
	f, nc := newFake(t, 1, 2)
	p, err := NewProducer(nc, fakeURI, WithBatch(10, 1<<20), WithLinger(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	const n, keys = 3000, 20
	errs := produceKeyed(t, p, n, keys, func(i int) {
		if i == 1000 {
			f.change(func(l topology.Layout) (topology.Layout, error) { return l.Split(0, nil) }, 0)
		}
	})
	noSendErrors(t, errs)
	checkKeyOrder(t, f, n, keys)
	poll.Eventually(t, 10*time.Second, "the pushed layout", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.router.epoch == 2
	})
	// Once the push is applied, nothing goes to the sealed segment.
	f.mu.Lock()
	before := len(f.logs[unit{0, 0}]) + len(f.logs[unit{0, 1}])
	f.mu.Unlock()
	produceKeyed(t, p, 100, keys, nil)
	f.mu.Lock()
	after := len(f.logs[unit{0, 0}]) + len(f.logs[unit{0, 1}])
	f.mu.Unlock()
	if after != before {
		t.Fatalf("%d records went to sealed segment 0 after the push", after-before)
	}
}

func TestProducerRerouteLimit(t *testing.T) {
	f, nc := newFake(t, 1, 1)
	f.push = false
	p, err := NewProducer(nc, fakeURI, WithLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	// A server that routes by a stale layout for ever.
	f.change(func(l topology.Layout) (topology.Layout, error) { return l.Split(0, nil) }, 1<<30)
	_, err = p.SendSync(t.Context(), api.Record{Key: []byte("a")})
	if !errors.Is(err, ErrRerouteLimit) || !errors.Is(err, api.ErrSegmentSealed) {
		t.Fatalf("err = %v, want ErrRerouteLimit wrapping SEGMENT_SEALED", err)
	}
}

func TestProducerTimeoutIsReported(t *testing.T) {
	f, nc := newFake(t, 1, 1)
	f.dropReplies = true
	p, err := NewProducer(nc, fakeURI, WithRequestTimeout(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	_, err = p.SendSync(t.Context(), api.Record{Key: []byte("a")})
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("err = %v, want ErrTimeout", err)
	}
	f.mu.Lock()
	batches := f.batches
	f.mu.Unlock()
	if batches != 1 {
		t.Fatalf("the fake got %d batches: a timed-out batch must not be resent", batches)
	}
}

func TestProducerWindowBlocksSend(t *testing.T) {
	f, nc := newFake(t, 1, 1)
	f.dropReplies = true
	p, err := NewProducer(nc, fakeURI, WithMaxInFlight(2), WithRequestTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := p.Send(t.Context(), api.Record{Payload: []byte("x")}, nil); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Millisecond)
	defer cancel()
	if err := p.Send(ctx, api.Record{Payload: []byte("x")}, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("third Send = %v, want it to block until the deadline", err)
	}
	// Close with an expired context abandons the records with ErrClosed.
	var got []error
	var mu sync.Mutex
	p2, err := NewProducer(nc, fakeURI, WithRequestTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := p2.Send(t.Context(), api.Record{Payload: []byte("x")}, func(_ MessageID, err error) {
		mu.Lock()
		got = append(got, err)
		mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	expired, cancel2 := context.WithTimeout(t.Context(), 10*time.Millisecond)
	defer cancel2()
	if err := p2.Close(expired); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close = %v, want DeadlineExceeded", err)
	}
	if len(got) != 1 || !errors.Is(got[0], ErrClosed) {
		t.Fatalf("callback got %v, want ErrClosed", got)
	}
	if err := p2.Send(t.Context(), api.Record{}, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("Send after Close = %v, want ErrClosed", err)
	}
	closeCtx, cancel3 := context.WithTimeout(t.Context(), 10*time.Millisecond)
	defer cancel3()
	_ = p.Close(closeCtx)
}

func TestProducerErrors(t *testing.T) {
	_, nc := newFake(t, 1, 1)
	if _, err := NewProducer(nc, "topic://t/ns/missing"); !errors.Is(err, api.ErrTopicNotFound) {
		t.Fatalf("unknown topic: %v, want api.ErrTopicNotFound", err)
	}
	if _, err := NewProducer(nc, "topic://t/ns/bad.name"); !errors.Is(err, api.ErrInvalidName) {
		t.Fatalf("bad name: %v, want api.ErrInvalidName", err)
	}
	if _, err := NewProducer(nc, fakeURI, WithMaxInFlight(-1)); !errors.Is(err, ErrInvalidOption) {
		t.Fatalf("bad option: %v, want ErrInvalidOption", err)
	}
	// A topic nobody serves produce for: describe answers, produce does not.
	s := startNATS(t)
	nc2 := connect(t, s.ClientURL())
	srv := connect(t, s.ClientURL())
	if _, err := NewProducer(nc2, fakeURI); !errors.Is(err, ErrNoServer) || !errors.Is(err, api.ErrUnavailable) {
		t.Fatalf("no server: %v, want ErrNoServer", err)
	}
	l, _ := topology.New(1, 1)
	d := description(t, l)
	if _, err := srv.Subscribe(api.AdminSubject(api.AdminTopicDescribe), func(m *nats.Msg) { replyJSON(m, d) }); err != nil {
		t.Fatal(err)
	}
	_ = srv.Flush()
	p, err := NewProducer(nc2, fakeURI)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	if _, err := p.SendSync(t.Context(), api.Record{}); !errors.Is(err, ErrNoServer) {
		t.Fatalf("produce with no server: %v, want ErrNoServer", err)
	}
}

// TestSendersOfManyGoroutinesKeepKeyOrder: with no linger, Send hands a
// batch to the mux itself while the sender loop hands others; goroutines
// sending keys of their own at once, with small batches pipelined, still
// see each key appended in Send order.
func TestSendersOfManyGoroutinesKeepKeyOrder(t *testing.T) {
	f, nc := newFake(t, 1, 4)
	p, err := NewProducer(nc, fakeURI, WithBatch(1, 1<<20), WithLinger(0), WithUnitPipeline(2))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	const goroutines, keys, perKey = 8, 4, 150
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range perKey {
				for k := range keys {
					rec := api.Record{Key: []byte(fmt.Sprintf("g%dk%d", g, k)), Payload: []byte(strconv.Itoa(n))}
					if err := p.Send(t.Context(), rec, nil); err != nil {
						t.Error(err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	if err := p.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	total := 0
	for key, payloads := range f.keyOrder() {
		for n, got := range payloads {
			if got != strconv.Itoa(n) {
				t.Fatalf("key %s: record %d read as %s (read order %v)", key, n, got, payloads)
			}
		}
		total += len(payloads)
	}
	if total != goroutines*keys*perKey {
		t.Fatalf("%d records appended, want %d", total, goroutines*keys*perKey)
	}
}
