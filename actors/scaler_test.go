package actors

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/braidmq/braid/api"
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
	if err := mgr.m.suppressed.WithLabelValues(topicLabels("topic://a/b/c", "split", "hot_key")...).Write(&m); err != nil {
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

// TestQuietTopicsSkipEvaluations: a topic with no traffic whose evaluation
// decided nothing skips the next ones (up to maxSkipped in a row), and
// traffic brings the evaluations back at once.
func TestQuietTopicsSkipEvaluations(t *testing.T) {
	m := newTestManager(t)
	topic := createTestTopic(t, m, "topic://t/n/quiet", 1, 2)
	s := newTestScaler(topic)
	now := time.Now()
	tick := func() time.Time { now = now.Add(time.Second); return now }
	s.evaluate(tick())
	if !s.settled {
		t.Fatal("an evaluation of a topic with no traffic that decided nothing did not settle it")
	}
	for i := range maxSkipped {
		if !s.skip(tick()) {
			t.Fatalf("evaluation %d of a quiet, settled topic was not skipped", i+1)
		}
	}
	if s.skip(tick()) {
		t.Fatalf("more than %d evaluations in a row were skipped", maxSkipped)
	}
	s.evaluate(now)
	if !s.skip(tick()) {
		t.Fatal("a quiet topic evaluated again did not skip the next evaluation")
	}
	if r := produceSync(t, topic, api.Record{Key: []byte("k"), Payload: []byte("x")}); r[0].Err() != nil {
		t.Fatal(r[0].Err())
	}
	if s.skip(tick()) {
		t.Fatal("an evaluation after traffic was skipped")
	}
	s.evaluate(now)
	if s.settled {
		t.Fatal("an evaluation that saw traffic settled the topic")
	}

	// A quiet topic above its minimum of segments may merge once a
	// cooldown ends: it is never settled.
	two := newTestScaler(createTestTopic(t, m, "topic://t/n/quiet2", 2, 2))
	two.evaluate(tick())
	if two.settled || two.skip(tick()) {
		t.Fatal("a quiet topic that could still merge skipped its evaluations")
	}
}

// A decayed moving average shows as 0 in the metrics.
func TestRateValue(t *testing.T) {
	for in, want := range map[float64]float64{2.88e-51: 0, 9.16e-08: 0, 0: 0, 0.5: 0.5, 1234.5: 1234.5} {
		if got := rateValue(in); got != want {
			t.Errorf("rateValue(%g) = %g, want %g", in, got, want)
		}
	}
}
