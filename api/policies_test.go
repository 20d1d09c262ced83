package api

import (
	"log/slog"
	"strings"
	"testing"
)

// Policies log as their JSON, not as Go's dump of pointers.
func TestPoliciesLogValue(t *testing.T) {
	t.Parallel()
	on := true
	var b strings.Builder
	slog.New(slog.NewTextHandler(&b, nil)).Info("changed", "policies", &Policies{AutoScale: &on})
	if !strings.Contains(b.String(), `policies="{\"auto_scale\":true}"`) {
		t.Fatalf("logged %s", b.String())
	}
}
