package scaling

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/braidmq/braid/topology"
)

// BenchmarkEvaluate64 is one evaluation of a 64-segment topic: observe the
// samples, then decide. The controller does this once per evaluation
// interval per topic.
func BenchmarkEvaluate64(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	l, err := topology.New(64, 64)
	if err != nil {
		b.Fatal(err)
	}
	samples := map[topology.SegmentID]Sample{}
	for _, s := range l.Active() {
		smp := Sample{Elapsed: time.Second, MsgsIn: 500, BytesIn: 50_000}
		for i := range smp.Hist {
			smp.Hist[i] = uint64(rng.IntN(20))
		}
		samples[s.ID] = smp
	}
	tr := NewTracker()
	now := t0
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		now = now.Add(time.Second)
		tr.Observe(l, samples, Default, now)
		Decide(l, Load{Segments: tr.Load()}, Default, History{}, now)
	}
}

func BenchmarkSplitPointsSkewed(b *testing.B) {
	var hist [Bins]float64
	for i := range 8 {
		hist[i] = float64(100 * (i + 1))
	}
	for i := 0; i < b.N; i++ {
		SplitPoints(topology.FullRange, hist, 16)
	}
}
