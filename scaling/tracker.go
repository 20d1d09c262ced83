package scaling

import (
	"math"
	"time"

	"github.com/braidmq/braid/topology"
)

// Sample is what one segment's actors counted since the previous sample.
type Sample struct {
	Elapsed time.Duration
	// MsgsIn and BytesIn were appended; MsgsOut and BytesOut read by
	// subscribers (every subscription's reads count: that is fan-out load).
	MsgsIn, BytesIn, MsgsOut, BytesOut uint64
	// Hist counts the keyed appends per sub-range of the segment.
	Hist Histogram
	// HotKey is the key hash that, of the candidates watched in the
	// segment's buckets, had the most appends; HotKeyHits is exactly how
	// many (0 when nothing was watched).
	HotKey     uint64
	HotKeyHits uint64
	// HotKeyName is the key itself (a copy, at most MaxHotKeyName bytes)
	// when the meter caught it; empty otherwise.
	HotKeyName []byte
}

// MaxHotKeyName bounds the bytes of a hot key a meter keeps.
const MaxHotKeyName = 64

// SegmentLoad is the tracked load of one active segment.
type SegmentLoad struct {
	// Short averages over about one evaluation interval, Long over about a
	// third of the merge window (exponentially weighted moving averages).
	Short, Long Rates
	// HotSince is when Short went above a split threshold, zero while it
	// is not; ColdSince is when Short and Long both went to or below every
	// merge threshold, zero while they are not.
	HotSince, ColdSince time.Time
	// Hist is the msg/s per sub-range (averaged over about a split window).
	Hist [Bins]float64
	// HotKey is the heaviest key hash seen; HotKeyShare the (averaged)
	// share of the segment's msg/s it carries.
	HotKey      uint64
	HotKeyShare float64
	// HotKeyName is the key of HotKey when a meter caught it (see Sample).
	HotKeyName []byte
}

// Hot reports whether l's short rates are above a split threshold of p.
func (l SegmentLoad) Hot(p Policy) bool {
	over, _ := overload(l.Short, p.Split)
	return over > 1
}

// Cold reports whether both of l's averages are at or below every merge
// threshold of p.
func (l SegmentLoad) Cold(p Policy) bool {
	r, m := l.Short.Max(l.Long).dims(), p.Merge.dims()
	for i := range r {
		if r[i] > m[i] {
			return false
		}
	}
	return true
}

// overload returns the largest ratio of a rate to its threshold, over the
// dimensions whose threshold is set, and that dimension's reason.
func overload(r, thresholds Rates) (float64, Reason) {
	rates, limits := r.dims(), thresholds.dims()
	best, reason := 0.0, ReasonMsgRateIn
	for i := range rates {
		if limits[i] > 0 && rates[i]/limits[i] > best {
			best, reason = rates[i]/limits[i], dimReasons[i]
		}
	}
	return best, reason
}

// Tracker keeps the load windows of a topic's active segments between
// evaluations. It is not safe for concurrent use.
type Tracker struct {
	segs map[topology.SegmentID]*tracked
}

type tracked struct {
	SegmentLoad
	primed bool // has seen a sample or inherited averages
}

// NewTracker returns an empty tracker.
func NewTracker() *Tracker { return &Tracker{segs: map[topology.SegmentID]*tracked{}} }

// Observe folds samples, taken at now, into the windows of l's active
// segments and forgets segments no longer active. A segment seen for the
// first time starts from its parents' averages, shared out by the parents'
// histograms, so a split's children are not mistaken for idle ones; a
// segment without a tracked parent starts at its first sample.
func (t *Tracker) Observe(l topology.Layout, samples map[topology.SegmentID]Sample, p Policy, now time.Time) {
	active := l.Active()
	fresh := map[topology.SegmentID]*tracked{}
	for _, s := range active {
		if t.segs[s.ID] == nil {
			fresh[s.ID] = t.seed(l, s)
		}
	}
	for id, w := range fresh {
		t.segs[id] = w
	}
	isActive := make(map[topology.SegmentID]bool, len(active))
	shortTau := p.EvaluationInterval
	longTau := max(p.MergeWindow/3, shortTau)
	histTau := max(p.SplitWindow, shortTau)
	for _, s := range active {
		isActive[s.ID] = true
		w := t.segs[s.ID]
		if smp, ok := samples[s.ID]; ok && smp.Elapsed > 0 {
			w.fold(smp, shortTau, longTau, histTau)
		}
		if !w.primed {
			continue
		}
		switch hot := w.Hot(p); {
		case hot && w.HotSince.IsZero():
			w.HotSince = now
		case !hot:
			w.HotSince = time.Time{}
		}
		switch cold := w.Cold(p); {
		case cold && w.ColdSince.IsZero():
			w.ColdSince = now
		case !cold:
			w.ColdSince = time.Time{}
		}
	}
	for id := range t.segs {
		if !isActive[id] {
			delete(t.segs, id)
		}
	}
}

// seed builds the window of a new segment from its tracked parents.
func (t *Tracker) seed(l topology.Layout, s topology.Segment) *tracked {
	w := &tracked{}
	for _, pid := range s.Parents {
		parent, ok := t.segs[pid]
		if !ok || !parent.primed {
			continue
		}
		ps, _ := l.Segment(pid)
		if len(s.Parents) == 1 && ps.Range == s.Range {
			// A rebucket: the same range, the same load.
			w.SegmentLoad = parent.SegmentLoad
			w.HotSince, w.ColdSince = time.Time{}, time.Time{}
			w.primed = true
			return w
		}
		h := loadHist(parent.Hist)
		share := rangeShare(ps.Range, &h, s.Range)
		w.Short = w.Short.Add(parent.Short.Scale(share))
		w.Long = w.Long.Add(parent.Long.Scale(share))
		w.primed = true
	}
	return w
}

// fold adds one sample to the averages.
func (w *tracked) fold(smp Sample, shortTau, longTau, histTau time.Duration) {
	secs := smp.Elapsed.Seconds()
	rate := Rates{
		MsgIn: float64(smp.MsgsIn) / secs, ByteIn: float64(smp.BytesIn) / secs,
		MsgOut: float64(smp.MsgsOut) / secs, ByteOut: float64(smp.BytesOut) / secs,
	}
	share := 0.0
	if smp.MsgsIn > 0 {
		share = min(float64(smp.HotKeyHits)/float64(smp.MsgsIn), 1)
	}
	if !w.primed {
		w.Short, w.Long, w.HotKeyShare = rate, rate, share
		for i := range w.Hist {
			w.Hist[i] = float64(smp.Hist[i]) / secs
		}
		w.HotKey, w.HotKeyName = smp.HotKey, smp.HotKeyName
		w.primed = true
		return
	}
	as, al, ah := alpha(smp.Elapsed, shortTau), alpha(smp.Elapsed, longTau), alpha(smp.Elapsed, histTau)
	w.Short = w.Short.Add(rate.Add(w.Short.Scale(-1)).Scale(as))
	w.Long = w.Long.Add(rate.Add(w.Long.Scale(-1)).Scale(al))
	for i := range w.Hist {
		w.Hist[i] += ah * (float64(smp.Hist[i])/secs - w.Hist[i])
	}
	w.HotKeyShare += as * (share - w.HotKeyShare)
	if smp.HotKeyHits > 0 {
		if smp.HotKey != w.HotKey || smp.HotKeyName != nil {
			w.HotKeyName = smp.HotKeyName
		}
		w.HotKey = smp.HotKey
	}
}

// alpha is the weight of a sample dt long in an average with time constant tau.
func alpha(dt, tau time.Duration) float64 {
	if tau <= 0 {
		return 1
	}
	return 1 - math.Exp(-dt.Seconds()/tau.Seconds())
}

// Load returns the windows of the tracked segments.
func (t *Tracker) Load() map[topology.SegmentID]SegmentLoad {
	out := make(map[topology.SegmentID]SegmentLoad, len(t.segs))
	for id, w := range t.segs {
		if w.primed {
			out[id] = w.SegmentLoad
		}
	}
	return out
}
