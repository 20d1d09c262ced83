package api

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"time"
)

// Policies are per-namespace or per-topic settings. A nil field is not set
// here and resolves from the next level (topic, then namespace, then the
// broker default). Durations are Go duration strings ("1s", "168h").
type Policies struct {
	AutoScale              *bool    `json:"auto_scale,omitempty"`
	SplitMsgRateIn         *float64 `json:"split_msg_rate_in,omitempty"`
	SplitByteRateIn        *float64 `json:"split_byte_rate_in,omitempty"`
	SplitMsgRateOut        *float64 `json:"split_msg_rate_out,omitempty"`
	SplitByteRateOut       *float64 `json:"split_byte_rate_out,omitempty"`
	MergeMsgRateIn         *float64 `json:"merge_msg_rate_in,omitempty"`
	MergeByteRateIn        *float64 `json:"merge_byte_rate_in,omitempty"`
	MergeMsgRateOut        *float64 `json:"merge_msg_rate_out,omitempty"`
	MergeByteRateOut       *float64 `json:"merge_byte_rate_out,omitempty"`
	EvaluationInterval     *string  `json:"evaluation_interval,omitempty"`
	SplitWindow            *string  `json:"split_window,omitempty"`
	MergeWindow            *string  `json:"merge_window,omitempty"`
	SplitCooldown          *string  `json:"split_cooldown,omitempty"`
	MergeCooldown          *string  `json:"merge_cooldown,omitempty"`
	RebucketCooldown       *string  `json:"rebucket_cooldown,omitempty"`
	MinSegments            *int     `json:"min_segments,omitempty"`
	MaxSegments            *int     `json:"max_segments,omitempty"`
	MaxDAGDepth            *int     `json:"max_dag_depth,omitempty"`
	EntryBucketBudget      *int     `json:"entry_bucket_budget,omitempty"`
	SplitVsRebucketMsgRate *float64 `json:"split_vs_rebucket_msg_rate,omitempty"`
	Retention              *string  `json:"retention,omitempty"`
	// RetentionMs is retention in milliseconds (-1: forever), as Kafka
	// names it; a level sets one or the other.
	RetentionMs     *int64  `json:"retention_ms,omitempty"`
	Durability      *string `json:"durability,omitempty"`
	MaxPayloadBytes *int    `json:"max_payload_bytes,omitempty"`
	// ReplicationFactor is how many copies the segments the topic's layout
	// changes create get, on as many nodes (default: the broker's
	// --replication-factor); it may not exceed the cluster's live nodes.
	ReplicationFactor *int `json:"replication_factor,omitempty"`
	// The storage lifecycle of the topic's logs (see the storage worker):
	// the size and the age past which a log's open file rolls to a new one
	// (-1: never), and the bytes a topic keeps on disk before its oldest
	// closed files are removed (-1: no bound). Time retention is
	// retention.
	SegmentBytes   *int64 `json:"segment_bytes,omitempty"`
	SegmentMs      *int64 `json:"segment_ms,omitempty"`
	RetentionBytes *int64 `json:"retention_bytes,omitempty"`
	// The remote tier (after Kafka's KIP-405): with offload, a closed
	// file is copied to the tier once its newest record is offload_after
	// old; the local copy of an offloaded file is kept for
	// local_retention_ms and within local_retention_bytes (-2: as
	// retention and retention_bytes; -1: no bound). retention and
	// retention_bytes bound the tier and the disk together.
	Offload             *bool   `json:"offload,omitempty"`
	OffloadAfter        *string `json:"offload_after,omitempty"`
	LocalRetentionMs    *int64  `json:"local_retention_ms,omitempty"`
	LocalRetentionBytes *int64  `json:"local_retention_bytes,omitempty"`
	// StorageTick is how often the storage worker visits the logs of the
	// namespace's topics (default: the broker's --storage-tick). A
	// namespace policy: a topic cannot set it.
	StorageTick *string `json:"storage_tick,omitempty"`
	// Compaction (see the compactor): the bytes written since the last
	// compaction that start one (0: only when asked), whether unkeyed
	// messages stay in the compacted view, how long a tombstone (a keyed
	// message with an empty payload) stays in it, and how young a message
	// must be never to be compacted away.
	CompactionThresholdBytes *int64 `json:"compaction_threshold_bytes,omitempty"`
	CompactionRetainNullKey  *bool  `json:"compaction_retain_null_key,omitempty"`
	DeleteRetentionMs        *int64 `json:"delete_retention_ms,omitempty"`
	CompactionLagMs          *int64 `json:"compaction_lag_ms,omitempty"`
}

// MinStorageTick bounds storage_tick.
const MinStorageTick = time.Millisecond

// ValidateTopic is Validate for a topic's own policies: storage_tick,
// a namespace policy, is refused.
func (p *Policies) ValidateTopic() error {
	if p != nil && p.StorageTick != nil {
		return Errorf(CodeInvalidPolicy, "storage_tick is set per namespace (or by the broker's --storage-tick), not per topic")
	}
	return p.Validate()
}

// Bounds of the storage policies.
const (
	MinSegmentBytes = 4 << 10
	MaxSegmentBytes = 1 << 40
)

// Validate checks every set field and returns an INVALID_POLICY error naming
// the first bad one.
func (p *Policies) Validate() error {
	if p == nil {
		return nil
	}
	rates := map[string]*float64{
		"split_msg_rate_in": p.SplitMsgRateIn, "split_byte_rate_in": p.SplitByteRateIn,
		"split_msg_rate_out": p.SplitMsgRateOut, "split_byte_rate_out": p.SplitByteRateOut,
		"merge_msg_rate_in": p.MergeMsgRateIn, "merge_byte_rate_in": p.MergeByteRateIn,
		"merge_msg_rate_out": p.MergeMsgRateOut, "merge_byte_rate_out": p.MergeByteRateOut,
		"split_vs_rebucket_msg_rate": p.SplitVsRebucketMsgRate,
	}
	for _, name := range sortedKeys(rates) {
		if v := rates[name]; v != nil && (*v < 0 || *v != *v) {
			return Errorf(CodeInvalidPolicy, "%s must be a rate >= 0, got %v", name, *v)
		}
	}
	durations := map[string]*string{
		"evaluation_interval": p.EvaluationInterval, "split_window": p.SplitWindow,
		"merge_window": p.MergeWindow, "split_cooldown": p.SplitCooldown,
		"merge_cooldown": p.MergeCooldown, "rebucket_cooldown": p.RebucketCooldown,
		"offload_after": p.OffloadAfter, "storage_tick": p.StorageTick,
	}
	for _, name := range sortedKeys(durations) {
		if v := durations[name]; v != nil {
			d, err := time.ParseDuration(*v)
			if err != nil {
				return Errorf(CodeInvalidPolicy, "%s: %q is not a duration (e.g. \"5s\")", name, *v)
			}
			if d < 0 {
				return Errorf(CodeInvalidPolicy, "%s must not be negative, got %s", name, *v)
			}
		}
	}
	if p.Retention != nil {
		if _, err := time.ParseDuration(*p.Retention); err != nil {
			return Errorf(CodeInvalidPolicy, "retention: %q is not a duration (negative keeps forever)", *p.Retention)
		}
	}
	ints := []struct {
		name string
		v    *int
		min  int
		max  int
	}{
		{"min_segments", p.MinSegments, 1, 4096},
		{"max_segments", p.MaxSegments, 1, 4096},
		{"max_dag_depth", p.MaxDAGDepth, 1, 1000},
		{"entry_bucket_budget", p.EntryBucketBudget, 1, 4096},
		{"max_payload_bytes", p.MaxPayloadBytes, 1, 8 << 20},
		{"replication_factor", p.ReplicationFactor, 1, 7},
	}
	for _, f := range ints {
		if f.v != nil && (*f.v < f.min || *f.v > f.max) {
			return Errorf(CodeInvalidPolicy, "%s must be in [%d, %d], got %d", f.name, f.min, f.max, *f.v)
		}
	}
	if p.MinSegments != nil && p.MaxSegments != nil && *p.MinSegments > *p.MaxSegments {
		return Errorf(CodeInvalidPolicy, "min_segments %d is above max_segments %d", *p.MinSegments, *p.MaxSegments)
	}
	if v := p.SegmentBytes; v != nil && *v != -1 && (*v < MinSegmentBytes || *v > MaxSegmentBytes) {
		return Errorf(CodeInvalidPolicy, "segment_bytes must be -1 (never roll by size) or in [%d, %d], got %d", MinSegmentBytes, int64(MaxSegmentBytes), *v)
	}
	if v := p.SegmentMs; v != nil && *v != -1 && *v < 1 {
		return Errorf(CodeInvalidPolicy, "segment_ms must be -1 (never roll by age) or at least 1, got %d", *v)
	}
	if v := p.RetentionBytes; v != nil && *v < -1 {
		return Errorf(CodeInvalidPolicy, "retention_bytes must be -1 (no bound) or at least 0, got %d", *v)
	}
	for _, f := range []struct {
		name string
		v    *int64
	}{{"compaction_threshold_bytes", p.CompactionThresholdBytes}, {"delete_retention_ms", p.DeleteRetentionMs}, {"compaction_lag_ms", p.CompactionLagMs}} {
		if f.v != nil && *f.v < 0 {
			return Errorf(CodeInvalidPolicy, "%s must be at least 0, got %d", f.name, *f.v)
		}
	}
	if v := p.RetentionMs; v != nil && *v < -1 {
		return Errorf(CodeInvalidPolicy, "retention_ms must be -1 (forever) or at least 0, got %d", *v)
	}
	if p.RetentionMs != nil && p.Retention != nil {
		return Errorf(CodeInvalidPolicy, "retention %q and retention_ms %d name the same policy: set one", *p.Retention, *p.RetentionMs)
	}
	if v := p.LocalRetentionMs; v != nil && *v < -2 {
		return Errorf(CodeInvalidPolicy, "local_retention_ms must be -2 (as retention), -1 (no bound) or at least 0, got %d", *v)
	}
	if v := p.LocalRetentionBytes; v != nil && *v < -2 {
		return Errorf(CodeInvalidPolicy, "local_retention_bytes must be -2 (as retention_bytes), -1 (no bound) or at least 0, got %d", *v)
	}
	if p.StorageTick != nil {
		if d, _ := time.ParseDuration(*p.StorageTick); d < MinStorageTick {
			return Errorf(CodeInvalidPolicy, "storage_tick must be at least %s, got %s", MinStorageTick, *p.StorageTick)
		}
	}
	if p.Durability != nil {
		switch *p.Durability {
		case "always", "interval", "none":
		default:
			return Errorf(CodeInvalidPolicy, "durability must be always, interval or none, got %q", *p.Durability)
		}
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	for i := 1; i < len(keys); i++ {
		for j := i; j > 0 && keys[j] < keys[j-1]; j-- {
			keys[j], keys[j-1] = keys[j-1], keys[j]
		}
	}
	return keys
}

// String is for logs.
func (p *Policies) String() string { return fmt.Sprintf("%+v", *p) }

// LogValue logs policies as their JSON (log/slog.LogValuer), the set keys
// only, instead of Go's dump of pointers.
func (p Policies) LogValue() slog.Value {
	b, err := json.Marshal(p)
	if err != nil {
		return slog.StringValue(err.Error())
	}
	return slog.StringValue(string(b))
}
