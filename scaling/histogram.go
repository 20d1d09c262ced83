package scaling

import (
	"math"
	"math/bits"

	"github.com/braidmq/braid/topology"
)

// Bins is the number of sub-ranges of a segment's key-hash histogram.
const Bins = 64

// Histogram counts keyed appends per sub-range of one segment's range: bin i
// covers [Lo + i*w, Lo + (i+1)*w - 1] with w = (Hi-Lo)/Bins + 1, the last
// bin possibly shorter (and, for ranges narrower than Bins hashes, the
// high bins empty).
type Histogram [Bins]uint64

// binWidth is w above; it is at least 1 and never overflows.
func binWidth(r topology.Range) uint64 { return (r.Hi-r.Lo)/Bins + 1 }

// Bin returns the bin of hash h, which must lie in r.
func Bin(r topology.Range, h uint64) int { return int((h - r.Lo) / binWidth(r)) }

// binRange returns the hashes of bin i, and false when the bin is empty
// (past the end of a narrow range).
func binRange(r topology.Range, i int) (topology.Range, bool) {
	w := binWidth(r)
	lo := r.Lo + uint64(i)*w
	if uint64(i)*w > r.Hi-r.Lo {
		return topology.Range{}, false
	}
	hi := r.Hi
	if r.Hi-lo >= w {
		hi = lo + w - 1
	}
	return topology.Range{Lo: lo, Hi: hi}, true
}

// loadHist is a histogram of load rates (a moving average per bin).
type loadHist [Bins]float64

// total is the load of the bins that exist in r (bins past the end of a
// narrow range hold nothing of it).
func (h *loadHist) total(r topology.Range) float64 {
	t := 0.0
	for i, v := range h {
		if _, ok := binRange(r, i); !ok {
			break
		}
		t += v
	}
	return t
}

// skewTolerance is how much more than an equal share one piece of an
// equal-width split may carry before the split follows the load instead.
const skewTolerance = 1.25

// SplitPoints returns where to split r into k pieces: the first hash of
// every piece but the first, strictly increasing, each in (Lo, Hi]. The
// pieces have equal widths (a two-way split is at the midpoint, like
// topology.Split) unless hist, the observed load per bin, says one of them
// would carry more than skewTolerance times an equal share: then the points
// divide the load evenly, assuming load is uniform within a bin. Fewer
// points come back when r is too narrow for k pieces.
func SplitPoints(r topology.Range, hist [Bins]float64, k int) []uint64 {
	if k < 2 {
		return nil
	}
	width := r.Hi - r.Lo // the range holds width+1 hashes
	if uint64(k-1) > width {
		k = int(width) + 1
	}
	if k < 2 {
		return nil
	}
	even := evenPoints(r, k)
	h := loadHist(hist)
	total := h.total(r)
	if total <= 0 || !skewed(r, &h, total, even) {
		return even
	}
	return loadPoints(r, &h, total, k)
}

// evenPoints splits r into k pieces of equal width (within one hash); k = 2
// gives Range.Mid()+1, topology.Split's default.
func evenPoints(r topology.Range, k int) []uint64 {
	if k == 2 {
		return []uint64{r.Mid() + 1}
	}
	width := r.Hi - r.Lo // the range holds width+1 hashes, up to 2^64
	out := make([]uint64, 0, k-1)
	for j := 1; j < k; j++ {
		// floor((width+1) * j / k) in 128 bits: (width+1)*j = width*j + j.
		hi, lo := bits.Mul64(width, uint64(j))
		lo, carry := bits.Add64(lo, uint64(j), 0)
		q, _ := bits.Div64(hi+carry, lo, uint64(k))
		out = append(out, r.Lo+q)
	}
	return sanitize(r, out)
}

// skewed reports whether a piece cut at points would carry more than
// skewTolerance times total/k.
func skewed(r topology.Range, h *loadHist, total float64, points []uint64) bool {
	k := len(points) + 1
	prev := 0.0
	for j := 0; j < k; j++ {
		upTo := total
		if j < len(points) {
			upTo = loadBelow(r, h, points[j])
		}
		if upTo-prev > skewTolerance*total/float64(k) {
			return true
		}
		prev = upTo
	}
	return false
}

// loadBelow estimates the load of the hashes of r below x.
func loadBelow(r topology.Range, h *loadHist, x uint64) float64 {
	sum := 0.0
	for i := range Bins {
		b, ok := binRange(r, i)
		if !ok || x <= b.Lo {
			break
		}
		if x > b.Hi {
			sum += h[i]
			continue
		}
		sum += h[i] * float64(x-b.Lo) / (float64(b.Hi-b.Lo) + 1)
	}
	return sum
}

// loadPoints returns the hashes below which 1/k, 2/k... of the load lies.
func loadPoints(r topology.Range, h *loadHist, total float64, k int) []uint64 {
	out := make([]uint64, 0, k-1)
	cum := 0.0
	j := 1
	for i := 0; i < Bins && j < k; i++ {
		b, ok := binRange(r, i)
		if !ok {
			break
		}
		for j < k && cum+h[i] >= total*float64(j)/float64(k) && h[i] > 0 {
			frac := (total*float64(j)/float64(k) - cum) / h[i]
			// The point is the first hash past the quantile; at the very
			// end of the bin it is the next bin's first.
			p := b.Lo + min(uint64(math.Round(frac*(float64(b.Hi-b.Lo)+1))), b.Hi-b.Lo)
			if frac >= 1 && b.Hi < r.Hi {
				p = b.Hi + 1
			}
			out = append(out, p)
			j++
		}
		cum += h[i]
	}
	return sanitize(r, out)
}

// sanitize makes points valid split points of r: each in (Lo, Hi] and
// strictly increasing, dropping the ones that cannot be.
func sanitize(r topology.Range, points []uint64) []uint64 {
	out := points[:0]
	for _, p := range points {
		p = max(p, r.Lo+1)
		if len(out) > 0 && p <= out[len(out)-1] {
			if out[len(out)-1] == r.Hi {
				continue
			}
			p = out[len(out)-1] + 1
		}
		if p > r.Hi {
			continue
		}
		out = append(out, p)
	}
	return out
}

// rangeShare estimates the share of a segment's load (range r, histogram h)
// that falls in sub, by the histogram when it has data, by width otherwise.
func rangeShare(r topology.Range, h *loadHist, sub topology.Range) float64 {
	lo, hi := max(r.Lo, sub.Lo), min(r.Hi, sub.Hi)
	if lo > hi {
		return 0
	}
	total := h.total(r)
	if total <= 0 {
		return (float64(hi-lo) + 1) / (float64(r.Hi-r.Lo) + 1)
	}
	above := total
	if hi < r.Hi {
		above = loadBelow(r, h, hi+1)
	}
	return (above - loadBelow(r, h, lo)) / total
}
