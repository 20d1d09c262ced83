package consumers

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/braidmq/braid/compaction"
	"github.com/braidmq/braid/routing"
	"github.com/braidmq/braid/topology"
	"github.com/braidmq/braid/wal"
)

// testSource is a Source over real parts: one real wal.Log per unit in a
// temporary directory and a real topology.Layout that the test reshapes
// with split, merge and rebucket.
type testSource struct {
	t     testing.TB
	topic string
	dir   string

	// panicOnRead makes the next Read panic (to exercise supervision).
	panicOnRead atomic.Bool

	mu       sync.Mutex // guards the fields below
	layout   topology.Layout
	logs     map[topology.Unit]*wal.Log
	appended chan struct{}
	// compacted is the compacted view of units ReadCompacted serves: below
	// horizon only the offsets in kept.
	compacted map[topology.Unit]testCompacted
}

// testCompacted is a unit's compacted view in a testSource.
type testCompacted struct {
	horizon uint64
	kept    map[uint64]bool
}

func newTestSource(t testing.TB, segments, bucketBudget int) *testSource {
	t.Helper()
	l, err := topology.New(segments, bucketBudget)
	if err != nil {
		t.Fatal(err)
	}
	return newTestSourceLayout(t, l)
}

func newTestSourceLayout(t testing.TB, l topology.Layout) *testSource {
	s := &testSource{
		t:        t,
		topic:    "topic://acme/orders/" + sanitize(t.Name()),
		dir:      t.TempDir(),
		layout:   l,
		logs:     make(map[topology.Unit]*wal.Log),
		appended: make(chan struct{}),
	}
	t.Cleanup(s.close)
	return s
}

func sanitize(name string) string {
	out := []byte(name)
	for i, c := range out {
		if !isNameByte(c) {
			out[i] = '_'
		}
	}
	return string(out)
}

func (s *testSource) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.logs {
		l.Close()
	}
}

func (s *testSource) Topic() string { return s.topic }

func (s *testSource) Layout() topology.Layout {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.layout
}

// logLocked returns the log of a unit of the layout, opening it on first use.
func (s *testSource) logLocked(seg topology.SegmentID, bucket int) (*wal.Log, error) {
	u := topology.Unit{Segment: seg, Bucket: bucket}
	if l := s.logs[u]; l != nil {
		return l, nil
	}
	sg, ok := s.layout.Segment(seg)
	if !ok || bucket < 0 || bucket >= sg.Buckets {
		return nil, fmt.Errorf("no unit %d/%d", seg, bucket)
	}
	l, err := wal.Open(filepath.Join(s.dir, fmt.Sprintf("%d-%d", seg, bucket)), wal.Options{Durability: wal.DurabilityNone})
	if err != nil {
		return nil, err
	}
	s.logs[u] = l
	return l, nil
}

func (s *testSource) Bounds(seg topology.SegmentID, bucket int) (first, next uint64, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, err := s.logLocked(seg, bucket)
	if err != nil {
		return 0, 0, err
	}
	return l.FirstOffset(), l.NextOffset(), nil
}

func (s *testSource) Read(seg topology.SegmentID, bucket int, from uint64, max, maxBytes int) ([]wal.Record, error) {
	if s.panicOnRead.CompareAndSwap(true, false) {
		panic("testSource: injected read panic")
	}
	s.mu.Lock()
	l, err := s.logLocked(seg, bucket)
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return l.ReadRange(from, max, maxBytes)
}

// compact sets the compacted view of a unit: below horizon only the
// offsets kept.
func (s *testSource) compact(seg topology.SegmentID, bucket int, horizon uint64, kept ...uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.compacted == nil {
		s.compacted = map[topology.Unit]testCompacted{}
	}
	c := testCompacted{horizon: horizon, kept: map[uint64]bool{}}
	for _, k := range kept {
		c.kept[k] = true
	}
	s.compacted[topology.Unit{Segment: seg, Bucket: bucket}] = c
}

func (s *testSource) ReadCompacted(seg topology.SegmentID, bucket int, from uint64, max, maxBytes int) ([]compaction.Kept, uint64, error) {
	s.mu.Lock()
	c := s.compacted[topology.Unit{Segment: seg, Bucket: bucket}]
	l, err := s.logLocked(seg, bucket)
	s.mu.Unlock()
	if err != nil {
		return nil, from, err
	}
	var out []compaction.Kept
	for ; from < c.horizon && len(out) < max; from++ {
		if !c.kept[from] {
			continue
		}
		rec, err := l.Read(from)
		if err != nil {
			return out, from, err
		}
		out = append(out, compaction.Kept{Offset: from, Record: rec})
	}
	if len(out) == max {
		return out, from, nil
	}
	recs, err := l.ReadRange(from, max-len(out), maxBytes)
	for i, r := range recs {
		out = append(out, compaction.Kept{Offset: from + uint64(i), Record: r})
	}
	return out, from + uint64(len(recs)), err
}

func (s *testSource) Appended() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.appended
}

// notifyLocked closes the Appended channel and makes a new one.
func (s *testSource) notifyLocked() {
	close(s.appended)
	s.appended = make(chan struct{})
}

// appendTo appends payloads to one unit, which must be active.
func (s *testSource) appendTo(seg topology.SegmentID, bucket int, payloads ...string) {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if sg, ok := s.layout.Segment(seg); !ok || sg.State != topology.StateActive {
		s.t.Fatalf("append to segment %d, which is not active", seg)
	}
	l, err := s.logLocked(seg, bucket)
	if err != nil {
		s.t.Fatal(err)
	}
	recs := make([]wal.Record, len(payloads))
	for i, p := range payloads {
		recs[i] = wal.Record{Timestamp: int64(i + 1), Payload: []byte(p)}
	}
	if _, err := l.Append(recs...); err != nil {
		s.t.Fatal(err)
	}
	s.notifyLocked()
}

// produce routes a keyed message as a producer would and appends it.
func (s *testSource) produce(key, payload string) topology.Unit {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	h := routing.KeyHash([]byte(key))
	sg, ok := s.layout.Owner(h)
	if !ok {
		s.t.Fatalf("no owner for key %q", key)
	}
	u := topology.Unit{Segment: sg.ID, Bucket: routing.Bucket(h, sg.Buckets)}
	l, err := s.logLocked(u.Segment, u.Bucket)
	if err != nil {
		s.t.Fatal(err)
	}
	if _, err := l.Append(wal.Record{Key: []byte(key), Payload: []byte(payload)}); err != nil {
		s.t.Fatal(err)
	}
	s.notifyLocked()
	return u
}

// reshape applies a layout operation and publishes the new layout.
func (s *testSource) reshape(op func(topology.Layout) (topology.Layout, error)) topology.Layout {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	l, err := op(s.layout)
	if err != nil {
		s.t.Fatal(err)
	}
	if err := l.Validate(); err != nil {
		s.t.Fatal(err)
	}
	s.layout = l
	s.notifyLocked()
	return l
}

func (s *testSource) split(id topology.SegmentID) topology.Layout {
	return s.reshape(func(l topology.Layout) (topology.Layout, error) { return l.Split(id, nil) })
}

func (s *testSource) merge(a, b topology.SegmentID) topology.Layout {
	return s.reshape(func(l topology.Layout) (topology.Layout, error) { return l.Merge(a, b) })
}

// truncate applies retention to a unit: offsets below before are gone.
func (s *testSource) truncate(seg topology.SegmentID, bucket int, before uint64) {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	l, err := s.logLocked(seg, bucket)
	if err != nil {
		s.t.Fatal(err)
	}
	if err := l.TruncateHead(before); err != nil && !errors.Is(err, wal.ErrNotFound) {
		s.t.Fatal(err)
	}
}

// damage flips a byte of the stored record whose payload is marker, in the
// log of one unit, as a bad sector would: the log is closed and opened
// again, and reads the frame holding the record as a hole (wal.Hole).
func (s *testSource) damage(seg topology.SegmentID, bucket int, marker string) {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	u := topology.Unit{Segment: seg, Bucket: bucket}
	l, err := s.logLocked(seg, bucket)
	if err != nil {
		s.t.Fatal(err)
	}
	dir := l.Dir()
	if err := l.Close(); err != nil {
		s.t.Fatal(err)
	}
	delete(s.logs, u)
	files, err := filepath.Glob(filepath.Join(dir, "[0-9]*"))
	if err != nil {
		s.t.Fatal(err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			s.t.Fatal(err)
		}
		if i := bytes.Index(data, []byte(marker)); i >= 0 {
			data[i] ^= 0x20
			if err := os.WriteFile(f, data, 0o640); err != nil {
				s.t.Fatal(err)
			}
			if l, err = s.logLocked(seg, bucket); err != nil || len(l.Holes()) == 0 {
				s.t.Fatalf("damaged %s: holes %v, %v", f, l.Holes(), err)
			}
			return
		}
	}
	s.t.Fatalf("no record %q in %s", marker, dir)
}
