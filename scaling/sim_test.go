package scaling

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/braidmq/braid/topology"
)

// sim drives Tracker and Decide the way the topic controller does, with a
// fake clock and a load model instead of actors: every evaluation interval
// it samples each active segment from the keys in its range, observes,
// decides and applies. It checks the layout's invariants on every change.
type sim struct {
	t       testing.TB
	p       Policy
	l       topology.Layout
	tracker *Tracker
	created map[topology.SegmentID]time.Time
	start   time.Time
	now     time.Time
	keys    []simKey
	// rate is the total msg/s in at an elapsed time.
	rate      func(elapsed time.Duration) float64
	consumers int
	changes   []simChange
	// suppressed counts suppressions by reason.
	suppressed map[Reason]int
}

type simKey struct {
	hash   uint64
	weight float64 // shares of the total rate; the weights sum to 1
}

type simChange struct {
	at time.Duration
	d  Decision
}

func (c simChange) String() string {
	return fmt.Sprintf("%s %s %v (%s)", c.at, c.d.Kind, c.d.Segments, c.d.Reason)
}

func newSim(t testing.TB, p Policy, segments int, keys []simKey) *sim {
	l, err := topology.New(segments, p.EntryBucketBudget)
	if err != nil {
		t.Fatal(err)
	}
	keys = slices.Clone(keys)
	slices.SortFunc(keys, func(a, b simKey) int { return cmp.Compare(a.hash, b.hash) })
	return &sim{t: t, p: p, l: l, tracker: NewTracker(), created: map[topology.SegmentID]time.Time{},
		start: t0, now: t0, keys: keys, rate: func(time.Duration) float64 { return 0 }, suppressed: map[Reason]int{}}
}

// keysIn returns the keys whose hash lies in r (keys are sorted by hash).
func (s *sim) keysIn(r topology.Range) []simKey {
	lo, _ := slices.BinarySearchFunc(s.keys, r.Lo, func(k simKey, h uint64) int { return cmp.Compare(k.hash, h) })
	hi := lo
	for hi < len(s.keys) && s.keys[hi].hash <= r.Hi {
		hi++
	}
	return s.keys[lo:hi]
}

// uniformKeys returns n keys of equal weight spread over the whole space.
func uniformKeys(rng *rand.Rand, n int) []simKey {
	keys := make([]simKey, n)
	for i := range keys {
		keys[i] = simKey{hash: rng.Uint64(), weight: 1 / float64(n)}
	}
	return keys
}

// run advances the clock by d, one evaluation at a time.
func (s *sim) run(d time.Duration) {
	s.t.Helper()
	end := s.now.Add(d)
	for s.now.Before(end) {
		s.step()
	}
}

func (s *sim) elapsed() time.Duration { return s.now.Sub(s.start) }

func (s *sim) step() {
	s.t.Helper()
	dt := s.p.EvaluationInterval
	// Counters see the rate integrated over the interval.
	total := 0.0
	const parts = 20
	for i := range parts {
		total += s.rate(s.elapsed()+dt*time.Duration(i)/parts) / parts
	}
	s.now = s.now.Add(dt)
	samples := map[topology.SegmentID]Sample{}
	for _, seg := range s.l.Active() {
		smp := Sample{Elapsed: dt}
		var heaviest float64
		for _, k := range s.keysIn(seg.Range) {
			n := uint64(math.Round(k.weight * total * dt.Seconds()))
			smp.MsgsIn += n
			smp.BytesIn += 100 * n
			smp.Hist[Bin(seg.Range, k.hash)] += n
			if k.weight > heaviest {
				heaviest, smp.HotKey, smp.HotKeyHits = k.weight, k.hash, n
			}
		}
		samples[seg.ID] = smp
	}
	s.tracker.Observe(s.l, samples, s.p, s.now)
	load := Load{Segments: s.tracker.Load()}
	if s.consumers > 0 {
		load.Subscriptions = []SubscriptionLoad{{Name: "sub", Consumers: s.consumers}}
	}
	d := Decide(s.l, load, s.p, History{Created: s.created}, s.now)
	for _, sup := range d.Suppressed {
		s.suppressed[sup.Reason]++
	}
	if d.Kind == None {
		return
	}
	next, err := Apply(s.l, d)
	if err != nil {
		s.t.Fatalf("at %s: %+v does not apply: %v", s.elapsed(), d, err)
	}
	if err := next.Validate(); err != nil {
		s.t.Fatalf("at %s: %+v gives an invalid layout: %v", s.elapsed(), d, err)
	}
	for id := s.l.NextID; id < next.NextID; id++ {
		s.created[id] = s.now
	}
	s.l = next
	s.changes = append(s.changes, simChange{at: s.elapsed(), d: d})
}

// trueRate is the model's msg/s into segment seg in the middle of the
// interval just measured.
func (s *sim) trueRate(seg topology.Segment) float64 {
	r := 0.0
	total := s.rate(s.elapsed() - s.p.EvaluationInterval/2)
	for _, k := range s.keysIn(seg.Range) {
		r += k.weight * total
	}
	return r
}

// maxTrueRate is the largest trueRate over the active segments.
func (s *sim) maxTrueRate() float64 {
	m := 0.0
	for _, seg := range s.l.Active() {
		m = max(m, s.trueRate(seg))
	}
	return m
}

func (s *sim) count(k Kind) int {
	n := 0
	for _, c := range s.changes {
		if c.d.Kind == k {
			n++
		}
	}
	return n
}

func (s *sim) history() string {
	var b strings.Builder
	for _, c := range s.changes {
		fmt.Fprintln(&b, c)
	}
	return b.String()
}

// square alternates between lo and hi every half period, starting high.
func square(lo, hi float64, period time.Duration) func(time.Duration) float64 {
	return func(e time.Duration) float64 {
		if (e/(period/2))%2 == 0 {
			return hi
		}
		return lo
	}
}

// The benchmark's scenario, simulated: with default settings, a step from
// 1 % to 10x the split threshold is followed, within 5 s, by enough
// segments that none is over the threshold, in one split.
func TestSimStepTo10xSplitsWithinSeconds(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(10, 10))
	s := newSim(t, Default, 1, uniformKeys(rng, 4096))
	step := time.Minute
	s.rate = func(e time.Duration) float64 {
		if e < step {
			return 100
		}
		return 100_000
	}
	s.run(step)
	if len(s.changes) != 0 {
		t.Fatalf("changes at 1%% load:\n%s", s.history())
	}
	var settled time.Duration
	for settled == 0 && s.elapsed() < step+30*time.Second {
		s.step()
		if s.maxTrueRate() <= Default.Split.MsgIn {
			settled = s.elapsed() - step
		}
	}
	if settled == 0 || settled > 5*time.Second {
		t.Fatalf("settled after %s, want within 5s:\n%s", settled, s.history())
	}
	s.run(5 * time.Minute)
	if s.count(Split) != 1 || s.count(Merge) != 0 {
		t.Fatalf("want exactly one split and nothing after it:\n%s", s.history())
	}
	if n := len(s.l.Active()); n < 11 || n > 20 {
		t.Fatalf("%d segments for 10x the threshold", n)
	}
	t.Logf("settled %s after the step with %d segments", settled, len(s.l.Active()))
}

// When the load stops, the segments merge back down to min segments, and
// never below.
func TestSimLoadStopMergesToMinSegments(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(11, 11))
	for _, minSegs := range []int{1, 3} {
		p := Default
		p.MinSegments = minSegs
		s := newSim(t, p, minSegs, uniformKeys(rng, 4096))
		s.rate = func(e time.Duration) float64 {
			if e < time.Minute {
				return 60_000
			}
			return 0
		}
		s.run(time.Minute)
		if n := len(s.l.Active()); n < 6 {
			t.Fatalf("min %d: %d segments under 6x load", minSegs, n)
		}
		for range 30 * 60 {
			s.step()
			if n := len(s.l.Active()); n < minSegs {
				t.Fatalf("min %d: %d segments", minSegs, n)
			}
		}
		if n := len(s.l.Active()); n != minSegs {
			t.Fatalf("min %d: %d segments 30 minutes after the load stopped:\n%s", minSegs, n, s.history())
		}
		if minSegs > 1 && s.suppressed[SuppressedMinSegments] == 0 {
			t.Errorf("min %d: no min_segments suppression once there", minSegs)
		}
	}
}

// A minute of load oscillating around the split threshold, at any period,
// splits at most once and never merges; around the merge threshold it
// merges at most once and never splits.
func TestSimOscillationDoesNotFlap(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(12, 12))
	keys := uniformKeys(rng, 4096)
	T, M := Default.Split.MsgIn, Default.Merge.MsgIn
	for _, period := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 10 * time.Second, 30 * time.Second} {
		for _, amp := range []float64{0.05, 0.2, 0.5} {
			s := newSim(t, Default, 1, keys)
			s.rate = square(T*(1-amp), T*(1+amp), period)
			s.run(time.Minute)
			if s.count(Split) > 1 || s.count(Merge) > 0 {
				t.Errorf("around split, period %s amplitude %.0f%%:\n%s", period, 100*amp, s.history())
			}
			// A period shorter than twice the split window never stays
			// hot long enough.
			if period <= 4*time.Second && len(s.changes) > 0 {
				t.Errorf("around split, period %s amplitude %.0f%%: changed:\n%s", period, 100*amp, s.history())
			}

			m := newSim(t, Default, 2, keys)
			m.rate = square(2*M*(1-amp), 2*M*(1+amp), period)
			m.run(3 * time.Minute)
			if m.count(Merge) > 1 || m.count(Split) > 0 {
				t.Errorf("around merge, period %s amplitude %.0f%%:\n%s", period, 100*amp, m.history())
			}
		}
	}
}

// A skewed key distribution is split where the load is, not at the
// midpoint.
func TestSimSkewedLoadSplitsWhereTheLoadIs(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(13, 13))
	const hotEnd = uint64(1) << 60 // the first sixteenth of the space
	var keys []simKey
	for range 2000 {
		keys = append(keys, simKey{hash: rng.Uint64N(hotEnd), weight: 0.9 / 2000})
	}
	for range 1000 {
		keys = append(keys, simKey{hash: hotEnd + rng.Uint64N(math.MaxUint64-hotEnd), weight: 0.1 / 1000})
	}
	s := newSim(t, Default, 1, keys)
	s.rate = func(time.Duration) float64 { return 15_000 }
	s.run(30 * time.Second)
	if s.count(Split) == 0 {
		t.Fatalf("no split at 1.5x:\n%s", s.history())
	}
	first := s.changes[0].d
	if first.At[0] >= hotEnd {
		t.Fatalf("first split at %s, want inside the hot sixteenth [0, %s):\n%s",
			topology.FormatHash(first.At[0]), topology.FormatHash(hotEnd), s.history())
	}
	if m := s.maxTrueRate(); m > Default.Split.MsgIn {
		t.Fatalf("a segment still takes %.0f msg/s after splitting:\n%s", m, s.history())
	}
}

// A single hot key is reported and not split for, however long it lasts.
func TestSimSingleHotKeyDoesNotSplitRepeatedly(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(14, 14))
	keys := uniformKeys(rng, 1000)
	for i := range keys {
		keys[i].weight = 0.1 / 1000
	}
	keys = append(keys, simKey{hash: rng.Uint64(), weight: 0.9})
	for _, rate := range []float64{15_000, 50_000} {
		s := newSim(t, Default, 1, keys)
		s.rate = func(time.Duration) float64 { return rate }
		s.run(5 * time.Minute)
		if s.suppressed[SuppressedHotKey] == 0 {
			t.Errorf("%.0f msg/s: the hot key was never reported:\n%s", rate, s.history())
		}
		// At 15k the rest (1.5k) is not hot: never split. At 50k the rest
		// (5k) is not hot either once the first split isolates it.
		if s.count(Split) > 1 {
			t.Errorf("%.0f msg/s: %d splits for one key:\n%s", rate, s.count(Split), s.history())
		}
	}
}

// Consumers joining a one-segment topic get units: by a split when the
// segment is busy, by a rebucket when it is not.
func TestSimConsumersDriveSplitOrRebucket(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(15, 15))
	for _, c := range []struct {
		rate float64
		want Kind
	}{{5000, Split}, {200, Rebucket}} {
		s := newSim(t, Default, 1, uniformKeys(rng, 1024))
		s.rate = func(time.Duration) float64 { return c.rate }
		s.run(10 * time.Second)
		s.consumers = 9
		s.run(30 * time.Second)
		if len(s.changes) == 0 || s.changes[0].d.Kind != c.want || s.changes[0].d.Reason != ReasonConsumers {
			t.Fatalf("%.0f msg/s, 9 consumers: %s, want a %s", c.rate, s.history(), c.want)
		}
		units := 0
		for _, seg := range s.l.Active() {
			units += seg.Buckets
		}
		if units < 9 {
			t.Fatalf("%.0f msg/s: %d units for 9 consumers:\n%s", c.rate, units, s.history())
		}
		// When they leave, buckets stay (rebucketing only grows) and the
		// layout merges back only by load.
		s.consumers = 0
		s.run(5 * time.Minute)
		if c.want == Rebucket && len(s.changes) != 1 {
			t.Fatalf("after the consumers left: %s", s.history())
		}
	}
}

// Property: under random load histories, every decision keeps the segment
// count within [min, max], every new segment within max depth, and no
// segment changes before its cooldown; a merged segment is never hot.
func TestSimPropertyBounds(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(16, 16))
	trials := 40
	if raceEnabled {
		trials = 8
	}
	for trial := range trials {
		p := Default
		p.MinSegments = 1 + rng.IntN(3)
		p.MaxSegments = p.MinSegments + rng.IntN(20)
		p.MaxDAGDepth = 1 + rng.IntN(6)
		p.MergeWindow = time.Duration(5+rng.IntN(60)) * time.Second
		p.MergeCooldown = time.Duration(5+rng.IntN(60)) * time.Second
		keys := uniformKeys(rng, 512)
		if rng.IntN(2) == 0 {
			for i := range keys[:50] {
				keys[i].hash >>= 5 // crowd some keys into a small range
			}
		}
		var levels []float64
		for range 40 {
			levels = append(levels, []float64{0, 500, 5000, 15_000, 80_000}[rng.IntN(5)]*(0.5+rng.Float64()))
		}
		s := newSim(t, p, p.MinSegments, keys)
		s.rate = func(e time.Duration) float64 { return levels[int(e/(30*time.Second))%len(levels)] }
		s.consumers = rng.IntN(12)
		prevCount := len(s.l.Active())
		for range 20 * 60 {
			before := len(s.changes)
			s.step()
			n := len(s.l.Active())
			if n > max(p.MaxSegments, prevCount) || n < p.MinSegments {
				t.Fatalf("trial %d: %d segments outside [%d, %d]:\n%s", trial, n, p.MinSegments, p.MaxSegments, s.history())
			}
			prevCount = n
			if len(s.changes) == before {
				continue
			}
			c := s.changes[len(s.changes)-1].d
			depths := LiveDepths(s.l)
			for _, seg := range s.l.Active() {
				if depths[seg.ID] > p.MaxDAGDepth {
					t.Fatalf("trial %d: segment %d at depth %d, max %d", trial, seg.ID, depths[seg.ID], p.MaxDAGDepth)
				}
			}
			for _, id := range c.Segments {
				cooldown := map[Kind]time.Duration{Split: p.SplitCooldown, Merge: p.MergeCooldown, Rebucket: p.RebucketCooldown}[c.Kind]
				if created, ok := s.created[id]; ok && s.now.Sub(created) < cooldown {
					t.Fatalf("trial %d: %s of segment %d %s after its creation", trial, c.Kind, id, s.now.Sub(created))
				}
			}
			if c.Kind == Merge {
				merged := s.l.Segments[len(s.l.Segments)-1]
				if r := s.trueRate(merged); r > p.Split.MsgIn {
					t.Fatalf("trial %d: merged segment %d takes %.0f msg/s, over the split threshold", trial, merged.ID, r)
				}
			}
		}
	}
}
