package main

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// A server whose live heap is small collects very often under load: at
// Go's default GOGC of 100, a node holding 12 MiB of live heap and
// allocating 150 MiB/s (single-message produce, most of it the embedded
// NATS server's) ran 30 collections a second, a tenth to a fifth of its
// CPU. The heap floor raises GOGC while the live heap is small, so that a
// collection starts once the heap reaches about the floor rather than
// twice the live heap; from half the floor up, GOGC is the default again.
// The cost is memory: the heap grows to about the floor before it is
// collected (never more than twice the live heap past half of it). With
// the default 64 MiB, that node ran 3 collections a second, its CPU per
// message 0.82-0.92x at 64 to 4096 requests in flight (medians of
// alternating runs), its resident memory 107 MB instead of 50 MB.

// heapFloorMaxGOGC bounds the GOGC the floor sets (a nearly empty heap).
const heapFloorMaxGOGC = 1000

// startHeapFloor keeps the heap's collection target at about floor bytes
// or twice the live heap, the larger, by setting GOGC after each
// collection. It does nothing when floor is 0 or the GOGC environment
// variable is set (the operator chose).
// Only the first call of a process counts.
func startHeapFloor(floor uint64) {
	if floor == 0 || os.Getenv("GOGC") != "" {
		return
	}
	heapFloorOnce.Do(func() {
		h := &heapFloor{floor: floor, percent: 100,
			sample: []metrics.Sample{{Name: "/gc/heap/live:bytes"}}}
		h.adjust()
		h.arm()
	})
}

var heapFloorOnce sync.Once

type heapFloor struct {
	floor   uint64
	percent int // the GOGC set last
	sample  []metrics.Sample
}

// arm has adjust run after the next collection: the finalizer of an
// object nothing refers to runs once a collection has found it garbage.
func (h *heapFloor) arm() {
	runtime.SetFinalizer(&gcSentinel{}, func(*gcSentinel) {
		h.adjust()
		h.arm()
	})
}

// gcSentinel is the object whose finalizer tells of a collection; its
// pointer keeps it out of the tiny allocator, where a finalizer may not
// run.
type gcSentinel struct{ _ *byte }

// adjust sets GOGC for the live heap the last collection left.
func (h *heapFloor) adjust() {
	metrics.Read(h.sample)
	if h.sample[0].Value.Kind() != metrics.KindUint64 {
		return
	}
	p := floorPercent(h.floor, h.sample[0].Value.Uint64())
	// Small changes are not worth the heap lock SetGCPercent takes.
	if d := p - h.percent; d > h.percent/8 || -d > h.percent/8 {
		debug.SetGCPercent(p)
		h.percent = p
	}
}

// floorPercent is the GOGC that puts the collection target of a heap
// with live bytes alive at floor: at least 100, at most heapFloorMaxGOGC.
func floorPercent(floor, live uint64) int {
	if live == 0 || 2*live >= floor {
		return 100
	}
	return int(min(floor*100/live-100, heapFloorMaxGOGC))
}
