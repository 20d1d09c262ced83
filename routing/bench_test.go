package routing

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"
)

// equalSpans tiles the key space with n spans of equal width, 4 buckets each.
func equalSpans(n int) []Span {
	width := MaxHash / uint64(n)
	spans := make([]Span, n)
	for i := range spans {
		lo := uint64(i) * width
		hi := lo + width - 1
		if i == n-1 {
			hi = MaxHash
		}
		spans[i] = Span{Lo: lo, Hi: hi, Segment: uint64(i), Buckets: 4}
	}
	return spans
}

// randomHashes are precomputed so the benchmark times the search alone; the
// count is a power of two so the index is a mask, and large enough that the
// searches do not repeat a short, branch-predictable pattern.
func randomHashes() []uint64 {
	rng := rand.New(rand.NewPCG(1, 2))
	hashes := make([]uint64, 1<<16)
	for i := range hashes {
		hashes[i] = rng.Uint64()
	}
	return hashes
}

var benchSpanCounts = []int{1, 64, 4096}

func BenchmarkLookup(b *testing.B) {
	hashes := randomHashes()
	mask := len(hashes) - 1
	for _, n := range benchSpanCounts {
		table, err := NewTable(equalSpans(n))
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("spans=%d", n), func(b *testing.B) {
			var sink uint64
			i := 0
			for b.Loop() {
				sink += table.Lookup(hashes[i&mask]).Segment
				i++
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "lookups/s")
			_ = sink
		})
	}
}

// BenchmarkLookupSortSearch is the baseline the hand-rolled search in
// Table.Lookup is measured against: sort.Search over the same upper bounds.
func BenchmarkLookupSortSearch(b *testing.B) {
	hashes := randomHashes()
	mask := len(hashes) - 1
	for _, n := range benchSpanCounts {
		table, err := NewTable(equalSpans(n))
		if err != nil {
			b.Fatal(err)
		}
		his := table.his
		b.Run(fmt.Sprintf("spans=%d", n), func(b *testing.B) {
			var sink uint64
			i := 0
			for b.Loop() {
				h := hashes[i&mask]
				sink += table.spans[sort.Search(len(his), func(j int) bool { return his[j] >= h })].Segment
				i++
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "lookups/s")
			_ = sink
		})
	}
}

func BenchmarkRoute(b *testing.B) {
	rng := rand.New(rand.NewPCG(3, 4))
	keys := make([][]byte, 1<<16)
	for i := range keys {
		keys[i] = make([]byte, 16)
		for j := range keys[i] {
			keys[i][j] = byte(rng.Uint32())
		}
	}
	mask := len(keys) - 1
	for _, n := range benchSpanCounts {
		table, err := NewTable(equalSpans(n))
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("spans=%d", n), func(b *testing.B) {
			b.SetBytes(16)
			var sink uint64
			i := 0
			for b.Loop() {
				segment, bucket, _ := table.Route(keys[i&mask])
				sink += segment + uint64(bucket)
				i++
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "routes/s")
			_ = sink
		})
	}
}

func BenchmarkRoundRobin(b *testing.B) {
	table, err := NewTable(equalSpans(64))
	if err != nil {
		b.Fatal(err)
	}
	var rr RoundRobin
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			rr.Next(table)
		}
	})
}

func BenchmarkParseTopic(b *testing.B) {
	for b.Loop() {
		if _, err := ParseTopic("topic://acme/orders/payments"); err != nil {
			b.Fatal(err)
		}
	}
}
