package scaling

import (
	"slices"
	"testing"
	"time"

	"github.com/braidmq/braid/topology"
)

func layoutOf(t *testing.T, segments, budget int) topology.Layout {
	t.Helper()
	l, err := topology.New(segments, budget)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// hotFor is a segment at msg/s rate that has been hot since now-d.
func hotFor(rate float64, now time.Time, d time.Duration) SegmentLoad {
	return SegmentLoad{Short: Rates{MsgIn: rate}, Long: Rates{MsgIn: rate}, HotSince: now.Add(-d)}
}

// coldFor is a segment at msg/s rate that has been cold since now-d.
func coldFor(rate float64, now time.Time, d time.Duration) SegmentLoad {
	return SegmentLoad{Short: Rates{MsgIn: rate}, Long: Rates{MsgIn: rate}, ColdSince: now.Add(-d)}
}

func loads(m map[topology.SegmentID]SegmentLoad, consumers ...int) Load {
	l := Load{Segments: m}
	for i, c := range consumers {
		l.Subscriptions = append(l.Subscriptions, SubscriptionLoad{Name: string(rune('a' + i)), Consumers: c})
	}
	return l
}

func hasSuppression(d Decision, k Kind, r Reason) bool {
	return slices.ContainsFunc(d.Suppressed, func(s Suppression) bool { return s.Kind == k && s.Reason == r })
}

func TestDecideSplitsAfterTheSplitWindow(t *testing.T) {
	t.Parallel()
	p := Default
	l := layoutOf(t, 1, 4)
	now := t0.Add(time.Hour)
	if d := Decide(l, loads(map[topology.SegmentID]SegmentLoad{0: hotFor(20_000, now, 2*time.Second)}), p, History{}, now); d.Kind != None {
		t.Fatalf("hot for 2s of a 3s window: %+v", d)
	}
	d := Decide(l, loads(map[topology.SegmentID]SegmentLoad{0: hotFor(20_000, now, 3*time.Second)}), p, History{}, now)
	if d.Kind != Split || d.Reason != ReasonMsgRateIn || !slices.Equal(d.Segments, []topology.SegmentID{0}) {
		t.Fatalf("hot for the window: %+v", d)
	}
	// 2x the threshold, pieces at 60 % of it: 4 pieces, one bucket each
	// (the budget of 4 over 4 segments).
	if len(d.At) != 3 || d.Buckets != 1 {
		t.Fatalf("2x over: %d points, %d buckets; want 3 points (4 pieces) of 1 bucket", len(d.At), d.Buckets)
	}
	// Just over: two pieces at the midpoint, the budget spread over two.
	d = Decide(l, loads(map[topology.SegmentID]SegmentLoad{0: hotFor(11_000, now, time.Minute)}), p, History{}, now)
	if len(d.At) != 1 || d.At[0] != topology.FullRange.Mid()+1 || d.Buckets != 2 {
		t.Fatalf("just over: %+v", d)
	}
	// A 10x step is one split into 17 pieces.
	d = Decide(l, loads(map[topology.SegmentID]SegmentLoad{0: hotFor(100_000, now, time.Minute)}), p, History{}, now)
	if len(d.At) != 16 {
		t.Fatalf("10x over: %d pieces, want 17", len(d.At)+1)
	}
	if _, err := Apply(l, d); err != nil {
		t.Fatal(err)
	}
}

func TestDecideSplitReasonIsTheWorstDimension(t *testing.T) {
	t.Parallel()
	p := Default
	l := layoutOf(t, 1, 4)
	now := t0
	w := SegmentLoad{Short: Rates{MsgIn: 11_000, ByteOut: 600 << 20}, HotSince: now.Add(-time.Hour)}
	d := Decide(l, loads(map[topology.SegmentID]SegmentLoad{0: w}), p, History{}, now)
	if d.Kind != Split || d.Reason != ReasonByteRateOut {
		t.Fatalf("%+v, want a split for byte_rate_out", d)
	}
	// A disabled dimension does not count.
	p.Split.ByteOut = 0
	if d := Decide(l, loads(map[topology.SegmentID]SegmentLoad{0: w}), p, History{}, now); d.Reason != ReasonMsgRateIn {
		t.Fatalf("with byte_rate_out disabled: %+v", d)
	}
}

func TestDecideSuppressions(t *testing.T) {
	t.Parallel()
	now := t0.Add(time.Hour)
	hot := map[topology.SegmentID]SegmentLoad{0: hotFor(50_000, now, time.Minute)}
	cases := []struct {
		name   string
		policy func(*Policy)
		load   Load
		hist   History
		want   Reason
	}{
		{"cooldown", nil, loads(hot), History{Created: map[topology.SegmentID]time.Time{0: now.Add(-4 * time.Second)}}, SuppressedCooldown},
		{"max segments", func(p *Policy) { p.MaxSegments = 1 }, loads(hot), History{}, SuppressedMaxSegments},
		{"max depth", func(p *Policy) { p.MaxDAGDepth = 0 }, loads(hot), History{}, SuppressedMaxDepth},
		{"hot key", nil, loads(map[topology.SegmentID]SegmentLoad{0: func() SegmentLoad {
			w := hotFor(15_000, now, time.Minute)
			w.HotKeyShare, w.HotKey = 0.8, 77
			return w
		}()}), History{}, SuppressedHotKey},
	}
	for _, c := range cases {
		p := Default
		if c.policy != nil {
			c.policy(&p)
		}
		d := Decide(layoutOf(t, 1, 4), c.load, p, c.hist, now)
		if d.Kind != None || !hasSuppression(d, Split, c.want) {
			t.Errorf("%s: %+v, want no change and a %s suppression", c.name, d, c.want)
		}
	}
	// A hot key that carries most, but leaves the rest over the threshold,
	// does not stop the split.
	w := hotFor(50_000, now, time.Minute)
	w.HotKeyShare = 0.6
	if d := Decide(layoutOf(t, 1, 4), loads(map[topology.SegmentID]SegmentLoad{0: w}), Default, History{}, now); d.Kind != Split {
		t.Errorf("hot key with a hot rest: %+v", d)
	}
	// Room for fewer pieces than the load asks: capped at max segments.
	p := Default
	p.MaxSegments = 3
	if d := Decide(layoutOf(t, 1, 4), loads(hot), p, History{}, now); d.Kind != Split || len(d.At) != 2 {
		t.Errorf("max 3 segments: %+v", d)
	}
}

func TestDecideForConsumers(t *testing.T) {
	t.Parallel()
	now := t0.Add(time.Hour)
	busy := map[topology.SegmentID]SegmentLoad{0: {Short: Rates{MsgIn: 5000}}}
	idle := map[topology.SegmentID]SegmentLoad{0: {Short: Rates{MsgIn: 10}}}
	l := layoutOf(t, 1, 4)

	if d := Decide(l, loads(busy, 4, 2), Default, History{}, now); d.Kind != None {
		t.Fatalf("as many consumers as units: %+v", d)
	}
	d := Decide(l, loads(busy, 10), Default, History{}, now)
	if d.Kind != Split || d.Reason != ReasonConsumers || len(d.At) != 2 || d.Buckets != 4 {
		t.Fatalf("10 consumers, 4 units, 5000 msg/s: %+v; want a split in 3 of 4 buckets each", d)
	}
	d = Decide(l, loads(idle, 10), Default, History{}, now)
	if d.Kind != Rebucket || d.Buckets != 10 || d.Reason != ReasonConsumers {
		t.Fatalf("10 consumers, 4 units, 10 msg/s: %+v; want a rebucket to 10", d)
	}
	// An unmeasured segment counts as idle.
	if d := Decide(l, loads(nil, 6), Default, History{}, now); d.Kind != Rebucket || d.Buckets != 6 {
		t.Fatalf("unmeasured: %+v", d)
	}
	// Busy but at max segments: rebucket, and say why not a split.
	p := Default
	p.MaxSegments = 1
	d = Decide(l, loads(busy, 10), p, History{}, now)
	if d.Kind != Rebucket || !hasSuppression(d, Split, SuppressedMaxSegments) {
		t.Fatalf("busy at max segments: %+v", d)
	}
	// Cooldowns.
	young := History{Created: map[topology.SegmentID]time.Time{0: now.Add(-time.Second)}}
	if d := Decide(l, loads(idle, 10), Default, young, now); d.Kind != None || !hasSuppression(d, Rebucket, SuppressedCooldown) {
		t.Fatalf("young segment: %+v", d)
	}
	// The rebucket never shrinks and stops at MaxBuckets.
	big, err := l.Rebucket(0, topology.MaxBuckets)
	if err != nil {
		t.Fatal(err)
	}
	if d := Decide(big, loads(nil, topology.MaxBuckets+5), Default, History{}, now); d.Kind != None || !hasSuppression(d, Rebucket, SuppressedMaxBuckets) {
		t.Fatalf("at max buckets: %+v", d)
	}
}

func TestDecideMinSegments(t *testing.T) {
	t.Parallel()
	p := Default
	p.MinSegments = 4
	d := Decide(layoutOf(t, 1, 4), Load{}, p, History{}, t0)
	if d.Kind != Split || d.Reason != ReasonMinSegments || len(d.At) != 3 {
		t.Fatalf("1 segment, min 4: %+v", d)
	}
}

func TestDecideMerges(t *testing.T) {
	t.Parallel()
	now := t0.Add(time.Hour)
	l := layoutOf(t, 4, 4)
	cold := func(rate float64) SegmentLoad { return coldFor(rate, now, time.Hour) }
	m := map[topology.SegmentID]SegmentLoad{0: cold(500), 1: cold(300), 2: cold(100), 3: cold(0)}
	d := Decide(l, loads(m), Default, History{}, now)
	if d.Kind != Merge || !slices.Equal(d.Segments, []topology.SegmentID{2, 3}) || d.Reason != ReasonIdle {
		t.Fatalf("four cold segments: %+v; want the least loaded pair 2+3", d)
	}
	if d.Buckets != 1 {
		t.Fatalf("merged buckets %d, want 1 (max of 1, 1, and 4/3)", d.Buckets)
	}
	if _, err := Apply(l, d); err != nil {
		t.Fatal(err)
	}
	// Not cold for the whole window.
	short := map[topology.SegmentID]SegmentLoad{0: coldFor(0, now, time.Second), 1: coldFor(0, now, time.Second)}
	if d := Decide(layoutOf(t, 2, 4), loads(short), Default, History{}, now); d.Kind != None {
		t.Fatalf("cold for 1s: %+v", d)
	}
	// A hot neighbour breaks the pair.
	mixed := map[topology.SegmentID]SegmentLoad{0: cold(0), 1: hotFor(20_000, now, time.Second)}
	if d := Decide(layoutOf(t, 2, 4), loads(mixed), Default, History{}, now); d.Kind != None {
		t.Fatalf("cold next to hot: %+v", d)
	}
	two := map[topology.SegmentID]SegmentLoad{0: cold(0), 1: cold(0)}
	p := Default
	p.MinSegments = 2
	if d := Decide(layoutOf(t, 2, 4), loads(two), p, History{}, now); d.Kind != None || !hasSuppression(d, Merge, SuppressedMinSegments) {
		t.Fatalf("at min segments: %+v", d)
	}
	young := History{Created: map[topology.SegmentID]time.Time{1: now.Add(-10 * time.Second)}}
	if d := Decide(layoutOf(t, 2, 4), loads(two), Default, young, now); d.Kind != None || !hasSuppression(d, Merge, SuppressedCooldown) {
		t.Fatalf("young: %+v", d)
	}
	// Merging would leave a subscription's consumers idle.
	if d := Decide(layoutOf(t, 2, 4), loads(two, 4), Default, History{}, now); d.Kind != Merge || d.Buckets != 4 {
		t.Fatalf("4 consumers, merged to the budget of 4: %+v", d)
	}
	if d := Decide(layoutOf(t, 2, 8), loads(two, 8), Default, History{}, now); d.Kind != None || !hasSuppression(d, Merge, SuppressedConsumers) {
		t.Fatalf("8 consumers on 2x4 buckets: %+v", d)
	}
	// Cold, but together over half a split threshold (a policy with close
	// thresholds): the merged segment would soon be hot again.
	p = Default
	p.Merge.MsgIn = 4000
	warm := map[topology.SegmentID]SegmentLoad{0: cold(3000), 1: cold(3000)}
	if d := Decide(layoutOf(t, 2, 4), loads(warm), p, History{}, now); d.Kind != None || !hasSuppression(d, Merge, SuppressedSplitLoad) {
		t.Fatalf("warm pair: %+v", d)
	}
}

func TestDecideDepth(t *testing.T) {
	t.Parallel()
	now := t0.Add(time.Hour)
	p := Default
	p.MaxDAGDepth = 2
	l := layoutOf(t, 1, 4)
	for range 2 {
		var err error
		if l, err = l.Rebucket(l.Active()[0].ID, l.Active()[0].Buckets+1); err != nil {
			t.Fatal(err)
		}
	}
	id := l.Active()[0].ID
	d := Decide(l, loads(map[topology.SegmentID]SegmentLoad{id: hotFor(50_000, now, time.Minute)}), p, History{}, now)
	if d.Kind != None || !hasSuppression(d, Split, SuppressedMaxDepth) {
		t.Fatalf("at depth 2 of 2: %+v", d)
	}
	// Retention deleting the root frees one level.
	if l, err := l.Delete(0); err != nil {
		t.Fatal(err)
	} else if d := Decide(l, loads(map[topology.SegmentID]SegmentLoad{id: hotFor(50_000, now, time.Minute)}), p, History{}, now); d.Kind != Split {
		t.Fatalf("after deleting the root: %+v", d)
	}
}

func TestLiveDepths(t *testing.T) {
	t.Parallel()
	l := layoutOf(t, 1, 4)
	l, _ = l.Split(0, nil) // 1, 2
	l, _ = l.Split(1, nil) // 3, 4
	l, _ = l.Merge(4, 2)   // 5
	d := LiveDepths(l)
	want := map[topology.SegmentID]int{0: 0, 1: 1, 2: 1, 3: 2, 4: 2, 5: 3}
	for id, w := range want {
		if d[id] != w {
			t.Errorf("depth of %d = %d, want %d", id, d[id], w)
		}
	}
	l, _ = l.Delete(0)
	l, _ = l.Delete(1)
	d = LiveDepths(l)
	want = map[topology.SegmentID]int{2: 0, 3: 0, 4: 0, 5: 1}
	for id, w := range want {
		if d[id] != w {
			t.Errorf("after deleting 0 and 1: depth of %d = %d, want %d", id, d[id], w)
		}
	}
}

func TestDecideAutoScaleOff(t *testing.T) {
	t.Parallel()
	p := Default
	p.AutoScale = false
	p.MinSegments = 4
	now := t0
	if d := Decide(layoutOf(t, 1, 4), loads(map[topology.SegmentID]SegmentLoad{0: hotFor(1e6, now, time.Hour)}, 100), p, History{}, now); d.Kind != None {
		t.Fatalf("auto_scale off: %+v", d)
	}
}

func TestExpired(t *testing.T) {
	t.Parallel()
	l := layoutOf(t, 1, 4)
	l, _ = l.Split(0, nil) // 0 sealed at epoch 2
	l, _ = l.Split(1, nil) // 1 sealed at epoch 3
	sealed := map[topology.SegmentID]time.Time{0: t0, 1: t0.Add(time.Hour)}
	at := func(id topology.SegmentID) (time.Time, bool) { s, ok := sealed[id]; return s, ok }
	all := func(topology.SegmentID) bool { return true }
	only0 := func(id topology.SegmentID) bool { return id == 0 }
	now := t0.Add(90 * time.Minute)

	if got := Expired(l, at, time.Hour, nil, now); !slices.Equal(got, []topology.SegmentID{0}) {
		t.Errorf("retention 1h, no subscription: %v, want [0]", got)
	}
	if got := Expired(l, at, 0, []func(topology.SegmentID) bool{all, only0}, now); !slices.Equal(got, []topology.SegmentID{0}) {
		t.Errorf("one subscription has not drained 1: %v", got)
	}
	if got := Expired(l, at, -time.Second, nil, now); got != nil {
		t.Errorf("negative retention: %v", got)
	}
	l, _ = l.Delete(0)
	if got := Expired(l, at, 0, nil, now); !slices.Equal(got, []topology.SegmentID{1}) {
		t.Errorf("after deleting 0: %v", got)
	}
	if got := Expired(l, func(topology.SegmentID) (time.Time, bool) { return time.Time{}, false }, 0, nil, now); got != nil {
		t.Errorf("unknown seal times: %v", got)
	}
}

func TestLoadQuiet(t *testing.T) {
	t.Parallel()
	if !(Load{}).Quiet() {
		t.Fatal("no segments is not quiet")
	}
	decayed := Load{Segments: map[topology.SegmentID]SegmentLoad{1: {Short: Rates{MsgIn: 2.88e-51}, Long: Rates{ByteOut: 1e-9}}}}
	if !decayed.Quiet() {
		t.Fatal("a load decayed to almost nothing is not quiet")
	}
	busy := Load{Segments: map[topology.SegmentID]SegmentLoad{1: {}, 2: {Long: Rates{MsgOut: 0.5}}}}
	if busy.Quiet() {
		t.Fatal("a segment read at 0.5 msg/s is quiet")
	}
}
