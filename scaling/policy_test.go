package scaling

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/braidmq/braid/api"
)

func policies(t *testing.T, js string) *api.Policies {
	t.Helper()
	var p api.Policies
	dec := json.NewDecoder(strings.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		t.Fatalf("%s: %v", js, err)
	}
	if err := p.Validate(); err != nil {
		t.Fatalf("%s: %v", js, err)
	}
	return &p
}

// The JSON keys of the issue, with their documented defaults, resolve to
// exactly Default.
func TestDefaultMatchesDocumentedKeys(t *testing.T) {
	t.Parallel()
	doc := policies(t, `{ "auto_scale": true, "split_msg_rate_in": 10000, "split_byte_rate_in": 52428800, "split_msg_rate_out": 50000,
		"split_byte_rate_out": 262144000, "merge_msg_rate_in": 1000, "merge_byte_rate_in": 5242880, "merge_msg_rate_out": 5000,
		"merge_byte_rate_out": 26214400, "evaluation_interval": "1s", "split_window": "3s", "merge_window": "60s",
		"split_cooldown": "5s", "merge_cooldown": "60s", "rebucket_cooldown": "5s", "min_segments": 1, "max_segments": 64,
		"max_dag_depth": 10, "entry_bucket_budget": 4, "split_vs_rebucket_msg_rate": 1000, "retention": "168h",
		"segment_bytes": 134217728, "segment_ms": 86400000, "retention_bytes": -1, "offload": false, "offload_after": "0s",
		"local_retention_ms": -2, "local_retention_bytes": -2, "compaction_threshold_bytes": 0, "compaction_retain_null_key": false,
		"delete_retention_ms": 86400000, "compaction_lag_ms": 0 }`)
	zero := Policy{EvaluationInterval: time.Hour, MinSegments: 1, MaxSegments: 1, MaxDAGDepth: 1, EntryBucketBudget: 1}
	got, err := Resolve(zero, doc)
	if err != nil {
		t.Fatal(err)
	}
	if got != Default {
		t.Errorf("documented keys resolve to\n%+v\nwant\n%+v", got, Default)
	}
	if _, err := Resolve(Default); err != nil {
		t.Errorf("Default does not resolve: %v", err)
	}
}

func TestResolveLevels(t *testing.T) {
	t.Parallel()
	ns := policies(t, `{"split_msg_rate_in": 500, "merge_msg_rate_in": 50, "max_segments": 8, "retention": "1h"}`)
	topic := policies(t, `{"split_msg_rate_in": 800, "auto_scale": false, "retention": "-1s"}`)
	p, err := Resolve(Default, ns, topic)
	if err != nil {
		t.Fatal(err)
	}
	if p.Split.MsgIn != 800 || p.Merge.MsgIn != 50 || p.MaxSegments != 8 || p.AutoScale || p.Retention != -time.Second {
		t.Errorf("topic over namespace over default: %+v", p)
	}
	if p.Split.ByteIn != Default.Split.ByteIn || p.MergeWindow != Default.MergeWindow {
		t.Errorf("unset fields must keep the default: %+v", p)
	}
	// nil levels are skipped.
	if q, err := Resolve(Default, nil, nil); err != nil || q != Default {
		t.Errorf("Resolve with nil levels = %+v, %v", q, err)
	}
}

func TestResolveRefusesInconsistentPolicies(t *testing.T) {
	t.Parallel()
	cases := []struct {
		levels []string
		want   string
	}{
		{[]string{`{"min_segments": 8}`, `{"max_segments": 4}`}, "min_segments 8 is above max_segments 4"},
		{[]string{`{"merge_msg_rate_in": 10000}`}, "merge_msg_rate_in 10000 must be below split_msg_rate_in 10000"},
		{[]string{`{"split_byte_rate_out": 100}`}, "merge_byte_rate_out"},
		{[]string{`{"evaluation_interval": "1ms"}`}, "evaluation_interval must be in [10ms, 1h0m0s]"},
		{[]string{`{"evaluation_interval": "0s"}`}, "evaluation_interval"},
	}
	for _, c := range cases {
		var levels []*api.Policies
		for _, js := range c.levels {
			levels = append(levels, policies(t, js))
		}
		_, err := Resolve(Default, levels...)
		if !errors.Is(err, api.ErrInvalidPolicy) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want INVALID_POLICY mentioning %q", c.levels, err, c.want)
		}
	}
	// A disabled split dimension takes any merge threshold.
	if _, err := Resolve(Default, policies(t, `{"split_msg_rate_out": 0, "merge_msg_rate_out": 1e9}`)); err != nil {
		t.Errorf("disabled dimension: %v", err)
	}
}

func TestAPIRoundTrip(t *testing.T) {
	t.Parallel()
	p := Default
	p.AutoScale = false
	p.Split.MsgIn, p.Merge.MsgIn = 123, 45
	p.SplitWindow, p.Retention = 1500*time.Millisecond, -time.Hour
	p.MinSegments, p.MaxSegments = 2, 9
	wire := p.API()
	b, err := json.Marshal(wire)
	if err != nil {
		t.Fatal(err)
	}
	back := policies(t, string(b))
	got, err := Resolve(Default, back)
	if err != nil || got != p {
		t.Errorf("round trip through %s: %+v, %v", b, got, err)
	}
}

// TestSegmentMsUnderRetention: a file must roll before its records
// expire: segment_ms at or above the resolved retention is refused, naming
// both; with retention forever any segment_ms goes.
func TestSegmentMsUnderRetention(t *testing.T) {
	t.Parallel()
	_, err := Resolve(Default, policies(t, `{"retention": "1h"}`), policies(t, `{"segment_ms": 7200000}`))
	if e := api.AsError(err); e == nil || e.Code != api.CodeInvalidPolicy || !strings.Contains(e.Message, "segment_ms") || !strings.Contains(e.Message, "retention") {
		t.Fatalf("segment_ms over retention: %v", err)
	}
	if _, err := Resolve(Default, policies(t, `{"retention": "-1s", "segment_ms": 7200000}`)); err != nil {
		t.Fatalf("retention forever: %v", err)
	}
	if _, err := Resolve(Default, policies(t, `{"retention": "1h", "segment_ms": -1}`)); err != nil {
		t.Fatalf("no roll by age: %v", err)
	}
	for _, bad := range []string{`{"segment_bytes": 100}`, `{"segment_ms": 0}`, `{"retention_bytes": -2}`} {
		var p api.Policies
		if err := json.Unmarshal([]byte(bad), &p); err != nil {
			t.Fatal(err)
		}
		if err := p.Validate(); err == nil {
			t.Fatalf("%s validated", bad)
		}
	}
}

// TestRetentionMsAndTieringPolicies: retention_ms names retention in
// milliseconds at any level (a level sets one or the other); the tier's
// policies resolve and are checked against retention.
func TestRetentionMsAndTieringPolicies(t *testing.T) {
	t.Parallel()
	p, err := Resolve(Default, policies(t, `{"retention": "1h", "segment_ms": 1000}`), policies(t, `{"retention_ms": 5000}`))
	if err != nil || p.Retention != 5*time.Second {
		t.Fatalf("retention_ms over a namespace's retention: %v, %v", p.Retention, err)
	}
	if p, _ := Resolve(Default, policies(t, `{"retention_ms": -1}`)); p.Retention >= 0 {
		t.Fatalf("retention_ms -1: %v", p.Retention)
	}
	if p, _ := Resolve(Default, policies(t, `{"retention_ms": 5000, "segment_ms": 1000}`), policies(t, `{"retention": "2h"}`)); p.Retention != 2*time.Hour {
		t.Fatalf("retention over a namespace's retention_ms: %v", p.Retention)
	}
	for _, bad := range []string{`{"retention_ms": -2}`, `{"retention": "1h", "retention_ms": 1000}`, `{"local_retention_ms": -3}`,
		`{"local_retention_bytes": -3}`, `{"offload_after": "-1s"}`, `{"storage_tick": "0s"}`,
		`{"compaction_threshold_bytes": -1}`, `{"delete_retention_ms": -1}`, `{"compaction_lag_ms": -5}`} {
		var p api.Policies
		if err := json.Unmarshal([]byte(bad), &p); err != nil {
			t.Fatal(err)
		}
		if err := p.Validate(); err == nil {
			t.Fatalf("%s validated", bad)
		}
	}
	set, _ := (&api.Policies{Retention: ptrString("1h")}).Update(policies(t, `{"retention_ms": 1000}`), nil)
	if set.Retention != nil || set.RetentionMs == nil {
		t.Fatalf("retention_ms set over a stored retention: %+v", set)
	}
	for _, c := range []struct{ js, want string }{
		{`{"offload": true, "retention": "1h", "segment_ms": 1000, "offload_after": "2h"}`, "offload_after"},
		{`{"offload": true, "retention": "1h", "segment_ms": 1000, "local_retention_ms": 7200000}`, "local_retention_ms"},
		{`{"offload": true, "retention_bytes": 100, "local_retention_bytes": 200}`, "local_retention_bytes"},
	} {
		_, err := Resolve(Default, policies(t, c.js))
		if e := api.AsError(err); e == nil || e.Code != api.CodeInvalidPolicy || !strings.Contains(e.Message, c.want) {
			t.Fatalf("%s: %v", c.js, err)
		}
	}
	p, err = Resolve(Default, policies(t, `{"offload": true, "retention": "1h", "segment_ms": 1000, "local_retention_ms": 60000}`))
	if err != nil || p.LocalRetention() != time.Minute || p.LocalBytes() != -1 {
		t.Fatalf("tiering: local %v, bytes %d, %v", p.LocalRetention(), p.LocalBytes(), err)
	}
	if p, _ := Resolve(Default, policies(t, `{"offload": true, "retention": "1h", "segment_ms": 1000}`)); p.LocalRetention() != time.Hour {
		t.Fatalf("local_retention_ms -2 is retention: %v", p.LocalRetention())
	}
}

func ptrString(s string) *string { return &s }

// TestRollBytes: segment_bytes is the size a log's file rolls at; -1 never
// rolls by size.
func TestRollBytes(t *testing.T) {
	t.Parallel()
	if got := (Policy{SegmentBytes: 1 << 20}).RollBytes(); got != 1<<20 {
		t.Fatalf("segment_bytes 1 MiB rolls at %d", got)
	}
	if got := (Policy{SegmentBytes: -1}).RollBytes(); got != math.MaxInt {
		t.Fatalf("segment_bytes -1 rolls at %d", got)
	}
}
