package actors

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/braidmq/braid/scaling"
	"github.com/braidmq/braid/topology"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

func TestScalerLogsEachHotKeyOnce(t *testing.T) {
	var logs bytes.Buffer
	reg := prometheus.NewRegistry()
	mgr := &Manager{log: slog.New(slog.NewTextHandler(&logs, nil)), m: newMetrics(reg)}
	s := newTestScaler(&Topic{mgr: mgr, uri: "topic://a/b/c"})
	hot := func(seg topology.SegmentID, key uint64) (scaling.Decision, scaling.Load) {
		return scaling.Decision{Suppressed: []scaling.Suppression{{Kind: scaling.Split, Segment: seg, Reason: scaling.SuppressedHotKey}}},
			scaling.Load{Segments: map[topology.SegmentID]scaling.SegmentLoad{seg: {HotKey: key, HotKeyShare: 0.9}}}
	}
	for range 3 {
		s.noteSuppressed(hot(4, 0xabc))
	}
	if n := strings.Count(logs.String(), "hot key"); n != 1 {
		t.Fatalf("a hot key held for 3 evaluations was logged %d times:\n%s", n, logs.String())
	}
	s.noteSuppressed(hot(4, 0xdef)) // another key takes over
	s.noteSuppressed(scaling.Decision{}, scaling.Load{})
	s.noteSuppressed(hot(4, 0xdef)) // hot again after cooling off
	if n := strings.Count(logs.String(), "hot key"); n != 3 {
		t.Fatalf("logged %d times, want 3 (first key, second key, second key again after it cooled):\n%s", n, logs.String())
	}
	var m dto.Metric
	if err := mgr.m.suppressed.WithLabelValues("topic://a/b/c", "split", "hot_key").Write(&m); err != nil {
		t.Fatal(err)
	}
	if got := m.GetCounter().GetValue(); got != 5 {
		t.Fatalf("suppressed hot_key counted %v times, want 5 (once per evaluation)", got)
	}
}

// newTestScaler returns a scaler that is not running, for tests.
func newTestScaler(t *Topic) *scaler {
	return &scaler{t: t, tracker: scaling.NewTracker(), hotKeys: map[topology.SegmentID]uint64{},
		segSeries: map[topology.SegmentID]bool{}, subSeries: map[string]bool{}}
}
