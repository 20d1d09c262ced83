package scaling

import (
	"math"
	"testing"
	"time"

	"github.com/braidmq/braid/topology"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func oneSegment(t *testing.T) topology.Layout {
	t.Helper()
	l, err := topology.New(1, 4)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func msgs(n uint64) Sample { return Sample{Elapsed: time.Second, MsgsIn: n, BytesIn: 100 * n} }

func TestTrackerAveragesAndHotSince(t *testing.T) {
	t.Parallel()
	p := Default
	l := oneSegment(t)
	tr := NewTracker()
	now := t0
	tr.Observe(l, map[topology.SegmentID]Sample{0: msgs(100)}, p, now)
	w := tr.Load()[0]
	if w.Short.MsgIn != 100 || w.Long.MsgIn != 100 || w.Short.ByteIn != 10_000 || !w.HotSince.IsZero() {
		t.Fatalf("first sample: %+v", w)
	}
	if w.ColdSince != now {
		t.Fatalf("100 msg/s is cold: ColdSince %v", w.ColdSince)
	}
	// A step to 10x the threshold: the short average crosses it at once,
	// the long one lags.
	now = now.Add(time.Second)
	tr.Observe(l, map[topology.SegmentID]Sample{0: msgs(100_000)}, p, now)
	w = tr.Load()[0]
	if w.Short.MsgIn < 60_000 || w.Long.MsgIn > 10_000 {
		t.Fatalf("after the step: short %.0f long %.0f", w.Short.MsgIn, w.Long.MsgIn)
	}
	if w.HotSince != now || !w.ColdSince.IsZero() {
		t.Fatalf("after the step: hot since %v cold since %v", w.HotSince, w.ColdSince)
	}
	for range 5 {
		now = now.Add(time.Second)
		tr.Observe(l, map[topology.SegmentID]Sample{0: msgs(100_000)}, p, now)
	}
	w = tr.Load()[0]
	if math.Abs(w.Short.MsgIn-100_000) > 1000 || w.HotSince != t0.Add(time.Second) {
		t.Fatalf("steady: short %.0f, hot since %v", w.Short.MsgIn, w.HotSince)
	}
	// A dip below the threshold restarts the hot window (the short average
	// takes a few of its time constants to get there from 10x).
	for range 3 {
		now = now.Add(time.Second)
		tr.Observe(l, map[topology.SegmentID]Sample{0: msgs(0)}, p, now)
	}
	if w := tr.Load()[0]; !w.HotSince.IsZero() {
		t.Fatalf("after a dip: hot since %v (short %.0f)", w.HotSince, w.Short.MsgIn)
	}
}

func TestTrackerSeedsChildrenFromParents(t *testing.T) {
	t.Parallel()
	p := Default
	l := oneSegment(t)
	tr := NewTracker()
	var hist Histogram
	hist[0] = 3000 // three quarters of the keyed load in the first bin
	hist[40] = 1000
	smp := Sample{Elapsed: time.Second, MsgsIn: 4000, Hist: hist}
	tr.Observe(l, map[topology.SegmentID]Sample{0: smp}, p, t0)

	split, err := l.Split(0, nil)
	if err != nil {
		t.Fatal(err)
	}
	tr.Observe(split, nil, p, t0.Add(time.Second))
	load := tr.Load()
	if _, ok := load[0]; ok {
		t.Error("the sealed parent is still tracked")
	}
	if lo, hi := load[1].Short.MsgIn, load[2].Short.MsgIn; math.Abs(lo-3000) > 1 || math.Abs(hi-1000) > 1 {
		t.Errorf("children seeded with %.0f and %.0f msg/s, want 3000 and 1000 (by the parent's histogram)", lo, hi)
	}
	merged, err := split.Merge(1, 2)
	if err != nil {
		t.Fatal(err)
	}
	tr.Observe(merged, nil, p, t0.Add(2*time.Second))
	if got := tr.Load()[3].Short.MsgIn; math.Abs(got-4000) > 1 {
		t.Errorf("merged child seeded with %.0f msg/s, want 4000", got)
	}
	rebucketed, err := merged.Rebucket(3, 8)
	if err != nil {
		t.Fatal(err)
	}
	tr.Observe(rebucketed, nil, p, t0.Add(3*time.Second))
	if got := tr.Load()[4].Short.MsgIn; math.Abs(got-4000) > 1 {
		t.Errorf("rebucketed successor seeded with %.0f msg/s, want 4000", got)
	}
}

func TestTrackerHotKeyShare(t *testing.T) {
	t.Parallel()
	p := Default
	l := oneSegment(t)
	tr := NewTracker()
	now := t0
	for range 10 {
		now = now.Add(time.Second)
		tr.Observe(l, map[topology.SegmentID]Sample{0: {Elapsed: time.Second, MsgsIn: 1000, HotKey: 42, HotKeyHits: 900}}, p, now)
	}
	if w := tr.Load()[0]; w.HotKey != 42 || math.Abs(w.HotKeyShare-0.9) > 0.01 {
		t.Errorf("hot key %d share %.2f, want 42 and 0.9", w.HotKey, w.HotKeyShare)
	}
}

func TestTrackerUnsampledSegmentIsNotLoaded(t *testing.T) {
	t.Parallel()
	tr := NewTracker()
	tr.Observe(oneSegment(t), nil, Default, t0)
	if len(tr.Load()) != 0 {
		t.Errorf("a segment never sampled has a load: %+v", tr.Load())
	}
}
