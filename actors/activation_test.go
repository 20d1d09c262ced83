package actors

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/internal/poll"
	"github.com/braidmq/braid/topology"
)

// readAll reads every record of the topic's active units through a fresh
// handle and returns the payloads per unit, in offset order.
func readAll(t *testing.T, m *Manager, uri string) map[unitRef][]string {
	t.Helper()
	topic, err := m.Topic(uri)
	if err != nil {
		t.Fatal(err)
	}
	out := map[unitRef][]string{}
	for _, s := range topic.Layout().Active() {
		for b := range s.Buckets {
			for from := uint64(0); ; {
				recs, err := topic.Read(s.ID, b, from, 1000, 0)
				if err != nil {
					t.Fatalf("read %d/%d from %d: %v", s.ID, b, from, err)
				}
				if len(recs) == 0 {
					break
				}
				for _, r := range recs {
					out[unitRef{s.ID, b}] = append(out[unitRef{s.ID, b}], string(r.Payload))
				}
				from += uint64(len(recs))
			}
		}
	}
	return out
}

// TestPassivationIsInvisibleToProducers passivates a topic over and over
// while a producer keeps 64 requests in flight through the handle it got
// at the start (as the produce front-end caches it): every request is
// answered with success, and every key's records are stored once, in
// order.
func TestPassivationIsInvisibleToProducers(t *testing.T) {
	m := newTestManager(t)
	const uri = "topic://t/n/passive"
	topic := createTestTopic(t, m, uri, 2, 4)
	const keys = 16
	var (
		acked   atomic.Int64
		failed  atomic.Int64
		errMu   sync.Mutex
		firstEr error
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		window := make(chan struct{}, 64)
		var inflight sync.WaitGroup
		for i := 0; ; i++ {
			select {
			case <-stop:
				inflight.Wait()
				return
			case window <- struct{}{}:
			}
			k := i % keys
			rec := api.Record{Key: []byte(fmt.Sprintf("k%02d", k)), Payload: []byte(fmt.Sprintf("k%02d-%07d", k, i/keys))}
			inflight.Add(1)
			topic.Produce([]api.Record{rec}, func(res []api.Result) {
				if err := res[0].Err(); err != nil {
					failed.Add(1)
					errMu.Lock()
					if firstEr == nil {
						firstEr = err
					}
					errMu.Unlock()
				} else {
					acked.Add(1)
				}
				<-window
				inflight.Done()
			})
		}
	}()
	passivations := 0
	for range 20 {
		// Let the producer get some through the topic as it is now.
		target := acked.Load() + 200
		// Not a check: the passivation comes after 10s regardless, and
		// the checks below say what came of them.
		poll.Until(10*time.Second, func() bool { return acked.Load() >= target || failed.Load() != 0 })
		if cur, ok := m.Active(uri); ok && m.passivate(cur, 0) {
			passivations++
		}
	}
	close(stop)
	wg.Wait()
	if failed.Load() > 0 {
		t.Fatalf("%d of %d produce requests failed across %d passivations; first: %v", failed.Load(), acked.Load()+failed.Load(), passivations, firstEr)
	}
	if passivations < 10 {
		t.Fatalf("only %d passivations happened", passivations)
	}
	next := map[string]int{}
	total := 0
	for u, payloads := range readAll(t, m, uri) {
		for _, p := range payloads {
			var k, seq int
			if _, err := fmt.Sscanf(p, "k%02d-%07d", &k, &seq); err != nil {
				t.Fatalf("unit %v holds %q", u, p)
			}
			key := fmt.Sprintf("k%02d", k)
			if seq != next[key] {
				t.Fatalf("key %s: record %d where %d was due (lost, duplicated or reordered)", key, seq, next[key])
			}
			next[key]++
			total++
		}
	}
	if int64(total) != acked.Load() {
		t.Fatalf("stored %d records, %d were acknowledged", total, acked.Load())
	}
	t.Logf("%d records over %d passivations", total, passivations)
}

// TestIdleTopicsPassivateAndComeBack lets a topic go idle: its actors stop
// and its logs close, and the next request activates it again, with
// everything it held.
func TestIdleTopicsPassivateAndComeBack(t *testing.T) {
	m := newTestManagerWith(t, func(c *Config) { c.IdleTimeout = 100 * time.Millisecond })
	if err := m.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	const uri = "topic://t/n/idle"
	topic := createTestTopic(t, m, uri, 1, 2)
	for i := range 10 {
		if r := produceSync(t, topic, api.Record{Key: []byte("k"), Payload: []byte(fmt.Sprint(i))}); r[0].Err() != nil {
			t.Fatal(r[0].Err())
		}
	}
	if !poll.Until(10*time.Second, func() bool {
		_, active := m.Active(uri)
		return !active && m.store.OpenLogs() == 0
	}) {
		_, active := m.Active(uri)
		t.Fatalf("the idle topic is still active (%v) with %d logs open", active, m.store.OpenLogs())
	}
	if topic.Live() {
		t.Fatal("the passivated handle says it is live")
	}
	r := produceSync(t, topic, api.Record{Key: []byte("k"), Payload: []byte("10")})
	if r[0].Err() != nil || r[0].Offset != 10 {
		t.Fatalf("produce after the passivation: %+v, want offset 10", r[0])
	}
	got := 0
	for _, p := range readAll(t, m, uri) {
		got += len(p)
	}
	if got != 11 {
		t.Fatalf("the topic holds %d records after coming back, want 11", got)
	}
}

// TestOpenLogsBudget keeps the node under a budget of 8 open logs with
// topics of 4: an activation over it passivates the least recently used
// topic; when every active topic is held, it is refused with UNAVAILABLE
// saying why, the active topics keep working, and the refused topic's data
// is there once room is made.
func TestOpenLogsBudget(t *testing.T) {
	var held sync.Map
	m := newTestManagerWith(t, func(c *Config) {
		c.MaxOpenLogs = 8
		c.InUse = func(uri string) bool { _, ok := held.Load(uri); return ok }
	})
	uri := func(s string) string { return "topic://t/n/" + s }
	for _, name := range []string{"a", "b", "c"} {
		if _, err := m.CreateTopic(context.Background(), api.TopicCreateRequest{Topic: uri(name), Segments: 1, Buckets: 4}); err != nil {
			t.Fatal(err)
		}
	}
	produce := func(name string) error {
		topic, err := m.Topic(uri(name))
		if err != nil {
			return err
		}
		recs := make([]api.Record, 8)
		for i := range recs {
			recs[i] = api.Record{Key: []byte(fmt.Sprint(i)), Payload: []byte(name)}
		}
		for _, r := range produceSync(t, topic, recs...) {
			if r.Err() != nil {
				return r.Err()
			}
		}
		return nil
	}
	for _, name := range []string{"a", "b", "c"} {
		if err := produce(name); err != nil {
			t.Fatalf("produce to %s: %v", name, err)
		}
		if open := m.store.OpenLogs(); open > 8 {
			t.Fatalf("%d logs open, over the budget of 8", open)
		}
	}
	if _, active := m.Active(uri("a")); active {
		t.Fatal("the least recently used topic was not passivated to make room")
	}
	held.Store(uri("b"), true)
	held.Store(uri("c"), true)
	err := produce("a")
	if !errors.Is(err, &api.Error{Code: api.CodeUnavailable}) || !strings.Contains(err.Error(), "budget") {
		t.Fatalf("activation over a budget held by topics in use: %v, want UNAVAILABLE naming the budget", err)
	}
	for _, name := range []string{"b", "c"} {
		if err := produce(name); err != nil {
			t.Fatalf("an active topic failed while the budget was full: %v", err)
		}
	}
	held.Delete(uri("b"))
	if err := produce("a"); err != nil {
		t.Fatalf("produce once room could be made: %v", err)
	}
	units := readAll(t, m, uri("a"))
	n := 0
	for _, p := range units {
		n += len(p)
	}
	if n != 16 {
		t.Fatalf("topic a holds %d records, want 16", n)
	}
}

// TestAReadOpeningALogBeforeItsBucketStartsKeepsIt opens a unit's log for
// a read before the unit's bucket has started (activation returns once the
// controller is up; its buckets start on their own goroutines): the
// bucket's start must take that log, not close it under the read.
func TestAReadOpeningALogBeforeItsBucketStartsKeepsIt(t *testing.T) {
	m := newTestManager(t)
	const uri = "topic://t/n/early"
	topic := createTestTopic(t, m, uri, 1, 1)
	if r := produceSync(t, topic, api.Record{Key: []byte("k"), Payload: []byte("x")}); r[0].Err() != nil {
		t.Fatal(r[0].Err())
	}
	cur, _ := m.Active(uri)
	if !m.passivate(cur, 0) {
		t.Fatal("could not passivate the topic")
	}
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	hook := func(UnitKey) {
		<-release
		started <- struct{}{}
	}
	bucketStarting.Store(&hook)
	defer bucketStarting.Store(nil)
	again, err := m.Topic(uri) // activates; its bucket waits in the hook
	if err != nil {
		t.Fatal(err)
	}
	held, err := m.store.Log(UnitKey{Topic: again.name, Segment: 0, Bucket: 0}, *again.opts.Load())
	if err != nil {
		t.Fatal(err)
	}
	close(release)
	<-started
	// The bucket has run its start; give it the turn of its mailbox it
	// needs to finish it.
	if r := produceSync(t, again, api.Record{Key: []byte("k"), Payload: []byte("y")}); r[0].Err() != nil {
		t.Fatal(r[0].Err())
	}
	if recs, err := held.ReadRange(0, 10, 0); err != nil || len(recs) != 2 {
		t.Fatalf("the log a read held across its bucket's start: %d records, %v; want 2", len(recs), err)
	}
}

// TestReadsThatActivateATopicDoNotFail reads a passivated topic from many
// goroutines at once, over and over: the reads activate it, and its buckets
// start while they read, which must not close the logs under them.
func TestReadsThatActivateATopicDoNotFail(t *testing.T) {
	m := newTestManager(t)
	const uri = "topic://t/n/readers"
	topic := createTestTopic(t, m, uri, 1, 4)
	recs := make([]api.Record, 40)
	for i := range recs {
		recs[i] = api.Record{Key: []byte(fmt.Sprint(i)), Payload: []byte("x")}
	}
	for _, r := range produceSync(t, topic, recs...) {
		if r.Err() != nil {
			t.Fatal(r.Err())
		}
	}
	for round := range 30 {
		cur, ok := m.Active(uri)
		if !ok || !m.passivate(cur, 0) {
			t.Fatalf("round %d: could not passivate the topic", round)
		}
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for b := range 4 {
					if _, err := topic.Read(topology.SegmentID(0), b, 0, 100, 0); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("round %d: a read that activated the topic failed: %v", round, err)
		}
	}
}

// TestTopicOfAStoppedControllerActivatesAgain: a controller whose
// supervisor gives up restarting it (more than its restarts in its
// window) is forgotten: its handles look the topic up again and the next
// request activates it anew, rather than being sent to stopped buckets
// for ever.
func TestTopicOfAStoppedControllerActivatesAgain(t *testing.T) {
	m := newTestManager(t)
	topic := createTestTopic(t, m, "topic://t/n/phoenix", 1, 1)
	if r := produceOne(t, topic, "k", "before"); r.Code != 0 {
		t.Fatal(r.Err())
	}
	for range maxRestarts + 2 {
		m.system.Root.Send(topic.pid, controllerCrash{})
	}
	if !poll.Until(10*time.Second, func() bool { return !topic.Live() }) {
		t.Fatal("the stopped controller's topic is still live")
	}
	if r := produceOne(t, topic, "k", "after"); r.Code != 0 || r.Offset != 1 {
		t.Fatalf("produce through the old handle: %+v", r)
	}
}

// TestAStoppedHandleSeesLaterLayouts: a handle kept across a forced stop
// of its topic (a consumer group's, across a release after a lapsed lease
// or a move) reads the layout as it is now, and its Changed wakes for
// the changes made since: with the stopped snapshot, a group never saw the
// segments made after the stop and waited for ever.
func TestAStoppedHandleSeesLaterLayouts(t *testing.T) {
	m := newTestManager(t)
	const uri = "topic://t/n/kepthandle"
	old := createTestTopic(t, m, uri, 1, 1)
	changed := old.Changed()
	if !m.stopTopic(old, 0, true) {
		t.Fatal("the topic did not stop")
	}
	select {
	case <-changed:
	default:
		t.Fatal("the stop did not close the old snapshot's Changed")
	}
	if _, err := m.Change(context.Background(), uri, topology.Split(0, nil)); err != nil {
		t.Fatal(err)
	}
	if got := len(old.Layout().Active()); got != 2 {
		t.Fatalf("the old handle sees %d active segments, want the 2 made after the stop", got)
	}
	next := old.Changed()
	if _, err := m.Change(context.Background(), uri, mergeLowest(t, m, uri)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-next:
	case <-time.After(5 * time.Second):
		t.Fatal("the old handle's Changed did not wake at a later change")
	}
}

// TestAnAnswerReadingItsPartitionWhileTheTopicStops answers a produce,
// from its completion, with the partition of its segment (as the
// frontend does) while the topic is being stopped: the stop waits for
// that answer, so reading the partition must not wait for the stop. It
// did (the handle, passivated, looked the topic up again, which waits for
// the stop), and a drain right after a cluster formed stalled every write
// to the topic for the passivation's and the controller's timeouts, 20 s.
func TestAnAnswerReadingItsPartitionWhileTheTopicStops(t *testing.T) {
	m := newTestManager(t)
	const uri = "topic://t/n/answered"
	topic := createTestTopic(t, m, uri, 1, 1)
	inAnswer, proceed, answered := make(chan struct{}), make(chan struct{}), make(chan int, 1)
	topic.Produce([]api.Record{{Key: []byte("k"), Payload: []byte("x")}}, func(res []api.Result) {
		close(inAnswer)
		<-proceed
		answered <- topic.PartitionOf(res[0].Segment)
	})
	<-inAnswer
	stopped := make(chan bool, 1)
	go func() { stopped <- m.stopTopic(topic, 0, true) }()
	deadline := time.Now().Add(10 * time.Second)
	for !topic.state.Load().passivated {
		if time.Now().After(deadline) {
			t.Fatal("the topic was not marked stopped")
		}
		time.Sleep(time.Millisecond)
	}
	close(proceed)
	// The stop's own timeouts are 10 s each: well before them.
	wait := time.After(5 * time.Second)
	select {
	case p := <-answered:
		if p != -1 {
			t.Fatalf("partition %d of a scalable topic's segment, want -1", p)
		}
	case <-wait:
		t.Fatal("the answer waited for the topic's stop, which waits for the answer")
	}
	select {
	case ok := <-stopped:
		if !ok {
			t.Fatal("the topic did not stop")
		}
	case <-wait:
		t.Fatal("the stop did not finish")
	}
}
