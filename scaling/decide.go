package scaling

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/braidmq/braid/topology"
)

// Kind is what a Decision does.
type Kind string

// The kinds of decision.
const (
	None     Kind = "none"
	Split    Kind = "split"
	Merge    Kind = "merge"
	Rebucket Kind = "rebucket"
)

// Reason says why a decision was made or suppressed. Reasons are metric
// label values: lower case, stable.
type Reason string

// Why a change is made.
const (
	ReasonMsgRateIn   Reason = "msg_rate_in"
	ReasonByteRateIn  Reason = "byte_rate_in"
	ReasonMsgRateOut  Reason = "msg_rate_out"
	ReasonByteRateOut Reason = "byte_rate_out"
	ReasonConsumers   Reason = "consumers"    // more consumers than units
	ReasonMinSegments Reason = "min_segments" // fewer segments than the policy's minimum
	ReasonIdle        Reason = "idle"         // two neighbours under the merge thresholds
	ReasonManual      Reason = "manual"       // an admin request
	ReasonRetention   Reason = "retention"    // a drained sealed segment past retention
)

// Why a change is held back (Suppression.Reason).
const (
	SuppressedCooldown    Reason = "cooldown"
	SuppressedMaxSegments Reason = "max_segments"
	SuppressedMinSegments Reason = "min_segments"
	SuppressedMaxDepth    Reason = "max_depth"
	SuppressedHotKey      Reason = "hot_key"
	SuppressedConsumers   Reason = "consumers"   // a merge would leave consumers idle
	SuppressedMaxBuckets  Reason = "max_buckets" // a rebucket cannot add buckets
	SuppressedSplitLoad   Reason = "split_load"  // merged, the pair would be over half a split threshold
	SuppressedNarrow      Reason = "narrow"      // the range is a single hash
)

// Decision is the outcome of Decide.
type Decision struct {
	Kind Kind
	// Segments are the segments to seal: one for Split and Rebucket, two
	// adjacent ones (by range) for Merge.
	Segments []topology.SegmentID
	// At are the split points: the first hash of every child but the first.
	At []uint64
	// Buckets is the entry-bucket count of every successor.
	Buckets int
	Reason  Reason
	// Detail explains the decision to a person (logs).
	Detail string
	// Suppressed lists the changes the load called for that a rule held
	// back, whatever the decision.
	Suppressed []Suppression
}

// Suppression is one change held back by a rule.
type Suppression struct {
	Kind    Kind
	Segment topology.SegmentID
	Reason  Reason
	Detail  string
}

// SubscriptionLoad is what Decide needs to know of one subscription.
type SubscriptionLoad struct {
	Name      string
	Consumers int
}

// Load is the measured state of a topic at one evaluation.
type Load struct {
	// Segments holds the tracked load of active segments; a segment
	// missing here is idle and neither hot nor cold yet.
	Segments      map[topology.SegmentID]SegmentLoad
	Subscriptions []SubscriptionLoad
}

// History is what Decide needs to know of the past.
type History struct {
	// Created holds when each segment was created; its cooldowns run from
	// there. A missing segment is older than any cooldown.
	Created map[topology.SegmentID]time.Time
}

// Tuning constants of Decide (see the package doc).
const (
	// splitFill is the share of a split threshold each piece of a load
	// split is sized to carry.
	splitFill = 0.6
	// mergeHeadroom is the share of every split threshold a merged pair
	// may carry at most.
	mergeHeadroom = 0.5
)

// Decide returns the one change a topic's layout should undergo now, or a
// Decision of Kind None. It never returns a change that takes the active
// segments above p.MaxSegments or below p.MinSegments, or a segment deeper
// than p.MaxDAGDepth, or that touches a segment younger than its cooldown.
func Decide(l topology.Layout, load Load, p Policy, h History, now time.Time) Decision {
	if !p.AutoScale {
		return Decision{Kind: None}
	}
	v := newView(l, load, p, h, now)
	steps := []func() (Decision, bool){v.splitForLoad, v.scaleForConsumers, v.splitForMinSegments, v.merge}
	for _, step := range steps {
		if d, ok := step(); ok {
			d.Suppressed = v.suppressed
			return d
		}
	}
	return Decision{Kind: None, Suppressed: v.suppressed}
}

// view is one evaluation's working state.
type view struct {
	l          topology.Layout
	load       Load
	p          Policy
	h          History
	now        time.Time
	active     []topology.Segment // sorted by range
	depth      map[topology.SegmentID]int
	units      int // entry buckets of the active segments
	consumers  int // the most consumers of one subscription
	suppressed []Suppression
}

func newView(l topology.Layout, load Load, p Policy, h History, now time.Time) *view {
	v := &view{l: l, load: load, p: p, h: h, now: now, active: l.Active(), depth: LiveDepths(l)}
	for _, s := range v.active {
		v.units += s.Buckets
	}
	for _, s := range load.Subscriptions {
		v.consumers = max(v.consumers, s.Consumers)
	}
	return v
}

func (v *view) suppress(k Kind, id topology.SegmentID, r Reason, format string, args ...any) {
	v.suppressed = append(v.suppressed, Suppression{Kind: k, Segment: id, Reason: r, Detail: fmt.Sprintf(format, args...)})
}

// age is how long ago s was created.
func (v *view) age(id topology.SegmentID) time.Duration {
	created, ok := v.h.Created[id]
	if !ok {
		return time.Duration(1<<63 - 1)
	}
	return v.now.Sub(created)
}

// budgetShare is each segment's share of the entry-bucket budget when the
// topic has n active segments: at least one.
func (v *view) budgetShare(n int) int { return max(1, v.p.EntryBucketBudget/n) }

// canSucceed checks what every change of s must respect: its cooldown and
// the depth of its successors. It records the suppression when not.
func (v *view) canSucceed(k Kind, s topology.Segment, cooldown time.Duration) bool {
	if age := v.age(s.ID); age < cooldown {
		v.suppress(k, s.ID, SuppressedCooldown, "segment %d is %s old, cooldown %s", s.ID, age.Round(time.Millisecond), cooldown)
		return false
	}
	if d := v.depth[s.ID] + 1; d > v.p.MaxDAGDepth {
		v.suppress(k, s.ID, SuppressedMaxDepth, "successors of segment %d would have depth %d, max %d", s.ID, d, v.p.MaxDAGDepth)
		return false
	}
	return true
}

// room is how many more active segments the topic may have.
func (v *view) room() int { return v.p.MaxSegments - len(v.active) }

// splitForLoad splits the most overloaded segment hot for the split window.
func (v *view) splitForLoad() (Decision, bool) {
	type candidate struct {
		seg    topology.Segment
		load   SegmentLoad
		over   float64
		reason Reason
	}
	var hot []candidate
	for _, s := range v.active {
		w, ok := v.load.Segments[s.ID]
		if !ok || w.HotSince.IsZero() || v.now.Sub(w.HotSince) < v.p.SplitWindow {
			continue
		}
		if over, reason := overload(w.Short, v.p.Split); over > 1 {
			hot = append(hot, candidate{s, w, over, reason})
		}
	}
	slices.SortStableFunc(hot, func(a, b candidate) int { return cmp.Compare(b.over, a.over) })
	for _, c := range hot {
		s, w := c.seg, c.load
		if w.HotKeyShare >= HotKeyShare {
			rest, _ := overload(w.Short.Scale(1-w.HotKeyShare), v.p.Split)
			if rest <= 1 {
				v.suppress(Split, s.ID, SuppressedHotKey, "key hash %s carries %.0f%% of segment %d: splitting cannot divide one key",
					topology.FormatHash(w.HotKey), 100*w.HotKeyShare, s.ID)
				continue
			}
		}
		if v.room() < 1 {
			v.suppress(Split, s.ID, SuppressedMaxSegments, "segment %d is %.1fx over %s but the topic has %d segments, max %d",
				s.ID, c.over, c.reason, len(v.active), v.p.MaxSegments)
			continue
		}
		if !v.canSucceed(Split, s, v.p.SplitCooldown) {
			continue
		}
		ways := min(max(2, int(math.Ceil(c.over/splitFill))), v.room()+1, topology.MaxSplitWays)
		at := SplitPoints(s.Range, w.Hist, ways)
		if len(at) == 0 {
			v.suppress(Split, s.ID, SuppressedNarrow, "segment %d covers one hash", s.ID)
			continue
		}
		pieces := len(at) + 1
		buckets := max(v.budgetShare(len(v.active)+pieces-1), (s.Buckets+pieces-1)/pieces)
		return Decision{Kind: Split, Segments: []topology.SegmentID{s.ID}, At: at, Buckets: buckets, Reason: c.reason,
			Detail: fmt.Sprintf("segment %d is %.1fx over its %s threshold for %s: split in %d", s.ID, c.over, c.reason,
				v.now.Sub(w.HotSince).Round(time.Millisecond), pieces)}, true
	}
	return Decision{}, false
}

// scaleForConsumers gives a subscription with more consumers than units
// enough units: by splitting the busiest segment when it is busy enough and
// the topic has room, by rebucketing it otherwise.
func (v *view) scaleForConsumers() (Decision, bool) {
	if v.consumers <= v.units {
		return Decision{}, false
	}
	deficit := v.consumers - v.units
	busiest, rate := v.active[0], -1.0
	for _, s := range v.active {
		if r := v.load.Segments[s.ID].Short.MsgIn; r > rate {
			busiest, rate = s, r
		}
	}
	s := busiest
	if rate >= v.p.SplitVsRebucketMsgRate && v.room() >= 1 {
		if !v.canSucceed(Split, s, v.p.SplitCooldown) {
			return Decision{}, false
		}
		ways := min(1+(deficit+s.Buckets-1)/s.Buckets, v.room()+1, topology.MaxSplitWays)
		at := SplitPoints(s.Range, v.load.Segments[s.ID].Hist, ways)
		if len(at) == 0 {
			v.suppress(Split, s.ID, SuppressedNarrow, "segment %d covers one hash", s.ID)
			return Decision{}, false
		}
		return Decision{Kind: Split, Segments: []topology.SegmentID{s.ID}, At: at, Buckets: s.Buckets, Reason: ReasonConsumers,
			Detail: fmt.Sprintf("%d consumers for %d units; segment %d takes %.0f msg/s: split in %d", v.consumers, v.units, s.ID, rate, len(at)+1)}, true
	}
	if rate >= v.p.SplitVsRebucketMsgRate {
		v.suppress(Split, s.ID, SuppressedMaxSegments, "%d consumers for %d units; the topic has %d segments, max %d: rebucketing instead",
			v.consumers, v.units, len(v.active), v.p.MaxSegments)
	}
	buckets := min(s.Buckets+deficit, topology.MaxBuckets)
	if buckets <= s.Buckets {
		v.suppress(Rebucket, s.ID, SuppressedMaxBuckets, "segment %d already has %d buckets", s.ID, s.Buckets)
		return Decision{}, false
	}
	if !v.canSucceed(Rebucket, s, v.p.RebucketCooldown) {
		return Decision{}, false
	}
	return Decision{Kind: Rebucket, Segments: []topology.SegmentID{s.ID}, Buckets: buckets, Reason: ReasonConsumers,
		Detail: fmt.Sprintf("%d consumers for %d units; segment %d takes %.0f msg/s: rebucket from %d to %d", v.consumers, v.units, s.ID, max(rate, 0), s.Buckets, buckets)}, true
}

// splitForMinSegments splits the widest segment while the topic has fewer
// segments than its minimum.
func (v *view) splitForMinSegments() (Decision, bool) {
	missing := v.p.MinSegments - len(v.active)
	if missing <= 0 {
		return Decision{}, false
	}
	widest := v.active[0]
	for _, s := range v.active {
		if s.Range.Hi-s.Range.Lo > widest.Range.Hi-widest.Range.Lo {
			widest = s
		}
	}
	if !v.canSucceed(Split, widest, v.p.SplitCooldown) {
		return Decision{}, false
	}
	at := evenPoints(widest.Range, min(missing+1, topology.MaxSplitWays))
	if len(at) == 0 {
		v.suppress(Split, widest.ID, SuppressedNarrow, "segment %d covers one hash", widest.ID)
		return Decision{}, false
	}
	pieces := len(at) + 1
	buckets := max(v.budgetShare(len(v.active)+pieces-1), (widest.Buckets+pieces-1)/pieces)
	return Decision{Kind: Split, Segments: []topology.SegmentID{widest.ID}, At: at, Buckets: buckets, Reason: ReasonMinSegments,
		Detail: fmt.Sprintf("%d segments, min %d: split segment %d in %d", len(v.active), v.p.MinSegments, widest.ID, pieces)}, true
}

// merge merges the adjacent pair, both cold for the merge window, that
// carries the least.
func (v *view) merge() (Decision, bool) {
	var best Decision
	bestLoad := -1.0
	for i := 0; i+1 < len(v.active); i++ {
		a, b := v.active[i], v.active[i+1]
		wa, okA := v.load.Segments[a.ID]
		wb, okB := v.load.Segments[b.ID]
		if !okA || !okB || !v.coldFor(wa) || !v.coldFor(wb) {
			continue
		}
		if len(v.active) <= v.p.MinSegments {
			v.suppress(Merge, a.ID, SuppressedMinSegments, "segments %d and %d are cold but the topic is at its minimum of %d", a.ID, b.ID, v.p.MinSegments)
			return Decision{}, false
		}
		together := wa.Short.Max(wa.Long).Add(wb.Short.Max(wb.Long))
		if over, reason := overload(together, v.p.Split); over > mergeHeadroom {
			v.suppress(Merge, a.ID, SuppressedSplitLoad, "segments %d and %d together are at %.0f%% of the split %s threshold", a.ID, b.ID, 100*over, reason)
			continue
		}
		buckets := max(a.Buckets, b.Buckets, v.budgetShare(len(v.active)-1))
		if units := v.units - a.Buckets - b.Buckets + buckets; units < v.consumers {
			v.suppress(Merge, a.ID, SuppressedConsumers, "merging %d and %d would leave %d units for %d consumers", a.ID, b.ID, units, v.consumers)
			continue
		}
		if !v.canSucceed(Merge, a, v.p.MergeCooldown) || !v.canSucceed(Merge, b, v.p.MergeCooldown) {
			continue
		}
		if rate := together.MsgIn + together.MsgOut; bestLoad < 0 || rate < bestLoad {
			bestLoad = rate
			best = Decision{Kind: Merge, Segments: []topology.SegmentID{a.ID, b.ID}, Buckets: buckets, Reason: ReasonIdle,
				Detail: fmt.Sprintf("segments %d and %d are under the merge thresholds (%.0f msg/s in together)", a.ID, b.ID, together.MsgIn)}
		}
	}
	return best, bestLoad >= 0
}

// coldFor reports whether w has been cold for the merge window.
func (v *view) coldFor(w SegmentLoad) bool {
	return !w.ColdSince.IsZero() && v.now.Sub(w.ColdSince) >= v.p.MergeWindow
}

// LiveDepths returns every segment's live depth: 0 for a segment without
// parents that retention has not deleted, else one more than its deepest
// such parent. A deleted parent cuts the chain: it holds nothing to order.
func LiveDepths(l topology.Layout) map[topology.SegmentID]int {
	depth := make(map[topology.SegmentID]int, len(l.Segments))
	for _, s := range l.Segments { // parents come first
		d := 0
		for _, pid := range s.Parents {
			if p, ok := l.Segment(pid); ok && p.State != topology.StateDeleted {
				d = max(d, depth[pid]+1)
			}
		}
		depth[s.ID] = d
	}
	return depth
}

// Op is the layout operation a decision asks for, as the topic's
// controller takes it; the zero Op for a decision to do nothing.
func (d Decision) Op() topology.Op {
	kind := map[Kind]topology.OpKind{Split: topology.OpSplit, Merge: topology.OpMerge, Rebucket: topology.OpRebucket}[d.Kind]
	if kind == "" {
		return topology.Op{}
	}
	return topology.Op{Kind: kind, Segments: d.Segments, At: d.At, Buckets: d.Buckets}
}

// Apply computes the layout a decision leads to.
func Apply(l topology.Layout, d Decision) (topology.Layout, error) {
	op := d.Op()
	if op.Kind == "" {
		return l, fmt.Errorf("braid/scaling: nothing to apply for a %s decision", d.Kind)
	}
	return l.Apply(op)
}

// quietRate is the rate (per second) below which a segment's load is taken
// as none: moving averages of a stopped load decay towards zero but do not
// reach it.
const quietRate = 1e-3

// Quiet reports whether no segment carries any load (every rate, short and
// long, below quietRate): a topic whose decision then was None keeps it
// until something moves or time alone changes it (a cooldown, retention).
func (l Load) Quiet() bool {
	for _, s := range l.Segments {
		for _, r := range []Rates{s.Short, s.Long} {
			if r.MsgIn >= quietRate || r.MsgOut >= quietRate || r.ByteIn >= quietRate || r.ByteOut >= quietRate {
				return false
			}
		}
	}
	return true
}
