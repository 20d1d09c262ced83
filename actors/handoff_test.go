package actors

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/internal/poll"
	"github.com/braidmq/braid/topology"
)

// TestPipelinedProduceKeepsKeyOrderAcrossLayoutChanges produces keyed
// records one per request, many of a key in flight at once and no epoch
// named, as a plain NATS client pipelining requests does (one caller, as
// the produce endpoint's handler), while the topic is split, merged and
// rebucketed over and over. Nothing may be refused, and each key's records
// must sit in the order they were sent: in one unit at growing offsets, or
// in a descendant of the segment of the record before (which an ordered
// reader drains first). Without the server-side handover the seals refuse
// records with SEGMENT_SEALED; with forwarding but no gate on the
// successors, a forwarded record lands behind a later one of its key.
func TestPipelinedProduceKeepsKeyOrderAcrossLayoutChanges(t *testing.T) {
	testPipelinedProduce(t, nil, newTestManager)
}

// TestKeyOrderWhenNewBucketsStartLate: the same, with the buckets of new
// segments starting only after their layout change is done (as a busy
// scheduler can leave them): a bucket that read its gate when it started,
// rather than when it was made, took the appends routed to it directly
// ahead of the ones its predecessors handed over.
func TestKeyOrderWhenNewBucketsStartLate(t *testing.T) {
	testPipelinedProduce(t, func(k UnitKey) {
		if k.Segment > 1 {
			time.Sleep(5 * time.Millisecond) // the late start: part of the workload, not a wait
		}
	}, newTestManager)
}

func testPipelinedProduce(t *testing.T, starting func(UnitKey), newManager func(*testing.T) *Manager) {
	if starting != nil {
		bucketStarting.Store(&starting)
		defer bucketStarting.Store(nil)
	}
	m := newManager(t)
	const uri = "topic://t/n/pipelined"
	topic := createTestTopic(t, m, uri, 2, 2)
	const (
		keys     = 64
		window   = 2000
		minSends = 20_000
		changes  = 24
	)
	type sent struct {
		key int
		res api.Result
	}
	var (
		mu      sync.Mutex
		results []sent
	)
	slots := make(chan struct{}, window)
	stop := make(chan struct{})
	produced := make(chan int)
	go func() {
		i := 0
		for ; ; i++ {
			select {
			case <-stop:
				if i >= minSends {
					produced <- i
					return
				}
			default:
			}
			slots <- struct{}{}
			k := i % keys
			mu.Lock()
			results = append(results, sent{key: k})
			mu.Unlock()
			idx := i
			topic.Produce([]api.Record{{Key: []byte(fmt.Sprintf("key-%d", k)), Payload: []byte(fmt.Sprint(idx))}}, func(r []api.Result) {
				mu.Lock()
				results[idx].res = r[0]
				mu.Unlock()
				<-slots
			})
		}
	}()

	ctx := context.Background()
	for c := 0; c < changes; c++ {
		// Let some appends through at each layout.
		waitAppended(t, topic, uint64(c+1)*200, math.MaxUint64)
		l := topic.Layout()
		act := l.Active()
		var op topology.Op
		switch {
		case c%3 == 2:
			s := act[c%len(act)]
			op = topology.Rebucket(s.ID, 1+s.Buckets%3)
		case len(act) < 5:
			op = topology.Split(act[c%len(act)].ID, nil)
		default:
			op = topology.Merge(act[0].ID, act[1].ID)
		}
		if _, err := m.Change(ctx, uri, op); err != nil {
			t.Fatalf("change %d (%s): %v", c, op, err)
		}
	}
	close(stop)
	n := <-produced
	if !poll.Until(30*time.Second, func() bool { return len(slots) == 0 }) {
		t.Fatalf("%d produce calls never answered", len(slots))
	}

	final := topic.Layout()
	mu.Lock()
	defer mu.Unlock()
	last := map[int]api.Result{}
	refused, reordered := 0, 0
	for i := 0; i < n; i++ {
		r := results[i]
		if r.res.Code != 0 {
			refused++
			if refused <= 3 {
				t.Errorf("record %d: %v", i, r.res.Err())
			}
			continue
		}
		if prev, ok := last[r.key]; ok && !follows(final, prev, r.res) {
			reordered++
			if reordered <= 3 {
				t.Errorf("record %d of key %d at %d/%d/%d, after %d/%d/%d", i, r.key,
					r.res.Segment, r.res.Bucket, r.res.Offset, prev.Segment, prev.Bucket, prev.Offset)
			}
		}
		last[r.key] = r.res
	}
	if refused > 0 || reordered > 0 {
		t.Fatalf("%d records: %d refused, %d out of key order (over %d layout changes)", n, refused, reordered, changes)
	}
	t.Logf("%d records over %d layout changes, %d segments in the DAG", n, changes, len(final.Segments))
}

// follows reports whether b may come after a in an ordered read: the same
// unit at a later offset, or a segment that descends from a's.
func follows(l topology.Layout, a, b api.Result) bool {
	if a.Segment == b.Segment {
		return a.Bucket == b.Bucket && b.Offset > a.Offset
	}
	return l.IsDescendant(topology.SegmentID(b.Segment), topology.SegmentID(a.Segment))
}

// waitAppended waits until the topic's active buckets hold at least n
// records more than they did when it was called, or limit in all (what
// the producer sends at most: it may be done before the waiter starts).
func waitAppended(t *testing.T, topic *Topic, n, limit uint64) {
	t.Helper()
	count := func() uint64 {
		var sum uint64
		for _, s := range topic.Layout().Active() {
			for b := range s.Buckets {
				first, next, err := topic.Bounds(s.ID, b)
				if err == nil {
					sum += next - first
				}
			}
		}
		return sum
	}
	start := count()
	if !poll.Until(10*time.Second, func() bool { return count() >= min(start+n, limit) }) {
		t.Fatalf("fewer than %d records appended in 10s", n)
	}
}

// TestLaneKeepsOrderAcrossRestarts produces one key as fast as it can
// while its bucket is crashed again and again: a restart closes the
// bucket's lane, appends then queue in its mailbox, and the lane opens
// again only once they are through, so every append that succeeds sits
// after every earlier one that succeeded.
func TestLaneKeepsOrderAcrossRestarts(t *testing.T) {
	// A slow start, so that appends queue in the mailbox meanwhile: part
	// of the workload, not a wait.
	slow := func(UnitKey) { time.Sleep(2 * time.Millisecond) }
	bucketStarting.Store(&slow)
	defer bucketStarting.Store(nil)
	m := newTestManager(t)
	const uri = "topic://t/n/lane"
	topic := createTestTopic(t, m, uri, 1, 1)
	const n, window = 20_000, 20_000 // open loop: appends keep coming while the mailbox drains
	results := make([]api.Result, n)
	var wg sync.WaitGroup
	slots := make(chan struct{}, window)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range n {
			slots <- struct{}{}
			wg.Add(1)
			topic.Produce([]api.Record{{Key: []byte("k"), Payload: []byte(fmt.Sprint(i))}}, func(r []api.Result) {
				results[i] = r[0]
				<-slots
				wg.Done()
			})
		}
	}()
	for range 5 {
		waitAppended(t, topic, 1000, n)
		if err := m.CrashBucket(uri, 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	<-done
	wg.Wait()
	var last uint64
	seen, failed := false, 0
	for i, r := range results {
		if r.Code != 0 {
			if r.Code != api.CodeUnavailable.Number {
				t.Fatalf("record %d: %v", i, r.Err())
			}
			failed++
			continue
		}
		if seen && r.Offset <= last {
			t.Fatalf("record %d at offset %d, after an earlier one at %d", i, r.Offset, last)
		}
		last, seen = r.Offset, true
	}
	t.Logf("%d records, %d failed by the restarts", n, failed)
}
