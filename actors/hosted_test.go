package actors

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	dto "github.com/prometheus/client_model/go"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/internal/poll"
	"github.com/braidmq/braid/routing"
	"github.com/braidmq/braid/topology"
	"github.com/braidmq/braid/wal"
)

// inProcUnits carries RemoteUnits calls to the Manager of the owner named,
// in this process: the cluster package carries them over protoactor
// remote; what is tested here is what each side does with them.
type inProcUnits struct {
	mu    sync.Mutex
	nodes map[string]*Manager
	// hang holds the owners whose appends are never answered (a node
	// killed: the transport waits for its answer).
	hang map[string]bool
}

func (u *inProcUnits) node(owner string) (*Manager, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	m, ok := u.nodes[owner]
	if !ok {
		return nil, api.Errorf(api.CodeUnavailable, "no node %s", owner)
	}
	return m, nil
}

func (u *inProcUnits) ReadUnit(ctx context.Context, owner string, req UnitRead) (UnitData, error) {
	m, err := u.node(owner)
	if err != nil {
		return UnitData{}, err
	}
	return m.ServeUnitRead(ctx, req)
}

func (u *inProcUnits) AppendUnit(owner string, req UnitAppend, done func(uint64, error)) {
	u.mu.Lock()
	hang := u.hang[owner]
	u.mu.Unlock()
	if hang {
		return
	}
	m, err := u.node(owner)
	if err != nil {
		go done(0, err)
		return
	}
	go func() {
		first, err := m.ServeUnitAppend(context.Background(), req)
		done(first, err)
	}()
}

func (u *inProcUnits) DropTopic(ctx context.Context, owner string, topic routing.TopicName, incarnation string, segments []topology.SegmentID) error {
	m, err := u.node(owner)
	if err != nil {
		return err
	}
	return m.DropTopic(ctx, topic, incarnation, segments)
}

// twoNodes starts a home n1 whose new segments (but the one covering hash
// 0) are placed on n2, and n2, on one metadata store; configure changes
// n1's config.
func twoNodes(t *testing.T, configure func(*Config)) (home, other *Manager, units *inProcUnits) {
	t.Helper()
	units = &inProcUnits{nodes: map[string]*Manager{}}
	home = newTestManagerWith(t, func(c *Config) {
		c.NodeID = "n1"
		c.Owns = func(owner string) bool { return owner == "n1" || owner == "" }
		c.RemoteUnits = units
		c.PlaceSegment = func(string, topology.SegmentID) string { return "n2" }
		if configure != nil {
			configure(c)
		}
	})
	system := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}))
	other = NewManager(Config{DataDir: filepath.Join(t.TempDir(), "topics"), NodeID: "n2", System: system, Meta: home.meta, RemoteUnits: units,
		Owns:   func(owner string) bool { return owner == "n2" },
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err := other.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = other.Close()
		system.Shutdown()
	})
	units.nodes["n1"], units.nodes["n2"] = home, other
	return home, other, units
}

// TestSplitChildOnAnotherNodeKeepsKeyOrder runs the pipelined produce of
// TestPipelinedProduceKeepsKeyOrderAcrossLayoutChanges with every new
// segment but the one covering hash 0 placed on a second node: the home
// routes, seals, holds and hands over as ever, its buckets of those
// segments write to the other node. Nothing may be refused, no key
// reordered.
func TestSplitChildOnAnotherNodeKeepsKeyOrder(t *testing.T) {
	var other *Manager
	testPipelinedProduce(t, nil, func(t *testing.T) *Manager {
		home, o, _ := twoNodes(t, nil)
		other = o
		return home
	})
	if n := other.HostedSegments(time.Minute); n == 0 {
		t.Fatal("the second node was written no segment")
	}
}

// TestSplitPlacesTheHighChildElsewhere: after a split the child covering
// hash 0 stays with the home and the other goes to the node placement
// names, whose disk then holds what is appended to it (and the home's
// does not); reads of it from the home go there.
func TestSplitPlacesTheHighChildElsewhere(t *testing.T) {
	home, other, _ := twoNodes(t, nil)
	const uri = "topic://t/n/placed"
	topic := createTestTopic(t, home, uri, 1, 1)
	desc, err := home.Change(context.Background(), uri, topology.Split(0, nil))
	if err != nil {
		t.Fatal(err)
	}
	var low, high api.SegmentInfo
	for _, s := range desc.Segments {
		if s.State != string(topology.StateActive) {
			continue
		}
		if s.Range[0] == topology.FormatHash(0) {
			low = s
		} else {
			high = s
		}
	}
	if low.Owner != "n1" || high.Owner != "n2" {
		t.Fatalf("owners after the split: low %q, high %q; want n1, n2", low.Owner, high.Owner)
	}
	if LayoutOwner(topic.Layout()) != "n1" {
		t.Fatalf("home %q, want n1", LayoutOwner(topic.Layout()))
	}
	// One record of a key in each child.
	var highKey, lowKey string
	for i := 0; highKey == "" || lowKey == ""; i++ {
		k := "key-" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		if topic.state.Load().table.Lookup(routing.KeyHashString(k)).Segment == high.ID {
			highKey = k
		} else {
			lowKey = k
		}
	}
	for _, k := range []string{highKey, lowKey, highKey} {
		if r := produceOne(t, topic, k, "v-"+k); r.Code != 0 {
			t.Fatalf("produce %s: %v", k, r.Err())
		}
	}
	recs, err := topic.Read(topology.SegmentID(high.ID), 0, 0, 10, 0)
	if err != nil || len(recs) != 2 || string(recs[0].Key) != highKey {
		t.Fatalf("read of the high child from the home: %d records, %v", len(recs), err)
	}
	name, _ := routing.ParseTopic(uri)
	key := UnitKey{Topic: name, Segment: topology.SegmentID(high.ID), Bucket: 0}
	if _, err := os.Stat(filepath.Join(other.store.TopicDir(name), "seg-"+itoa(high.ID))); err != nil {
		t.Fatalf("the other node has no log of %s: %v", key, err)
	}
	if _, err := os.Stat(filepath.Join(home.store.TopicDir(name), "seg-"+itoa(high.ID))); err == nil {
		t.Fatalf("the home has a log of %s too", key)
	}
	st := topic.Stats()
	found := false
	for _, b := range st.Buckets {
		if b.Segment == high.ID {
			found = true
			if b.Owner != "n2" || b.NextOffset != 2 {
				t.Fatalf("stats of the high child: %+v", b)
			}
		}
	}
	if !found {
		t.Fatal("no stats of the high child")
	}
}

func itoa(v uint64) string {
	if v == 0 {
		return "0"
	}
	var b []byte
	for ; v > 0; v /= 10 {
		b = append([]byte{byte('0' + v%10)}, b...)
	}
	return string(b)
}

// TestHomeRelocatesTheSegmentsOfAGoneNode: once placement's node is to
// be evicted (its lease lapsed), the home seals its segments in metadata
// and places successors anew; appends of their keys work again, on the
// home.
func TestHomeRelocatesTheSegmentsOfAGoneNode(t *testing.T) {
	home, units, gone, placeOn := evictingNodes(t)
	const uri = "topic://t/n/lost"
	topic, child, key := splitToN2(t, home, uri)
	high := []topology.SegmentID{child}
	if r := produceOne(t, topic, key, "before"); r.Code != 0 {
		t.Fatal(r.Err())
	}
	// n2 goes: its appends fail until the home has moved its range.
	units.mu.Lock()
	delete(units.nodes, "n2")
	units.mu.Unlock()
	placeOn.Store("n1")
	gone.Store(true)
	var r api.Result
	if !poll.Until(10*time.Second, func() bool {
		r = produceOne(t, topic, key, "after")
		if r.Code == 0 && r.Segment == uint64(high[0]) {
			t.Fatalf("appended to the lost node's segment: %+v", r)
		}
		return r.Code == 0
	}) {
		t.Fatalf("appends of the lost node's range still fail: %v", r.Err())
	}
	l := topic.Layout()
	s, _ := l.Segment(high[0])
	if s.State != topology.StateSealed || len(l.OwnedActive("n2")) != 0 {
		t.Fatalf("the lost node's segment is %s, n2 still owns %v", s.State, l.OwnedActive("n2"))
	}
}

// TestHostFencedWritesNothing: a node whose lease does not hold refuses
// the home's appends without writing them.
func TestHostFencedWritesNothing(t *testing.T) {
	home, other, _ := twoNodes(t, nil)
	var fenced atomic.Bool
	other.cfg.AckFence = func() error {
		if fenced.Load() {
			return api.Errorf(api.CodeUnavailable, "lease ran out")
		}
		return nil
	}
	const uri = "topic://t/n/fencedhost"
	topic, high, key := splitToN2(t, home, uri)
	fenced.Store(true)
	if r := produceOne(t, topic, key, "x"); r.Code != api.CodeUnavailable.Number {
		t.Fatalf("append to a fenced host: %+v", r)
	}
	if _, next, err := topic.Bounds(high, 0); err != nil || next != 0 {
		t.Fatalf("the fenced host wrote: next %d, %v", next, err)
	}
	fenced.Store(false)
	if r := produceOne(t, topic, key, "y"); r.Code != 0 || r.Offset != 0 {
		t.Fatalf("after the fence: %+v", r)
	}
}

// TestHostRefusesALateAppend: an append that reaches the owner after its
// deadline (its home has answered its producers by then) is refused and
// not written; and after the owner's lease lapsed (ReleaseAll), it checks
// the topic's record again before it writes: a segment sealed meanwhile
// takes nothing.
func TestHostRefusesALateAppend(t *testing.T) {
	home, other, _ := twoNodes(t, nil)
	const uri = "topic://t/n/late"
	topic := createTestTopic(t, home, uri, 1, 1)
	if _, err := home.Change(context.Background(), uri, topology.Split(0, nil)); err != nil {
		t.Fatal(err)
	}
	high := topic.Layout().OwnedActive("n2")[0]
	name, _ := routing.ParseTopic(uri)
	req := UnitAppend{Topic: name, Incarnation: topic.incarnation, Segment: high, Bucket: 0,
		Records: []wal.Record{{Key: []byte("k"), Payload: []byte("late")}}, Options: *topic.opts.Load(), Deadline: time.Now().Add(-time.Millisecond)}
	if _, err := other.ServeUnitAppend(context.Background(), req); err == nil || api.AsError(err).Code != api.CodeUnavailable {
		t.Fatalf("late append: %v, want UNAVAILABLE", err)
	}
	req.Deadline = time.Now().Add(time.Minute)
	if first, err := other.ServeUnitAppend(context.Background(), req); err != nil || first != 0 {
		t.Fatalf("append in time: %d, %v", first, err)
	}
	// The home seals the segment (a merge back) while the owner thinks it
	// still holds it; after a lapse it looks again.
	if _, err := home.Change(context.Background(), uri, mergeLowest(t, home, uri)); err != nil {
		t.Fatal(err)
	}
	other.ReleaseAll()
	if _, err := other.ServeUnitAppend(context.Background(), req); err == nil || api.AsError(err).Code != api.CodeSegmentSealed {
		t.Fatalf("append to a sealed segment after a lapse: %v, want SEGMENT_SEALED", err)
	}
	if _, next, err := topic.Bounds(high, 0); err != nil || next != 1 {
		t.Fatalf("the sealed segment holds %d records (%v), want the 1 written in time", next, err)
	}
}

// TestRetentionDropsLogsElsewhere: when retention deletes a sealed segment
// another node owns, that node removes its logs of it; when the topic is
// deleted, that node removes all of them.
func TestRetentionDropsLogsElsewhere(t *testing.T) {
	home, other, _ := twoNodes(t, nil)
	const uri = "topic://t/n/retained"
	topic := createTestTopic(t, home, uri, 1, 1)
	ctx := context.Background()
	if _, err := home.Change(ctx, uri, topology.Split(0, nil)); err != nil {
		t.Fatal(err)
	}
	high := topic.Layout().OwnedActive("n2")[0]
	for i := 0; i < 50; i++ {
		if r := produceOne(t, topic, "k"+itoa(uint64(i)), "v"); r.Code != 0 {
			t.Fatal(r.Err())
		}
	}
	name, _ := routing.ParseTopic(uri)
	segDir := func() string { return filepath.Join(other.store.TopicDir(name), "seg-"+itoa(uint64(high))) }
	if _, err := os.Stat(segDir()); err != nil {
		t.Fatalf("no log of segment %d on n2: %v", high, err)
	}
	if _, err := home.Change(ctx, uri, mergeLowest(t, home, uri)); err != nil {
		t.Fatal(err)
	}
	if _, err := home.Change(ctx, uri, topology.Delete(high)); err != nil {
		t.Fatal(err)
	}
	if !poll.Until(10*time.Second, func() bool {
		_, err := os.Stat(segDir())
		return os.IsNotExist(err)
	}) {
		t.Fatalf("n2 still holds the logs of deleted segment %d", high)
	}
	// A segment the record does not say is deleted is refused.
	if err := other.DropTopic(ctx, name, topic.incarnation, []topology.SegmentID{0}); err == nil {
		t.Fatal("n2 dropped segment 0, which is not deleted")
	}
	topicDir := other.store.TopicDir(name)
	if err := home.DeleteTopic(ctx, uri); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(topicDir); !os.IsNotExist(err) {
		t.Fatalf("n2 still holds the deleted topic's logs: %v", err)
	}
	if _, err := os.Stat(other.store.NameDir(name)); !os.IsNotExist(err) {
		t.Fatalf("n2 still holds the deleted topic's directory: %v", err)
	}
}

// TestHostedLogsOfATopicDeletedMeanwhileGoAtStart: a node that was down
// when a topic it held segments of was deleted finds, at its next start,
// their directory without a record: marked as held for another node, it
// is removed, not a reason to refuse the start.
func TestHostedLogsOfATopicDeletedMeanwhileGoAtStart(t *testing.T) {
	home, other, units := twoNodes(t, nil)
	const uri = "topic://t/n/gonewhiledown"
	topic := createTestTopic(t, home, uri, 1, 1)
	ctx := context.Background()
	if _, err := home.Change(ctx, uri, topology.Split(0, nil)); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		if r := produceOne(t, topic, "k"+itoa(uint64(i)), "v"); r.Code != 0 {
			t.Fatal(r.Err())
		}
	}
	name, _ := routing.ParseTopic(uri)
	nameDir := other.store.NameDir(name)
	// n2 is down: the delete cannot tell it.
	units.mu.Lock()
	delete(units.nodes, "n2")
	units.mu.Unlock()
	if err := home.DeleteTopic(ctx, uri); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(nameDir); err != nil {
		t.Fatalf("n2's logs should still be there: %v", err)
	}
	_ = other.Close()
	system := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}))
	defer system.Shutdown()
	again := NewManager(Config{DataDir: other.cfg.DataDir, NodeID: "n2", System: system, Meta: home.meta, RemoteUnits: units,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	defer again.Close()
	if err := again.Recover(ctx); err != nil {
		t.Fatalf("restart of n2: %v", err)
	}
	if _, err := os.Stat(nameDir); !os.IsNotExist(err) {
		t.Fatalf("n2 kept the deleted topic's logs: %v", err)
	}
}

// TestHomeAbandonsAppendsToAGoneNode: appends sent to a node that then
// died are not waited for once its lease lapsed: they are answered
// UNAVAILABLE and the range moves at once (the transport would wait for
// their answer for seconds; here it never answers).
func TestHomeAbandonsAppendsToAGoneNode(t *testing.T) {
	home, units, gone, placeOn := evictingNodes(t)
	const uri = "topic://t/n/hung"
	topic, high, key := splitToN2(t, home, uri)
	units.mu.Lock()
	units.hang = map[string]bool{"n2": true}
	units.mu.Unlock()
	stuck := make(chan api.Result, 1)
	topic.Produce([]api.Record{{Key: []byte(key), Payload: []byte("stuck")}}, func(r []api.Result) { stuck <- r[0] })
	placeOn.Store("n1")
	gone.Store(true)
	select {
	case r := <-stuck:
		if r.Code != api.CodeUnavailable.Number {
			t.Fatalf("the append sent to the gone node: %+v, want UNAVAILABLE", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the append sent to the gone node is still waited for")
	}
	// Until the move commits, appends of the range are refused too (the
	// owner is gone); then they land in the successor.
	var r api.Result
	if !poll.Until(5*time.Second, func() bool {
		r = produceOne(t, topic, key, "after")
		if r.Code == 0 {
			if r.Segment == uint64(high) {
				t.Fatalf("appended to the gone node's segment: %+v", r)
			}
			return true
		}
		if r.Code != api.CodeUnavailable.Number {
			t.Fatalf("after the move: %+v", r)
		}
		return false
	}) {
		t.Fatalf("after the move: %+v", r)
	}
}

// TestHomeWritesAgainWhenAMoveFails: a node taken for gone whose segments
// could not be moved (here the change is refused: no valid node to place
// them on) is written to again, not refused for ever, once it is back.
func TestHomeWritesAgainWhenAMoveFails(t *testing.T) {
	home, _, gone, placeOn := evictingNodes(t)
	const uri = "topic://t/n/back"
	topic, high, key := splitToN2(t, home, uri)
	placeOn.Store("not a node id!")
	gone.Store(true)
	// The move is tried and refused (its buckets refuse appends while it
	// is tried).
	failures := func() float64 {
		var m dto.Metric
		if err := home.m.relocateFailures.Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetCounter().GetValue()
	}
	if !poll.Until(5*time.Second, func() bool { return failures() != 0 }) {
		t.Fatal("no move of the gone node's segments tried")
	}
	gone.Store(false)
	var r api.Result
	if !poll.Until(5*time.Second, func() bool {
		r = produceOne(t, topic, key, "y")
		if r.Code == 0 && r.Segment != uint64(high) {
			t.Fatalf("landed in %d, want %d (nothing moved)", r.Segment, high)
		}
		return r.Code == 0
	}) {
		t.Fatalf("appends to the node that is back still refused: %v", r.Err())
	}
}

// splitToN2 creates topic uri of one segment and one bucket on home and
// splits it: the high child goes to n2 (placement). It returns the topic,
// the child and a key of the child's range.
func splitToN2(t *testing.T, home *Manager, uri string) (*Topic, topology.SegmentID, string) {
	t.Helper()
	topic := createTestTopic(t, home, uri, 1, 1)
	high, key := splitOffN2(t, home, topic)
	return topic, high, key
}

// splitOffN2 splits segment 0 of topic and returns its child on n2 and a
// key of that child's range.
func splitOffN2(t *testing.T, home *Manager, topic *Topic) (topology.SegmentID, string) {
	t.Helper()
	if _, err := home.Change(context.Background(), topic.uri, topology.Split(0, nil)); err != nil {
		t.Fatal(err)
	}
	owned := topic.Layout().OwnedActive("n2")
	if len(owned) != 1 {
		t.Fatalf("n2 owns %v after the split", owned)
	}
	for i := 0; ; i++ {
		k := "k" + itoa(uint64(i))
		if topic.state.Load().table.Lookup(routing.KeyHashString(k)).Segment == uint64(owned[0]) {
			return owned[0], k
		}
	}
}

// evictingNodes is twoNodes where placement names the node placeOn holds
// (at first n2), and n2 is gone (to be evicted) once gone is set.
func evictingNodes(t *testing.T) (*Manager, *inProcUnits, *atomic.Bool, *atomic.Value) {
	t.Helper()
	gone, placeOn := new(atomic.Bool), new(atomic.Value)
	placeOn.Store("n2")
	home, _, units := twoNodes(t, func(c *Config) {
		c.Evict = func(node string) (bool, bool) { g := node == "n2" && gone.Load(); return g, g }
		c.PlaceSegment = func(string, topology.SegmentID) string { return placeOn.Load().(string) }
	})
	return home, units, gone, placeOn
}

// TestASegmentSealedElsewhereBeforeAnyWriteReadsEmpty: a child placed on
// n2 and split again before any record reached it is sealed with nothing
// written; n2 must still hold its (empty) logs, so that reads of it, which
// a subscription makes before it reads the grandchildren, answer empty
// rather than taking n2's data directory for lost.
func TestASegmentSealedElsewhereBeforeAnyWriteReadsEmpty(t *testing.T) {
	home, _, _ := twoNodes(t, nil)
	topic, child, _ := splitToN2(t, home, "topic://t/n/unwritten")
	if _, err := home.Change(context.Background(), topic.uri, topology.Split(child, nil)); err != nil {
		t.Fatal(err)
	}
	s, ok := topic.Layout().Segment(child)
	if !ok || s.State != topology.StateSealed || s.Owner != "n2" {
		t.Fatalf("segment %d after its split: %+v", child, s)
	}
	for b := range s.Buckets {
		recs, err := topic.Read(child, b, 0, 10, 0)
		if err != nil || len(recs) != 0 {
			t.Fatalf("read of bucket %d of the unwritten sealed segment %d: %d records, %v", b, child, len(recs), err)
		}
	}
}

// TestASegmentMovedOffALiveNodeBeforeAnyWriteReadsEmpty: a child on n2
// that nothing reached, moved off n2 while n2 lives (a drain), is sealed
// there; n2 keeps serving it, so it must hold its (empty) logs.
func TestASegmentMovedOffALiveNodeBeforeAnyWriteReadsEmpty(t *testing.T) {
	home, _, _ := twoNodes(t, nil)
	topic, child, _ := splitToN2(t, home, "topic://t/n/drained")
	if _, err := home.Change(context.Background(), topic.uri, topology.Relocate([]topology.SegmentID{child}, "n1")); err != nil {
		t.Fatal(err)
	}
	s, ok := topic.Layout().Segment(child)
	if !ok || s.State != topology.StateSealed || s.Owner != "n2" {
		t.Fatalf("segment %d after its move: %+v", child, s)
	}
	for b := range s.Buckets {
		recs, err := topic.Read(child, b, 0, 10, 0)
		if err != nil || len(recs) != 0 {
			t.Fatalf("read of bucket %d of the unwritten moved segment %d: %d records, %v", b, child, len(recs), err)
		}
	}
}
