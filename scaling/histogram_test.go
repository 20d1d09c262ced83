package scaling

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/braidmq/braid/topology"
)

func TestBinsTileTheRange(t *testing.T) {
	t.Parallel()
	ranges := []topology.Range{
		topology.FullRange,
		{Lo: 0, Hi: 0},
		{Lo: 10, Hi: 12},
		{Lo: 100, Hi: 163}, // exactly Bins hashes
		{Lo: 100, Hi: 164},
		{Lo: 1 << 63, Hi: math.MaxUint64},
		{Lo: 12345, Hi: 1<<40 + 7},
	}
	for _, r := range ranges {
		next := r.Lo
		done := false
		for i := range Bins {
			b, ok := binRange(r, i)
			if !ok {
				done = true
				continue
			}
			if done || b.Lo != next || b.Hi < b.Lo || b.Hi > r.Hi {
				t.Fatalf("%v: bin %d = %v, want it to start at %s", r, i, b, topology.FormatHash(next))
			}
			if Bin(r, b.Lo) != i || Bin(r, b.Hi) != i {
				t.Fatalf("%v: Bin of bin %d's ends = %d, %d", r, i, Bin(r, b.Lo), Bin(r, b.Hi))
			}
			if b.Hi == r.Hi {
				done = true
			} else {
				next = b.Hi + 1
			}
		}
		if !done {
			t.Fatalf("%v: bins stop before Hi", r)
		}
	}
}

func TestSplitPointsEven(t *testing.T) {
	t.Parallel()
	var uniform [Bins]float64
	for i := range uniform {
		uniform[i] = 10
	}
	r := topology.FullRange
	if at := SplitPoints(r, uniform, 2); len(at) != 1 || at[0] != r.Mid()+1 {
		t.Errorf("uniform load, 2 ways: %v, want the midpoint", at)
	}
	var empty [Bins]float64
	if at := SplitPoints(r, empty, 2); len(at) != 1 || at[0] != r.Mid()+1 {
		t.Errorf("no keyed load, 2 ways: %v, want the midpoint", at)
	}
	at := SplitPoints(r, uniform, 4)
	for j, want := range []uint64{1 << 62, 2 << 62, 3 << 62} {
		if at[j] != want {
			t.Errorf("4 ways: point %d = %s, want %s", j, topology.FormatHash(at[j]), topology.FormatHash(want))
		}
	}
	if at := SplitPoints(r, uniform, 1); at != nil {
		t.Errorf("1 way: %v", at)
	}
	// Mild unevenness (within skewTolerance) keeps the midpoint.
	mild := uniform
	for i := range Bins / 2 {
		mild[i] = 11
	}
	if at := SplitPoints(r, mild, 2); at[0] != r.Mid()+1 {
		t.Errorf("mild skew: %v, want the midpoint", at)
	}
}

func TestSplitPointsFollowSkew(t *testing.T) {
	t.Parallel()
	// All load in the first 4 bins of 64: a 2-way split must cut inside them.
	var hist [Bins]float64
	for i := range 4 {
		hist[i] = 100
	}
	r := topology.FullRange
	at := SplitPoints(r, hist, 2)
	w := binWidth(r)
	if len(at) != 1 || at[0] != 2*w {
		t.Errorf("skewed: %v, want %s (the load's median)", at, topology.FormatHash(2*w))
	}
	at = SplitPoints(r, hist, 4)
	for j, want := range []uint64{w, 2 * w, 3 * w} {
		if at[j] != want {
			t.Errorf("skewed 4 ways: point %d = %s, want %s", j, topology.FormatHash(at[j]), topology.FormatHash(want))
		}
	}
	// Load in one bin: the points spread inside it and stay valid.
	var one [Bins]float64
	one[63] = 1
	at = SplitPoints(r, one, 8)
	checkPoints(t, r, at, 7)
	for _, p := range at {
		if Bin(r, p) != 63 {
			t.Errorf("point %s is outside the loaded bin", topology.FormatHash(p))
		}
	}
}

func TestSplitPointsNarrowRanges(t *testing.T) {
	t.Parallel()
	var uniform [Bins]float64
	for i := range uniform {
		uniform[i] = 1
	}
	if at := SplitPoints(topology.Range{Lo: 5, Hi: 5}, uniform, 2); len(at) != 0 {
		t.Errorf("single hash: %v", at)
	}
	at := SplitPoints(topology.Range{Lo: 5, Hi: 7}, uniform, 10)
	checkPoints(t, topology.Range{Lo: 5, Hi: 7}, at, 2)
}

func checkPoints(t *testing.T, r topology.Range, at []uint64, want int) {
	t.Helper()
	if len(at) != want {
		t.Fatalf("%v: %d points %v, want %d", r, len(at), at, want)
	}
	for i, p := range at {
		if p <= r.Lo || p > r.Hi || (i > 0 && p <= at[i-1]) {
			t.Fatalf("%v: points %v are not strictly increasing inside (Lo, Hi]", r, at)
		}
	}
}

// Property: for any range, histogram and k, the points are valid split
// points and topology.SplitN accepts them.
func TestSplitPointsAlwaysValid(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(7, 7))
	for range 3000 {
		lo := rng.Uint64()
		var r topology.Range
		switch rng.IntN(3) {
		case 0:
			r = topology.FullRange
		case 1:
			r = topology.Range{Lo: lo, Hi: lo + rng.Uint64N(math.MaxUint64-lo+1)}
		default:
			r = topology.Range{Lo: lo, Hi: lo + min(rng.Uint64N(200), math.MaxUint64-lo)}
		}
		var hist [Bins]float64
		for i := range hist {
			if rng.IntN(3) == 0 {
				hist[i] = rng.Float64() * 1000
			}
		}
		k := 2 + rng.IntN(topology.MaxSplitWays-1)
		at := SplitPoints(r, hist, k)
		if r.Hi-r.Lo >= uint64(k-1) && len(at) == 0 {
			t.Fatalf("%v k=%d: no points", r, k)
		}
		if len(at) > k-1 {
			t.Fatalf("%v k=%d: %d points", r, k, len(at))
		}
		for i, p := range at {
			if p <= r.Lo || p > r.Hi || (i > 0 && p <= at[i-1]) {
				t.Fatalf("%v k=%d hist=%v: bad points %v", r, k, hist, at)
			}
		}
	}
}

func TestRangeShare(t *testing.T) {
	t.Parallel()
	r := topology.FullRange
	var hist loadHist
	hist[0], hist[1] = 30, 10
	w := binWidth(r)
	if got := rangeShare(r, &hist, topology.Range{Lo: 0, Hi: w - 1}); math.Abs(got-0.75) > 1e-9 {
		t.Errorf("share of bin 0 = %v, want 0.75", got)
	}
	if got := rangeShare(r, &hist, topology.Range{Lo: 2 * w, Hi: math.MaxUint64}); got != 0 {
		t.Errorf("share of the idle rest = %v", got)
	}
	var empty loadHist
	if got := rangeShare(r, &empty, topology.Range{Lo: 0, Hi: r.Mid()}); math.Abs(got-0.5) > 1e-9 {
		t.Errorf("share by width = %v, want 0.5", got)
	}
}
