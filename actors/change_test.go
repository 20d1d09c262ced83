package actors

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/internal/poll"
	"github.com/braidmq/braid/topology"
	dto "github.com/prometheus/client_model/go"
)

// TestCrashAfterEveryStepOfAChange crashes a topic's controller right
// after step k of a layout change's plan, for every k of a split and of a
// merge, while a producer that knows nothing of layouts pipelines keyed
// appends. After the controller restarts (and reads its record from the
// store), the producer goes on, and then:
//   - the topic serves the layout the store holds: the old one when the
//     crash came before the compare-and-swap, the next one from it on;
//   - every acknowledged append reads back where it was acknowledged, and
//     no append is stored twice, across every segment's logs;
//   - each key's acknowledged appends are in the order they were sent;
//   - the topic changes its layout again (the ids of a change abandoned by
//     the crash are allocated again).
func TestCrashAfterEveryStepOfAChange(t *testing.T) {
	m := newTestManager(t)
	crashes := &stepCrashes{at: map[string]int{}, done: map[string]bool{}}
	m.afterStep = crashes.afterStep
	changes := []struct {
		name     string
		segments int
		op       func(topology.Layout) topology.Op
	}{
		{"split", 1, func(l topology.Layout) topology.Op { return topology.Split(l.Active()[0].ID, nil) }},
		{"merge", 2, func(l topology.Layout) topology.Op {
			a := l.Active()
			return topology.Merge(a[0].ID, a[1].ID)
		}},
	}
	for _, change := range changes {
		// The plan of the change on a topic as created below.
		l, err := topology.New(change.segments, 2*change.segments)
		if err != nil {
			t.Fatal(err)
		}
		plan, err := topology.PlanChange(l, change.op(l))
		if err != nil {
			t.Fatal(err)
		}
		for k, step := range plan.Steps {
			t.Run(fmt.Sprintf("%s/after-%d-%s", change.name, k+1, step.Kind), func(t *testing.T) {
				uri := fmt.Sprintf("topic://t/n/crash-%s-%d", change.name, k+1)
				crashAfterStep(t, m, crashes, uri, change.segments, change.op, k, k >= plan.Commit)
			})
		}
	}
}

// stepCrashes is the controllers' afterStep in TestCrashAfterEveryStepOfAChange:
// it crashes the controller of a topic once, after step at[topic].
type stepCrashes struct {
	mu   sync.Mutex
	at   map[string]int
	done map[string]bool
}

func (c *stepCrashes) afterStep(topic string, k int, _ topology.Step) {
	c.mu.Lock()
	at, armed := c.at[topic]
	crash := armed && k == at && !c.done[topic]
	if crash {
		c.done[topic] = true
	}
	c.mu.Unlock()
	if crash {
		panic(fmt.Sprintf("test crash after step %d", k+1))
	}
}

func (c *stepCrashes) arm(topic string, k int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at[topic] = k
}

func (c *stepCrashes) crashed(topic string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.done[topic]
}

func crashAfterStep(t *testing.T, m *Manager, crashes *stepCrashes, uri string, segments int, op func(topology.Layout) topology.Op, k int, committed bool) {
	off := false
	if _, err := m.CreateTopic(context.Background(), api.TopicCreateRequest{Topic: uri, Segments: segments, Buckets: 2 * segments,
		Policies: &api.Policies{AutoScale: &off}}); err != nil {
		t.Fatal(err)
	}
	topic, err := m.Topic(uri)
	if err != nil {
		t.Fatal(err)
	}
	before := topic.Layout()
	p := startKeyedProducer(topic, 16, 200)
	p.waitAcked(t, 300)

	crashes.arm(uri, k)
	// Sent as the admin endpoint would, but with no one waiting for the
	// answer: the controller crashes before it gives one.
	m.system.Root.Send(topic.pid, &changeReq{op: op(before), reason: "test"})
	poll.Eventually(t, 10*time.Second, "the controller crashing after the step", func() bool { return crashes.crashed(uri) })
	want := before.Epoch
	if committed {
		want++
	}
	// The restarted controller publishes the store's layout with new
	// buckets; the producer's appends are acknowledged again.
	acked := p.ackedCount()
	poll.Eventually(t, 20*time.Second, "the topic serving again after the restart", func() bool {
		return topic.Epoch() == want && p.ackedCount() >= acked+300
	})
	p.stop(t)

	rec, _, err := m.meta.Topic(context.Background(), topic.name)
	if err != nil {
		t.Fatal(err)
	}
	served := topic.Layout()
	stored, _ := rec.Layout.MarshalJSON()
	shown, _ := served.MarshalJSON()
	if rec.Layout.Epoch != want || !bytes.Equal(stored, shown) {
		t.Fatalf("the store holds epoch %d, the topic serves epoch %d; want %d in both, the same layout", rec.Layout.Epoch, served.Epoch, want)
	}
	if err := served.Validate(); err != nil {
		t.Fatal(err)
	}
	p.check(t, topic, served)

	// The topic still changes: a split after the restart (which, after
	// a crash before the commit, allocates the abandoned ids again).
	if _, err := m.Change(context.Background(), uri, topology.Split(served.Active()[0].ID, nil)); err != nil {
		t.Fatalf("a split after the restart: %v", err)
	}
}

// keyedProducer pipelines keyed appends, one record per request and up to
// window in flight, each with a payload of its own (its index), as a plain
// NATS client would; it records every answer.
type keyedProducer struct {
	keys     int
	mu       sync.Mutex
	sent     []int        // the key of each append, by index
	results  []api.Result // the answer to each, by index
	answered []bool
	acked    int
	slots    chan struct{}
	quit     chan struct{}
	done     chan struct{}
}

func startKeyedProducer(topic *Topic, keys, window int) *keyedProducer {
	p := &keyedProducer{keys: keys, slots: make(chan struct{}, window), quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for i := 0; ; i++ {
			select {
			case <-p.quit:
				return
			case p.slots <- struct{}{}:
			}
			key := i % keys
			p.mu.Lock()
			p.sent = append(p.sent, key)
			p.results = append(p.results, api.Result{})
			p.answered = append(p.answered, false)
			p.mu.Unlock()
			topic.Produce([]api.Record{{Key: []byte("key-" + strconv.Itoa(key)), Payload: []byte(strconv.Itoa(i))}}, func(r []api.Result) {
				p.mu.Lock()
				p.results[i], p.answered[i] = r[0], true
				if r[0].Code == 0 {
					p.acked++
				}
				p.mu.Unlock()
				<-p.slots
			})
		}
	}()
	return p
}

func (p *keyedProducer) ackedCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.acked
}

func (p *keyedProducer) waitAcked(t *testing.T, n int) {
	t.Helper()
	poll.Eventually(t, 10*time.Second, fmt.Sprintf("%d appends acknowledged", n), func() bool { return p.ackedCount() >= n })
}

// stop stops sending and waits until every append sent is answered.
func (p *keyedProducer) stop(t *testing.T) {
	t.Helper()
	close(p.quit)
	<-p.done
	if poll.Until(20*time.Second, func() bool { return len(p.slots) == 0 }) {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var never []int
	for i := range p.results {
		if !p.answered[i] {
			never = append(never, i)
		}
	}
	t.Fatalf("%d of %d appends never answered: %v", len(never), len(p.results), never[:min(len(never), 20)])
}

// check reads every log of the topic's layout l and checks the answers:
// an acknowledged append is where it was acknowledged, no append is
// stored twice, each key's acknowledged appends follow each other in
// the order sent, and whatever failed failed UNAVAILABLE (a producer
// resends those).
func (p *keyedProducer) check(t *testing.T, topic *Topic, l topology.Layout) {
	t.Helper()
	type place struct {
		seg    uint64
		bucket int
		offset uint64
	}
	stored := map[string]place{}
	for _, s := range l.Segments {
		if s.State == topology.StateDeleted {
			continue
		}
		for b := range s.Buckets {
			first, next, err := topic.Bounds(s.ID, b)
			if err != nil {
				t.Fatalf("bounds of %d/%d: %v", s.ID, b, err)
			}
			for off := first; off < next; {
				recs, err := topic.Read(s.ID, b, off, 1000, 1<<20)
				if err != nil || len(recs) == 0 {
					t.Fatalf("read %d/%d at %d: %d records, %v", s.ID, b, off, len(recs), err)
				}
				for i, r := range recs {
					at := place{uint64(s.ID), b, off + uint64(i)}
					if was, twice := stored[string(r.Payload)]; twice {
						t.Fatalf("append %s stored twice: at %v and %v", r.Payload, was, at)
					}
					stored[string(r.Payload)] = at
				}
				off += uint64(len(recs))
			}
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	last := map[int]api.Result{}
	failed := 0
	for i, r := range p.results {
		if r.Code != 0 {
			if r.Code != api.CodeUnavailable.Number {
				t.Fatalf("append %d: %v", i, r.Err())
			}
			failed++
			continue
		}
		if got, ok := stored[strconv.Itoa(i)]; !ok || got != (place{r.Segment, r.Bucket, r.Offset}) {
			t.Fatalf("append %d acknowledged at %d/%d/%d is stored at %v (found: %v)", i, r.Segment, r.Bucket, r.Offset, got, ok)
		}
		key := p.sent[i]
		if prev, ok := last[key]; ok && !follows(l, prev, r) {
			t.Fatalf("append %d of key %d at %d/%d/%d, after %d/%d/%d", i, key, r.Segment, r.Bucket, r.Offset, prev.Segment, prev.Bucket, prev.Offset)
		}
		last[key] = r
	}
	t.Logf("%d appends: %d acknowledged, %d failed UNAVAILABLE", len(p.results), len(p.results)-failed, failed)
}

// TestAFailedCompareAndSwapUndoesTheChange has another writer move the
// topic's record on behind its controller, so that the next change fails
// at its compare-and-swap (the plan's commit) under a producer: the change
// answers UNAVAILABLE, the spawned segments are abandoned (their logs
// removed, their ids free again), the controller reloads the store's record
// and serves it, every acknowledged append is where it was acknowledged,
// in key order, and the change goes through when asked again.
func TestAFailedCompareAndSwapUndoesTheChange(t *testing.T) {
	m := newTestManager(t)
	const uri = "topic://t/n/conflict"
	off := false
	if _, err := m.CreateTopic(context.Background(), api.TopicCreateRequest{Topic: uri, Segments: 1, Buckets: 2,
		Policies: &api.Policies{AutoScale: &off}}); err != nil {
		t.Fatal(err)
	}
	topic, err := m.Topic(uri)
	if err != nil {
		t.Fatal(err)
	}
	p := startKeyedProducer(topic, 16, 200)
	p.waitAcked(t, 300)
	ctx := context.Background()
	rec, rev, err := m.meta.Topic(ctx, topic.name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.meta.UpdateTopic(ctx, topic.name, rec, rev); err != nil {
		t.Fatal(err)
	}
	plan, err := topology.PlanChange(topic.Layout(), topology.Split(0, nil))
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.Change(ctx, uri, topology.Split(0, nil))
	if e := api.AsError(err); e == nil || e.Code != api.CodeUnavailable {
		t.Fatalf("a change over a record moved on answered %v, want UNAVAILABLE", err)
	}
	for _, id := range plan.Created {
		if _, err := os.Stat(filepath.Join(m.store.TopicDir(topic.name), fmt.Sprintf("seg-%d", id))); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("the logs of abandoned segment %d: %v, want none", id, err)
		}
	}
	acked := p.ackedCount()
	poll.Eventually(t, 20*time.Second, "the topic serving again after the reload", func() bool { return p.ackedCount() >= acked+300 })
	p.stop(t)
	if l := topic.Layout(); l.Epoch != rec.Layout.Epoch || len(l.Active()) != 1 {
		t.Fatalf("after the failed change the topic serves epoch %d with %d active segments, want epoch %d with 1", l.Epoch, len(l.Active()), rec.Layout.Epoch)
	}
	p.check(t, topic, topic.Layout())
	d, err := m.Change(ctx, uri, topology.Split(0, nil))
	if err != nil {
		t.Fatalf("the change asked again: %v", err)
	}
	if got := []uint64{d.Segments[len(d.Segments)-2].ID, d.Segments[len(d.Segments)-1].ID}; got[0] != uint64(plan.Created[0]) || got[1] != uint64(plan.Created[1]) {
		t.Fatalf("the change asked again created %v, want the abandoned ids %v", got, plan.Created)
	}
}

// TestSealAndHandOverOfABucketThatIsGone: the controller waits for seals
// and hand-overs on futures; one sent to a bucket that has stopped is a
// dead letter, which fails a seal at once (ErrDeadLetter, not a timeout)
// and counts as done for a hand-over (its stop answered what it held), not
// as a hand-over that failed.
func TestSealAndHandOverOfABucketThatIsGone(t *testing.T) {
	m := newTestManager(t)
	topic := createTestTopic(t, m, "topic://t/n/gone", 1, 1)
	gone := actor.NewPID(m.system.Address(), "nobody/b-0")
	st := &topicState{layout: topic.Layout(), buckets: map[topology.SegmentID][]*actor.PID{0: {gone}}}
	c := &controller{t: topic}
	if err := c.sealIn(st, []topology.SegmentID{0}, 2, false); !errors.Is(err, actor.ErrDeadLetter) {
		t.Fatalf("a seal of a bucket that is gone: %v, want a dead letter", err)
	}
	handoffFailures := func() float64 {
		var d dto.Metric
		if err := m.m.handoffFailures.Write(&d); err != nil {
			t.Fatal(err)
		}
		return d.GetCounter().GetValue()
	}
	failures := handoffFailures()
	c.handOver(st, []topology.SegmentID{0}, st)
	if got := handoffFailures(); got != failures {
		t.Fatalf("a hand-over to a bucket that is gone counted as failed (%v, was %v)", got, failures)
	}
}
