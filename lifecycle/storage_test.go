package lifecycle

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/braidmq/braid/actors"
	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/clock"
	"github.com/braidmq/braid/internal/poll"
	"github.com/braidmq/braid/topology"
	"github.com/braidmq/braid/wal"
	dto "github.com/prometheus/client_model/go"
)

// storageTopic creates a topic of one segment and one bucket with the
// storage policies js on a node whose storage worker ticks every 10 ms.
func storageTopic(t *testing.T, uri, js string) (*Lifecycle, *actors.Topic) {
	t.Helper()
	l := newTestLifecycle(t, func(_ *actors.Config, c *Config) { c.StorageTick = 10 * time.Millisecond })
	var p api.Policies
	if err := json.Unmarshal([]byte(js), &p); err != nil {
		t.Fatal(err)
	}
	if _, err := l.topics.CreateTopic(context.Background(), api.TopicCreateRequest{Topic: uri, Segments: 1, Buckets: 1, Policies: &p}); err != nil {
		t.Fatal(err)
	}
	topic, err := l.topics.Topic(uri)
	if err != nil {
		t.Fatal(err)
	}
	return l, topic
}

// produceFor produces 1 KiB records for d and returns how many.
func produceFor(t *testing.T, topic *actors.Topic, d time.Duration) int {
	t.Helper()
	n := 0
	for end := time.Now().Add(d); time.Now().Before(end); n++ {
		done := make(chan api.Result, 1)
		topic.Produce([]api.Record{{Key: []byte("k"), Payload: make([]byte, 1024)}}, func(r []api.Result) { done <- r[0] })
		if r := <-done; r.Code != 0 {
			t.Fatal(r.Err())
		}
	}
	return n
}

// TestStorageWorkerRetainsByTime: with a retention of 300 ms and files
// rolling every 50 ms, a log written steadily keeps a bounded number of
// bytes on disk, its first offset moves on, and what is left reads.
func TestStorageWorkerRetainsByTime(t *testing.T) {
	lc, topic := storageTopic(t, "topic://t/n/retained", `{"retention":"300ms","segment_ms":50,"segment_bytes":16777216}`)
	n := produceFor(t, topic, 1500*time.Millisecond)
	l := unitLog(t, topic, 0, 0)
	// The newest record is well within retention (everything expires in
	// the end: production stopped).
	if recs, err := topic.Read(0, 0, uint64(n)-1, 1, 0); err != nil || len(recs) != 1 {
		t.Fatalf("reading the newest record: %d records, %v", len(recs), err)
	}
	// Once the worker has seen the last files expire, at most a
	// retention's worth (plus a file and a tick) is left.
	if !poll.Until(5*time.Second, func() bool { return l.FirstOffset() >= uint64(n)/2 }) {
		t.Fatalf("first offset %d after %d records over 1.5 s with a retention of 300 ms", l.FirstOffset(), n)
	}
	if l.SizeBytes() > int64(n)*1100/2 {
		t.Fatalf("%d bytes on disk for %d records of 1 KiB, retention 300 ms of 1.5 s", l.SizeBytes(), n)
	}
	if l.NextOffset() != uint64(n) {
		t.Fatalf("next offset %d, want %d", l.NextOffset(), n)
	}
	if _, err := topic.Read(0, 0, 0, 10, 0); err == nil {
		t.Fatal("a read below the first offset found records")
	}
	if v := counterValue(t, lc.m.storageRolled); v == 0 {
		t.Fatal("no roll by age counted")
	}
	if v := counterValue(t, lc.m.storageRemovedFiles); v == 0 {
		t.Fatal("no removal counted")
	}
}

// TestStorageWorkerRetainsByBytes: with retention forever and
// retention_bytes of 64 KiB, the topic keeps at most that plus its open
// file; the open file is never removed.
func TestStorageWorkerRetainsByBytes(t *testing.T) {
	_, topic := storageTopic(t, "topic://t/n/bounded", `{"retention":"-1s","segment_ms":-1,"segment_bytes":16384,"retention_bytes":65536}`)
	n := produceFor(t, topic, 500*time.Millisecond)
	l := unitLog(t, topic, 0, 0)
	if !poll.Until(5*time.Second, func() bool { return l.SizeBytes() <= 65536+2*16384+70000 }) {
		t.Fatalf("%d bytes on disk after %d records, retention_bytes 64 KiB", l.SizeBytes(), n)
	}
	if l.NextOffset() != uint64(n) || l.FirstOffset() == 0 {
		t.Fatalf("offsets [%d, %d) after %d records", l.FirstOffset(), l.NextOffset(), n)
	}
	if recs, err := topic.Read(topology.SegmentID(0), 0, uint64(n)-1, 1, 0); err != nil || len(recs) != 1 {
		t.Fatalf("the newest record: %d, %v", len(recs), err)
	}
}

// TestRollPolicyAdoptsASingleFileLogInPlace: a log made with no roll
// policy (segment_bytes and segment_ms -1: one file that never rolls, the
// legacy layout) that is given one rolls at its next use: its file stays
// as it is — the same inode, not rewritten (this process writes a few KiB,
// not the file's size) — and becomes its first closed file; new records
// go to new files, and no offset changes.
func TestRollPolicyAdoptsASingleFileLogInPlace(t *testing.T) {
	// No preallocation (durability none): the zeros a new file is extended
	// by would count among what the process writes.
	lc, topic := storageTopic(t, "topic://t/n/legacy", `{"segment_bytes":-1,"segment_ms":-1,"retention":"-1s","durability":"none"}`)
	for i := 0; i < 600; i++ {
		if r := produceOne(t, topic, "k", string(make([]byte, 1024))); r.Code != 0 {
			t.Fatal(r.Err())
		}
	}
	l := unitLog(t, topic, 0, 0)
	if files, _ := l.ClosedFiles(); len(files) != 0 {
		t.Fatalf("a log with no roll policy rolled: %+v", files)
	}
	entries, err := os.ReadDir(l.Dir())
	if err != nil || len(entries) != 1 {
		t.Fatalf("the log's files: %v, %v", entries, err)
	}
	path := filepath.Join(l.Dir(), entries[0].Name())
	inode := func() uint64 {
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		return st.Sys().(*syscall.Stat_t).Ino
	}
	before := inode()
	written := procWrittenBytes(t)
	if _, err := lc.topics.TopicPolicies(context.Background(), api.TopicPoliciesRequest{Topic: topic.Topic(),
		Policies: &api.Policies{SegmentBytes: ptr(int64(64 << 10)), SegmentMs: ptr(int64(50))}}); err != nil {
		t.Fatal(err)
	}
	if r := produceOne(t, topic, "k", "after"); r.Code != 0 || r.Offset != 600 {
		t.Fatalf("produce after the policy: %+v", r)
	}
	var files []wal.FileInfo
	if !poll.Until(5*time.Second, func() bool { files, _ = l.ClosedFiles(); return len(files) > 0 }) {
		t.Fatal("the legacy file was not rolled")
	}
	if files[0].First != 0 || files[0].Next < 600 {
		t.Fatalf("the adopted file: %+v", files[0])
	}
	if got := procWrittenBytes(t) - written; got > 256<<10 {
		t.Fatalf("adopting a %d KiB file wrote %d KiB: it was copied", 600, got>>10)
	}
	if inode() != before {
		t.Fatal("the adopted file is another file (a new inode)")
	}
	recs, err := topic.Read(0, 0, 0, 1, 0)
	if err != nil || len(recs) != 1 || len(recs[0].Payload) != 1024 {
		t.Fatalf("offset 0 after the adoption: %v, %v", recs, err)
	}
	if recs, err := topic.Read(0, 0, 600, 1, 0); err != nil || len(recs) != 1 || string(recs[0].Payload) != "after" {
		t.Fatalf("offset 600 after the adoption: %v, %v", recs, err)
	}
}

// procWrittenBytes is what this process has written with write calls
// (wchar of /proc/self/io).
func procWrittenBytes(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		t.Skipf("no /proc/self/io: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "wchar: "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Skip("no wchar in /proc/self/io")
	return 0
}

// TestAdoptedFileIsTrimmedProgressively: a legacy single file given a
// roll policy and a retention is rolled, then gives back its records in
// place as they expire, a step at a time (the file stays, its first offset
// moves on), before all of it has expired; in the end it goes.
func TestAdoptedFileIsTrimmedProgressively(t *testing.T) {
	lc, topic := storageTopic(t, "topic://t/n/legacy-trim", `{"segment_bytes":-1,"segment_ms":-1,"retention":"-1s","durability":"none"}`)
	// 400 records of 1 KiB whose times spread over the last 800 ms, 40 ms
	// apart every 20 records (stamped by their producer).
	start := time.Now().Add(-800 * time.Millisecond)
	for i := 0; i < 400; i++ {
		done := make(chan api.Result, 1)
		ts := start.Add(time.Duration(i/20) * 40 * time.Millisecond).UnixMilli()
		topic.Produce([]api.Record{{Key: []byte("k"), Payload: make([]byte, 1024), Time: ts}}, func(r []api.Result) { done <- r[0] })
		if r := <-done; r.Code != 0 {
			t.Fatal(r.Err())
		}
	}
	l := unitLog(t, topic, 0, 0)
	entries, err := os.ReadDir(l.Dir())
	if err != nil || len(entries) != 1 {
		t.Fatalf("the log's files: %v, %v", entries, err)
	}
	path := filepath.Join(l.Dir(), entries[0].Name())
	if _, err := lc.topics.TopicPolicies(context.Background(), api.TopicPoliciesRequest{Topic: topic.Topic(),
		Policies: &api.Policies{SegmentBytes: ptr(int64(64 << 10)), SegmentMs: ptr(int64(50)), Retention: ptr("600ms")}}); err != nil {
		t.Fatal(err)
	}
	if r := produceOne(t, topic, "k", "after"); r.Code != 0 || r.Offset != 400 {
		t.Fatalf("produce after the policy: %+v", r)
	}
	partly := false // seen: the file still there, its head trimmed
	trimmedAway := poll.Until(10*time.Second, func() bool {
		first := l.FirstOffset()
		if first >= 400 {
			return true
		}
		if first > 0 {
			if _, err := os.Stat(path); err == nil {
				partly = true
				if _, err := topic.Read(0, 0, first-1, 1, 0); err == nil {
					t.Fatalf("offset %d, below the trimmed head at %d, still reads", first-1, first)
				}
			}
		}
		return false
	})
	if !trimmedAway {
		t.Fatalf("first offset %d: the adopted file was not trimmed away", l.FirstOffset())
	}
	if !partly || counterValue(t, lc.m.storageHeadTrims) == 0 {
		t.Fatalf("the adopted file went whole: trimmed in part seen %v, %v head trims", partly, counterValue(t, lc.m.storageHeadTrims))
	}
	if l.NextOffset() != 401 {
		t.Fatalf("next offset %d, want 401", l.NextOffset())
	}
}

// TestAdoptedFileIsTrimmedToRetentionBytes: a legacy single file over
// retention_bytes gives back its head in place down to about the bound,
// rather than going whole.
func TestAdoptedFileIsTrimmedToRetentionBytes(t *testing.T) {
	lc, topic := storageTopic(t, "topic://t/n/legacy-bytes", `{"segment_bytes":-1,"segment_ms":-1,"retention":"-1s","durability":"none"}`)
	for i := 0; i < 400; i++ {
		if r := produceOne(t, topic, "k", string(make([]byte, 1024))); r.Code != 0 {
			t.Fatal(r.Err())
		}
	}
	l := unitLog(t, topic, 0, 0)
	if _, err := lc.topics.TopicPolicies(context.Background(), api.TopicPoliciesRequest{Topic: topic.Topic(),
		Policies: &api.Policies{SegmentBytes: ptr(int64(64 << 10)), SegmentMs: ptr(int64(50)), RetentionBytes: ptr(int64(200 << 10))}}); err != nil {
		t.Fatal(err)
	}
	if r := produceOne(t, topic, "k", "after"); r.Code != 0 {
		t.Fatalf("produce after the policy: %+v", r)
	}
	if !poll.Until(10*time.Second, func() bool { return l.SizeBytes() <= 200<<10+8<<10 }) {
		t.Fatalf("%d bytes on disk, first offset %d, with retention_bytes 200 KiB", l.SizeBytes(), l.FirstOffset())
	}
	// About half of the file is left, in the same file.
	if first := l.FirstOffset(); first < 150 || first > 260 {
		t.Fatalf("first offset %d for 200 KiB kept of 400 KiB", first)
	}
	if files, err := l.ClosedFiles(); err != nil || len(files) == 0 || files[0].First != l.FirstOffset() || files[0].Next < 400 {
		t.Fatalf("the adopted file: %+v, %v", files, err)
	}
}

// TestStorageWorkerTrimsSealedSegments: the logs of a sealed segment that
// no one has open are visited too: records past retention go (the last
// file rolled first: no more appends come), while the segment itself
// stays until the scaler's rule deletes it.
func TestStorageWorkerTrimsSealedSegments(t *testing.T) {
	lc, topic := storageTopic(t, "topic://t/n/sealed-trim", `{"retention":"1h","segment_ms":60000}`)
	old := time.Now().Add(-2 * time.Hour).UnixMilli()
	recs := make([]api.Record, 100)
	for i := range recs {
		recs[i] = api.Record{Key: []byte(fmt.Sprint("k", i)), Payload: []byte("old"), Time: old}
	}
	done := make(chan []api.Result, 1)
	topic.Produce(recs, func(r []api.Result) { done <- r })
	for _, r := range <-done {
		if r.Code != 0 {
			t.Fatal(r.Err())
		}
	}
	if _, err := lc.topics.Change(context.Background(), topic.Topic(), topology.Split(0, nil)); err != nil {
		t.Fatal(err)
	}
	lc.store.CloseSegment(topic.Name(), 0)
	// Nobody opens it: the worker does.
	poll.Eventually(t, 10*time.Second, "a file of the sealed segment removed", func() bool { return counterValue(t, lc.m.storageRemovedFiles) > 0 })
	l := unitLog(t, topic, 0, 0)
	if l.FirstOffset() != 100 || l.NextOffset() != 100 {
		t.Fatalf("the sealed segment's log holds [%d, %d), want nothing at 100", l.FirstOffset(), l.NextOffset())
	}
	if s, ok := topic.Layout().Segment(0); !ok || s.State != topology.StateSealed {
		t.Fatalf("the sealed segment: %+v", s)
	}
}

// TestNamespaceStorageTick: a namespace's storage_tick makes the worker
// visit its topics that often, though the broker's tick is an hour; a
// topic cannot set it.
func TestNamespaceStorageTick(t *testing.T) {
	lc := newTestLifecycle(t, func(_ *actors.Config, c *Config) { c.StorageTick = time.Hour })
	m := lc.topics
	ctx := context.Background()
	if _, err := m.NamespacePolicies(ctx, api.NamespacePoliciesRequest{Namespace: "t/n", Policies: &api.Policies{StorageTick: ptr("0s")}}); err == nil || api.AsError(err).Code != api.CodeInvalidPolicy {
		t.Fatalf("a storage_tick of 0: %v", err)
	}
	if _, err := m.NamespacePolicies(ctx, api.NamespacePoliciesRequest{Namespace: "t/n", Policies: &api.Policies{StorageTick: ptr("10ms")}}); err != nil {
		t.Fatal(err)
	}
	var p api.Policies
	if err := json.Unmarshal([]byte(`{"retention":"300ms","segment_ms":50}`), &p); err != nil {
		t.Fatal(err)
	}
	bad := p
	bad.StorageTick = ptr("10ms")
	if _, err := m.CreateTopic(ctx, api.TopicCreateRequest{Topic: "topic://t/n/refused", Segments: 1, Buckets: 1, Policies: &bad}); err == nil || api.AsError(err).Code != api.CodeInvalidPolicy {
		t.Fatalf("a topic's storage_tick: %v", err)
	}
	if _, err := m.CreateTopic(ctx, api.TopicCreateRequest{Topic: "topic://t/n/ticked", Segments: 1, Buckets: 1, Policies: &p}); err != nil {
		t.Fatal(err)
	}
	topic, err := m.Topic("topic://t/n/ticked")
	if err != nil {
		t.Fatal(err)
	}
	if eff := topic.Describe().EffectivePolicies; eff.StorageTick == nil || *eff.StorageTick != "10ms" {
		t.Fatalf("effective storage_tick: %v", eff.StorageTick)
	}
	produceFor(t, topic, time.Second)
	passes := func() uint64 {
		var d dto.Metric
		if err := lc.m.storageTickSeconds.Write(&d); err != nil {
			t.Fatal(err)
		}
		return d.GetHistogram().GetSampleCount()
	}
	if !poll.Until(5*time.Second, func() bool { return counterValue(t, lc.m.storageRemovedFiles) > 0 && passes() >= 20 }) {
		t.Fatalf("%d passes, %v files removed: the namespace's tick was not kept", passes(), counterValue(t, lc.m.storageRemovedFiles))
	}
}

// TestStorageWorkerByInjectedClock: the worker's pass takes the time it
// runs at: a day and an hour on, the defaults roll the open file
// (segment_ms 24 h) and keep it (retention 168 h); eight days on, every
// record has expired: the open file rolls and both closed files go, and
// the log goes on from where it was.
func TestStorageWorkerByInjectedClock(t *testing.T) {
	lc := newTestLifecycle(t, nil) // no worker of its own: the test runs the passes
	topic := createTestTopic(t, lc, "topic://t/n/clocked", 1, 1)
	for i := 0; i < 10; i++ {
		if r := produceOne(t, topic, "k", "v"); r.Code != 0 {
			t.Fatal(r.Err())
		}
	}
	l := unitLog(t, topic, 0, 0)
	w := &storageWorker{l: lc, tick: time.Hour, segmentBytes: map[*wal.Log]int64{}}
	now := time.Now()
	w.run(now.Add(23 * time.Hour))
	if files, _ := l.ClosedFiles(); len(files) != 0 {
		t.Fatalf("rolled before segment_ms: %+v", files)
	}
	w.run(now.Add(25 * time.Hour))
	files, _ := l.ClosedFiles()
	if len(files) != 1 || files[0].First != 0 || files[0].Next != 10 {
		t.Fatalf("after a day and an hour: closed files %+v", files)
	}
	if r := produceOne(t, topic, "k", "new"); r.Code != 0 || r.Offset != 10 {
		t.Fatalf("produce after the roll: %+v", r)
	}
	w.run(now.Add(100 * time.Hour))
	if l.FirstOffset() != 0 {
		t.Fatalf("removed before retention: first offset %d", l.FirstOffset())
	}
	w.run(now.Add(8 * 24 * time.Hour))
	if l.FirstOffset() != 11 || l.NextOffset() != 11 {
		t.Fatalf("eight days on: offsets [%d, %d), want [11, 11)", l.FirstOffset(), l.NextOffset())
	}
	if st := topic.Stats().Storage; st.FilesRolled != 2 || st.FilesRemoved != 2 {
		t.Fatalf("the worker's counts: %+v", st)
	}
}

// A closed file whose last record carries an old time (a producer's) is
// kept until its newest record is past retention: rolled in this process,
// and again after the topic was passivated and its logs reopened (the
// worker then reads the file through before removing it). Retention
// removed such a file with records written a minute before.
func TestRetentionGoesByTheNewestRecordNotTheLast(t *testing.T) {
	lc := newTestLifecycle(t, nil) // no worker of its own: the test runs the passes
	const uri = "topic://t/n/backfilled"
	topic := createTestTopic(t, lc, uri, 1, 1)
	now := time.Now()
	produce := func(topic *actors.Topic, ts int64) {
		t.Helper()
		done := make(chan api.Result, 1)
		topic.Produce([]api.Record{{Key: []byte("k"), Payload: []byte("v"), Time: ts}}, func(r []api.Result) { done <- r[0] })
		if r := <-done; r.Code != 0 {
			t.Fatal(r.Err())
		}
	}
	for range 10 {
		produce(topic, 0)
	}
	produce(topic, now.Add(-30*24*time.Hour).UnixMilli()) // a month old, last
	w := &storageWorker{l: lc, tick: time.Hour, segmentBytes: map[*wal.Log]int64{}}
	w.run(now.Add(25 * time.Hour)) // rolls (segment_ms: a day)
	l := unitLog(t, topic, 0, 0)
	if files, _ := l.ClosedFiles(); len(files) != 1 || files[0].Next != 11 {
		t.Fatalf("closed files %+v, want one of 11 records", files)
	}
	w.run(now.Add(26 * time.Hour))
	if l.FirstOffset() != 0 {
		t.Fatalf("rolled here: removed a file of records a day old (first offset %d)", l.FirstOffset())
	}
	// Reopened logs know only each closed file's last record.
	if !slices.Contains(lc.topics.ReleaseAll(), uri) {
		t.Fatal("the topic did not passivate")
	}
	topic, err := lc.topics.Topic(uri)
	if err != nil {
		t.Fatal(err)
	}
	l = unitLog(t, topic, 0, 0)
	if files, _ := l.ClosedFiles(); len(files) != 1 || files[0].Exact {
		t.Fatalf("after reopening: %+v, want one file known by its last record", files)
	}
	w.run(now.Add(27 * time.Hour))
	if l.FirstOffset() != 0 {
		t.Fatalf("reopened: removed a file of records a day old (first offset %d)", l.FirstOffset())
	}
	w.run(now.Add(8 * 24 * time.Hour))
	if l.FirstOffset() != 11 {
		t.Fatalf("eight days on: first offset %d, want 11", l.FirstOffset())
	}
}

// TestStoragePolicyRearmsTheWorker: a namespace's short storage_tick takes
// effect at once, not at the broker's next pass (an hour here): the first
// pass after the topic is loaded comes within a few of its ticks. Before,
// a topic in a namespace with storage_tick 200 ms grew for up to a broker
// tick (a minute by default) past its retention.
func TestStoragePolicyRearmsTheWorker(t *testing.T) {
	fake := clock.NewFake(time.Now())
	lc := newTestLifecycle(t, func(_ *actors.Config, c *Config) { c.StorageTick = time.Hour; c.Clock = fake })
	m := lc.topics
	ctx := context.Background()
	passes := func() uint64 {
		var d dto.Metric
		if err := lc.m.storageTickSeconds.Write(&d); err != nil {
			t.Fatal(err)
		}
		return d.GetHistogram().GetSampleCount()
	}
	// The first pass comes a second after the start; the next is due an
	// hour after it.
	poll.Eventually(t, 5*time.Second, "the worker armed its first pass", func() bool { return fake.Pending() == 1 })
	fake.Advance(time.Second)
	poll.Eventually(t, 5*time.Second, "the first pass", func() bool { return passes() == 1 })
	if _, err := m.NamespacePolicies(ctx, api.NamespacePoliciesRequest{Namespace: "t/n", Policies: &api.Policies{StorageTick: ptr("200ms")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.CreateTopic(ctx, api.TopicCreateRequest{Topic: "topic://t/n/soon", Segments: 1, Buckets: 1}); err != nil {
		t.Fatal(err)
	}
	// Twenty of the namespace's ticks are four seconds: far short of the
	// hour the broker's tick would wait.
	for i := 0; ; i++ {
		if i == 20 {
			t.Fatalf("no pass within 20 ticks of 200 ms after the policy (passes %d): the worker waits for the broker's tick", passes())
		}
		fake.Advance(200 * time.Millisecond)
		if poll.Until(50*time.Millisecond, func() bool { return passes() > 1 }) {
			break
		}
	}
}
