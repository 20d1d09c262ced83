package topology

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"
)

// Layout sizes (segments ever created) the benchmarks run over. 4096 is a
// long-lived, often rescaled topic; the JSON benchmarks stop at 256 to keep
// `make bench` (2000 iterations each) short.
var benchSizes = []int{256, 4096}

var benchLayouts = map[int]Layout{}

// benchLayout returns a layout with a history of about size segments, of
// which 16 to 128 are active, built by random splits and merges.
func benchLayout(b *testing.B, size int) Layout {
	b.Helper()
	if l, ok := benchLayouts[size]; ok {
		return l
	}
	rng := rand.New(rand.NewPCG(1, 2))
	l, err := New(16, 64)
	if err != nil {
		b.Fatal(err)
	}
	for len(l.Segments) < size {
		active := l.Active()
		var next Layout
		if len(active) < 64 || len(active) < 128 && rng.IntN(2) == 0 {
			next, err = l.Split(active[rng.IntN(len(active))].ID, nil)
		} else {
			i := rng.IntN(len(active) - 1)
			next, err = l.Merge(active[i].ID, active[i+1].ID)
		}
		if err == nil {
			l = next
		}
	}
	if err := l.Validate(); err != nil {
		b.Fatal(err)
	}
	benchLayouts[size] = l
	return l
}

func forSizes(b *testing.B, sizes []int, run func(b *testing.B, l Layout)) {
	for _, size := range sizes {
		b.Run(fmt.Sprintf("segments=%d", size), func(b *testing.B) {
			l := benchLayout(b, size)
			b.ReportAllocs()
			b.ResetTimer()
			run(b, l)
		})
	}
}

func BenchmarkSplit(b *testing.B) {
	forSizes(b, benchSizes, func(b *testing.B, l Layout) {
		active := l.Active()
		for i := 0; b.Loop(); i++ {
			if _, err := l.Split(active[i%len(active)].ID, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkReadable(b *testing.B) {
	forSizes(b, benchSizes, func(b *testing.B, l Layout) {
		// A subscription half way: the older half of the history is drained.
		drained := func(id SegmentID) bool { return id < l.NextID/2 }
		for b.Loop() {
			Readable(l, drained)
		}
	})
}

func BenchmarkMayRead(b *testing.B) {
	forSizes(b, benchSizes, func(b *testing.B, l Layout) {
		active := l.Active()
		drained := func(SegmentID) bool { return true }
		for i := 0; b.Loop(); i++ {
			MayRead(l, active[i%len(active)].ID, drained)
		}
	})
}

func BenchmarkValidate(b *testing.B) {
	forSizes(b, benchSizes, func(b *testing.B, l Layout) {
		for b.Loop() {
			if err := l.Validate(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkMarshalJSON(b *testing.B) {
	forSizes(b, benchSizes[:1], func(b *testing.B, l Layout) {
		data, _ := json.Marshal(l)
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			if _, err := json.Marshal(l); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkUnmarshalJSON(b *testing.B) {
	forSizes(b, benchSizes[:1], func(b *testing.B, l Layout) {
		data, _ := json.Marshal(l)
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			var back Layout
			if err := json.Unmarshal(data, &back); err != nil {
				b.Fatal(err)
			}
		}
	})
}
