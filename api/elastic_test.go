package api

import (
	"errors"
	"slices"
	"testing"
)

func TestPoliciesUpdate(t *testing.T) {
	t.Parallel()
	on, off := true, false
	window, depth := "2s", 4
	base := &Policies{AutoScale: &on, SplitWindow: &window}
	got, err := base.Update(&Policies{AutoScale: &off, MaxDAGDepth: &depth}, []string{"split_window"})
	if err != nil {
		t.Fatal(err)
	}
	if *got.AutoScale || *got.MaxDAGDepth != 4 || got.SplitWindow != nil {
		t.Errorf("update: %v", got)
	}
	if !*base.AutoScale || base.SplitWindow == nil {
		t.Errorf("Update modified its receiver: %v", base)
	}
	var none *Policies
	if got, err := none.Update(nil, nil); err != nil || !got.Empty() {
		t.Errorf("nil update: %v, %v", got, err)
	}
	if _, err := base.Update(nil, []string{"split_windows"}); !errors.Is(err, ErrInvalidPolicy) {
		t.Errorf("unknown key: %v", err)
	}
}

func TestPolicyKeys(t *testing.T) {
	t.Parallel()
	keys := PolicyKeys()
	for _, k := range []string{"auto_scale", "split_msg_rate_in", "merge_byte_rate_out", "evaluation_interval",
		"split_vs_rebucket_msg_rate", "retention", "max_dag_depth", "entry_bucket_budget"} {
		if !slices.Contains(keys, k) {
			t.Errorf("PolicyKeys lacks %q: %v", k, keys)
		}
	}
	if !slices.IsSorted(keys) {
		t.Errorf("not sorted: %v", keys)
	}
}
