package scaling

import (
	"math"
	"time"

	"github.com/braidmq/braid/api"
)

// Rates are msg/s and bytes/s in (appended) and out (read by subscribers).
// As thresholds, a zero rate disables its dimension for splits.
type Rates struct {
	MsgIn, ByteIn, MsgOut, ByteOut float64
}

// Add returns r + o.
func (r Rates) Add(o Rates) Rates {
	return Rates{r.MsgIn + o.MsgIn, r.ByteIn + o.ByteIn, r.MsgOut + o.MsgOut, r.ByteOut + o.ByteOut}
}

// Scale returns r with every rate multiplied by f.
func (r Rates) Scale(f float64) Rates {
	return Rates{r.MsgIn * f, r.ByteIn * f, r.MsgOut * f, r.ByteOut * f}
}

// Max returns the larger of r and o in every dimension.
func (r Rates) Max(o Rates) Rates {
	return Rates{max(r.MsgIn, o.MsgIn), max(r.ByteIn, o.ByteIn), max(r.MsgOut, o.MsgOut), max(r.ByteOut, o.ByteOut)}
}

// dims lists the four dimensions with their reason names.
func (r Rates) dims() [4]float64 { return [4]float64{r.MsgIn, r.ByteIn, r.MsgOut, r.ByteOut} }

var dimReasons = [4]Reason{ReasonMsgRateIn, ReasonByteRateIn, ReasonMsgRateOut, ReasonByteRateOut}

// Policy is the resolved scaling policy of one topic. Every field is set.
type Policy struct {
	AutoScale bool
	// Split and Merge are the thresholds. A segment is hot while a rate is
	// above its split threshold (0 disables the dimension), cold while
	// every rate is at or below its merge threshold.
	Split, Merge Rates
	// EvaluationInterval is how often the controller measures and decides.
	EvaluationInterval time.Duration
	// SplitWindow is how long a segment must stay hot before it splits;
	// MergeWindow how long two neighbours must stay cold before they merge.
	SplitWindow, MergeWindow time.Duration
	// Cooldowns run from a segment's creation: it is not split, merged or
	// rebucketed before its cooldown has passed.
	SplitCooldown, MergeCooldown, RebucketCooldown time.Duration
	MinSegments, MaxSegments                       int
	// MaxDAGDepth bounds the live depth of every new segment.
	MaxDAGDepth int
	// EntryBucketBudget is the number of entry buckets a topic aims at,
	// spread over its active segments, at least one each.
	EntryBucketBudget int
	// SplitVsRebucketMsgRate: when consumers outnumber units, the busiest
	// segment splits if it takes at least this many msg/s, else rebuckets.
	SplitVsRebucketMsgRate float64
	// Retention is how long a sealed segment is kept after its seal once
	// every subscription has drained it, and how long a closed file of any
	// log is kept after its newest record; negative keeps them forever.
	Retention time.Duration
	// SegmentBytes and SegmentMs are the size and the age (ms) past which a
	// log's open file rolls (-1: never); RetentionBytes bounds the bytes a
	// topic keeps on disk (-1: no bound). See the storage worker.
	SegmentBytes, SegmentMs, RetentionBytes int64
	// Offload copies closed files to the remote tier once their newest
	// record is OffloadAfter old; LocalRetentionMs and LocalRetentionBytes
	// bound the local copies of offloaded files (-2: as Retention and
	// RetentionBytes; -1: no bound). See the storage worker.
	Offload                               bool
	OffloadAfter                          time.Duration
	LocalRetentionMs, LocalRetentionBytes int64
	// StorageTick is how often the storage worker visits the topic's logs
	// (a namespace policy; 0: the broker's tick).
	StorageTick time.Duration
	// Compaction: CompactionThresholdBytes written since the last
	// compaction start one (0: only when asked); CompactionRetainNullKey
	// keeps unkeyed messages in the compacted view; DeleteRetention is how
	// long a tombstone stays in it; CompactionLag how young a message is
	// never compacted away.
	CompactionThresholdBytes int64
	CompactionRetainNullKey  bool
	DeleteRetention          time.Duration
	CompactionLag            time.Duration
}

// LocalRetention is how long the local copy of an offloaded file is kept
// after its newest record (negative: for ever).
func (p Policy) LocalRetention() time.Duration {
	if p.LocalRetentionMs == -2 {
		return p.Retention
	}
	if p.LocalRetentionMs < 0 {
		return -1
	}
	return time.Duration(p.LocalRetentionMs) * time.Millisecond
}

// LocalBytes bounds the bytes a topic keeps on disk (negative: no bound).
func (p Policy) LocalBytes() int64 {
	if p.LocalRetentionBytes == -2 || !p.Offload {
		return p.RetentionBytes
	}
	return p.LocalRetentionBytes
}

// RollBytes is the size past which a log's open file rolls: segment_bytes,
// or, for -1 (never roll by size), the largest int.
func (p Policy) RollBytes() int {
	if p.SegmentBytes < 0 {
		return math.MaxInt
	}
	return int(p.SegmentBytes)
}

// Default is the broker default policy, as documented in docs/configuration.md.
var Default = Policy{
	AutoScale:              true,
	Split:                  Rates{MsgIn: 10_000, ByteIn: 50 << 20, MsgOut: 50_000, ByteOut: 250 << 20},
	Merge:                  Rates{MsgIn: 1_000, ByteIn: 5 << 20, MsgOut: 5_000, ByteOut: 25 << 20},
	EvaluationInterval:     time.Second,
	SplitWindow:            3 * time.Second,
	MergeWindow:            60 * time.Second,
	SplitCooldown:          5 * time.Second,
	MergeCooldown:          60 * time.Second,
	RebucketCooldown:       5 * time.Second,
	MinSegments:            1,
	MaxSegments:            64,
	MaxDAGDepth:            10,
	EntryBucketBudget:      4,
	SplitVsRebucketMsgRate: 1_000,
	Retention:              168 * time.Hour,
	SegmentBytes:           128 << 20,
	SegmentMs:              24 * 3600 * 1000,
	RetentionBytes:         -1,
	LocalRetentionMs:       -2,
	LocalRetentionBytes:    -2,
	DeleteRetention:        24 * time.Hour,
}

// Bounds of the resolved policy that api.Policies.Validate cannot check on
// one level alone.
const (
	MinEvaluationInterval = 10 * time.Millisecond
	MaxEvaluationInterval = time.Hour
)

// Resolve applies levels over base, in order: later levels win, nil levels
// and nil fields are skipped. Call it as Resolve(broker, namespace, topic).
// Each level must have passed api.Policies.Validate. It returns an
// INVALID_POLICY *api.Error when the result is inconsistent: min_segments
// above max_segments, a merge threshold not below its split threshold, or an
// evaluation interval outside [10ms, 1h].
func Resolve(base Policy, levels ...*api.Policies) (Policy, error) {
	p := base
	for _, l := range levels {
		if l != nil {
			p.apply(l)
		}
	}
	return p, p.check()
}

func (p *Policy) apply(l *api.Policies) {
	set(&p.AutoScale, l.AutoScale)
	set(&p.Split.MsgIn, l.SplitMsgRateIn)
	set(&p.Split.ByteIn, l.SplitByteRateIn)
	set(&p.Split.MsgOut, l.SplitMsgRateOut)
	set(&p.Split.ByteOut, l.SplitByteRateOut)
	set(&p.Merge.MsgIn, l.MergeMsgRateIn)
	set(&p.Merge.ByteIn, l.MergeByteRateIn)
	set(&p.Merge.MsgOut, l.MergeMsgRateOut)
	set(&p.Merge.ByteOut, l.MergeByteRateOut)
	setDuration(&p.EvaluationInterval, l.EvaluationInterval)
	setDuration(&p.SplitWindow, l.SplitWindow)
	setDuration(&p.MergeWindow, l.MergeWindow)
	setDuration(&p.SplitCooldown, l.SplitCooldown)
	setDuration(&p.MergeCooldown, l.MergeCooldown)
	setDuration(&p.RebucketCooldown, l.RebucketCooldown)
	setDuration(&p.Retention, l.Retention)
	if v := l.RetentionMs; v != nil {
		p.Retention = time.Duration(*v) * time.Millisecond
		if *v < 0 {
			p.Retention = -1
		}
	}
	set(&p.MinSegments, l.MinSegments)
	set(&p.MaxSegments, l.MaxSegments)
	set(&p.MaxDAGDepth, l.MaxDAGDepth)
	set(&p.EntryBucketBudget, l.EntryBucketBudget)
	set(&p.SplitVsRebucketMsgRate, l.SplitVsRebucketMsgRate)
	set(&p.SegmentBytes, l.SegmentBytes)
	set(&p.SegmentMs, l.SegmentMs)
	set(&p.RetentionBytes, l.RetentionBytes)
	set(&p.Offload, l.Offload)
	setDuration(&p.OffloadAfter, l.OffloadAfter)
	set(&p.LocalRetentionMs, l.LocalRetentionMs)
	set(&p.LocalRetentionBytes, l.LocalRetentionBytes)
	setDuration(&p.StorageTick, l.StorageTick)
	set(&p.CompactionThresholdBytes, l.CompactionThresholdBytes)
	set(&p.CompactionRetainNullKey, l.CompactionRetainNullKey)
	setMs(&p.DeleteRetention, l.DeleteRetentionMs)
	setMs(&p.CompactionLag, l.CompactionLagMs)
}

// setMs sets *dst to v milliseconds when the level sets it.
func setMs(dst *time.Duration, v *int64) {
	if v != nil {
		*dst = time.Duration(*v) * time.Millisecond
	}
}

func (p *Policy) check() error {
	if p.MinSegments > p.MaxSegments {
		return api.Errorf(api.CodeInvalidPolicy, "min_segments %d is above max_segments %d (after resolving topic, namespace and broker defaults)",
			p.MinSegments, p.MaxSegments)
	}
	if p.EvaluationInterval < MinEvaluationInterval || p.EvaluationInterval > MaxEvaluationInterval {
		return api.Errorf(api.CodeInvalidPolicy, "evaluation_interval must be in [%s, %s], got %s",
			MinEvaluationInterval, MaxEvaluationInterval, p.EvaluationInterval)
	}
	names := [4]string{"msg_rate_in", "byte_rate_in", "msg_rate_out", "byte_rate_out"}
	split, merge := p.Split.dims(), p.Merge.dims()
	for i, name := range names {
		if split[i] > 0 && merge[i] >= split[i] {
			return api.Errorf(api.CodeInvalidPolicy,
				"merge_%s %v must be below split_%s %v (after resolving topic, namespace and broker defaults): the gap keeps the layout from flapping",
				name, merge[i], name, split[i])
		}
	}
	if p.SegmentMs > 0 && p.Retention > 0 && time.Duration(p.SegmentMs)*time.Millisecond >= p.Retention {
		return api.Errorf(api.CodeInvalidPolicy,
			"segment_ms %d must be under the retention %s (after resolving topic, namespace and broker defaults): a file must roll before its records expire",
			p.SegmentMs, p.Retention)
	}
	if p.Offload && p.Retention > 0 {
		if p.OffloadAfter >= p.Retention {
			return api.Errorf(api.CodeInvalidPolicy, "offload_after %s must be under the retention %s (after resolving topic, namespace and broker defaults): a file must be offloaded before it expires",
				p.OffloadAfter, p.Retention)
		}
		if local := p.LocalRetention(); local > p.Retention {
			return api.Errorf(api.CodeInvalidPolicy, "local_retention_ms %d must not be above the retention %s (after resolving topic, namespace and broker defaults)",
				p.LocalRetentionMs, p.Retention)
		}
	}
	if p.Offload && p.RetentionBytes >= 0 && p.LocalRetentionBytes > p.RetentionBytes {
		return api.Errorf(api.CodeInvalidPolicy, "local_retention_bytes %d must not be above retention_bytes %d (after resolving topic, namespace and broker defaults)",
			p.LocalRetentionBytes, p.RetentionBytes)
	}
	if p.MinSegments < 1 || p.MaxDAGDepth < 1 || p.EntryBucketBudget < 1 {
		return api.Errorf(api.CodeInvalidPolicy, "min_segments, max_dag_depth and entry_bucket_budget must be at least 1")
	}
	return nil
}

// API returns p in wire form, every field set: what describe shows as the
// effective policy.
func (p Policy) API() api.Policies {
	b := p.AutoScale
	rate := func(v float64) *float64 { return &v }
	dur := func(d time.Duration) *string { s := d.String(); return &s }
	num := func(v int) *int { return &v }
	return api.Policies{
		AutoScale:      &b,
		SplitMsgRateIn: rate(p.Split.MsgIn), SplitByteRateIn: rate(p.Split.ByteIn),
		SplitMsgRateOut: rate(p.Split.MsgOut), SplitByteRateOut: rate(p.Split.ByteOut),
		MergeMsgRateIn: rate(p.Merge.MsgIn), MergeByteRateIn: rate(p.Merge.ByteIn),
		MergeMsgRateOut: rate(p.Merge.MsgOut), MergeByteRateOut: rate(p.Merge.ByteOut),
		EvaluationInterval: dur(p.EvaluationInterval), SplitWindow: dur(p.SplitWindow), MergeWindow: dur(p.MergeWindow),
		SplitCooldown: dur(p.SplitCooldown), MergeCooldown: dur(p.MergeCooldown), RebucketCooldown: dur(p.RebucketCooldown),
		MinSegments: num(p.MinSegments), MaxSegments: num(p.MaxSegments), MaxDAGDepth: num(p.MaxDAGDepth),
		EntryBucketBudget: num(p.EntryBucketBudget), SplitVsRebucketMsgRate: rate(p.SplitVsRebucketMsgRate),
		Retention:    dur(p.Retention),
		SegmentBytes: i64(p.SegmentBytes), SegmentMs: i64(p.SegmentMs), RetentionBytes: i64(p.RetentionBytes),
		Offload: &p.Offload, OffloadAfter: dur(p.OffloadAfter),
		LocalRetentionMs: i64(p.LocalRetentionMs), LocalRetentionBytes: i64(p.LocalRetentionBytes),
		StorageTick:              storageTick(p.StorageTick),
		CompactionThresholdBytes: i64(p.CompactionThresholdBytes), CompactionRetainNullKey: &p.CompactionRetainNullKey,
		DeleteRetentionMs: i64(p.DeleteRetention.Milliseconds()), CompactionLagMs: i64(p.CompactionLag.Milliseconds()),
	}
}

func i64(v int64) *int64 { return &v }

// storageTick is StorageTick in wire form: unset when it is the broker's.
func storageTick(d time.Duration) *string {
	if d <= 0 {
		return nil
	}
	s := d.String()
	return &s
}

// set copies *v to *dst when the level sets it.
func set[T any](dst *T, v *T) {
	if v != nil {
		*dst = *v
	}
}

// setDuration applies a duration string that api.Policies.Validate accepted.
func setDuration(dst *time.Duration, v *string) {
	if v == nil {
		return
	}
	if d, err := time.ParseDuration(*v); err == nil {
		*dst = d
	}
}
