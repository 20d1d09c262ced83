package actors

import (
	"cmp"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/scaling"
	"github.com/braidmq/braid/topology"
)

// SubscriptionInfo is what a topic's controller learns of one of its
// subscriptions at every evaluation.
type SubscriptionInfo struct {
	Name      string
	Consumers int
	// Drained holds the segments the subscription has drained.
	Drained map[topology.SegmentID]bool
	Backlog uint64
	// Withheld counts the units the ordering rule holds back.
	Withheld int
}

// SubscriptionsView reports the subscriptions of a topic; the cluster layer
// implements it with the consumer groups. An error means they are not known
// now: the controller then changes nothing this evaluation.
type SubscriptionsView interface {
	TopicSubscriptions(ctx context.Context, t *Topic) ([]SubscriptionInfo, error)
}

// scaler is the evaluation loop of one topic: every evaluation interval it
// takes the segments' meters, folds them into the load tracker, asks the
// subscriptions, decides (package scaling) and sends the change to the
// controller, like an admin request would. It runs on its own goroutine so
// that the controller's mailbox stays free for changes and produce paths.
type scaler struct {
	t       *Topic
	tracker *scaling.Tracker
	// hotKeys holds the hot key logged per segment, so each is logged once.
	hotKeys map[topology.SegmentID]uint64
	// series holds the label values of the per-segment and
	// per-subscription gauges set, to delete those that go away.
	segSeries map[topology.SegmentID]bool
	subSeries map[string]bool
	// A quiet topic is evaluated less: settled says the last evaluation
	// decided nothing on a topic with no traffic and nothing that time
	// alone could change (atRest), at layout epoch settledEpoch; skipped
	// counts the evaluations skipped since.
	settled      bool
	settledEpoch uint64
	skipped      int
	quit         chan struct{}
	done         chan struct{}
}

// maxSkipped is how many evaluations in a row a quiet, settled topic
// skips: at most this many intervals pass before a decision that only
// time can change (a cooldown that ends, retention) is taken.
const maxSkipped = 30

func startScaler(t *Topic) *scaler {
	s := &scaler{t: t, tracker: scaling.NewTracker(), hotKeys: map[topology.SegmentID]uint64{},
		segSeries: map[topology.SegmentID]bool{}, subSeries: map[string]bool{},
		quit: make(chan struct{}), done: make(chan struct{})}
	go s.run()
	return s
}

// stop ends the loop; it does not wait (an evaluation under way may be
// waiting for the controller that stops it).
func (s *scaler) stop() { close(s.quit) }

func (s *scaler) run() {
	defer close(s.done)
	defer s.forgetSeries()
	for {
		timer := time.NewTimer(s.t.Policy().EvaluationInterval)
		select {
		case <-s.quit:
			timer.Stop()
			return
		case <-timer.C:
		}
		now := time.Now()
		if s.skip(now) {
			continue
		}
		s.evaluate(now)
	}
}

// skip reports whether this evaluation can be skipped: the topic had no
// traffic since the last one, which decided nothing with no traffic
// either, on the same layout, and fewer than maxSkipped were skipped
// since. A topic with nothing going on then costs a timer and a look at
// its meters a second, not an evaluation (the subscriptions asked, the
// load folded in, the decision, the metrics).
func (s *scaler) skip(now time.Time) bool {
	st := s.t.state.Load()
	quiet := s.settled && st.layout.Epoch == s.settledEpoch && s.skipped < maxSkipped
	for _, m := range st.meters {
		quiet = quiet && m.quiet()
	}
	if !quiet {
		s.skipped = 0
		return false
	}
	// The period skipped had nothing in it: the next evaluation's starts
	// now.
	for _, m := range st.meters {
		m.skipTake(now)
	}
	s.skipped++
	return true
}

// evaluate is one evaluation.
func (s *scaler) evaluate(now time.Time) {
	st := s.t.state.Load()
	if st.deleted {
		return
	}
	p := s.t.Policy()
	samples := make(map[topology.SegmentID]scaling.Sample, len(st.meters))
	traffic := false
	for id, m := range st.meters {
		samples[id] = m.take(now)
		traffic = traffic || samples[id].MsgsIn != 0 || samples[id].MsgsOut != 0
	}
	s.settled = false
	s.tracker.Observe(st.layout, samples, p, now)
	load := scaling.Load{Segments: s.tracker.Load()}
	subs, subsErr := s.subscriptions(p)
	if subsErr != nil {
		s.t.mgr.log.Debug("subscriptions unknown: only splits for load this evaluation", "topic", s.t.uri, "err", subsErr)
	} else {
		s.publishSubscriptionMetrics(subs)
	}
	for _, sub := range subs {
		load.Subscriptions = append(load.Subscriptions, scaling.SubscriptionLoad{Name: sub.Name, Consumers: sub.Consumers})
	}

	var d scaling.Decision
	if p.AutoScale && !st.layout.Fixed() { // a fixed topic's partitions do not split or merge
		d = scaling.Decide(st.layout, load, p, scaling.History{Created: createdTimes(st)}, now)
		s.noteSuppressed(d, load)
	}
	s.publishSegmentMetrics(st, load, d.Suppressed)
	// Without the subscriptions, consumer counts are unknown: a merge could
	// leave consumers idle and a rebucket would be a guess. A hot segment
	// still splits, and retention waits (a silent subscription may still
	// need a sealed segment).
	loadSplit := d.Kind == scaling.Split && d.Reason != scaling.ReasonConsumers
	switch {
	case d.Kind != scaling.None && d.Kind != "" && (subsErr == nil || loadSplit):
		s.apply(d.Op().DecidedAt(st.layout.Epoch), d.Reason, d.Detail)
	case subsErr == nil:
		if !s.retire(st, p, subs, now) && !traffic && load.Quiet() && len(d.Suppressed) == 0 && atRest(st.layout, p) {
			s.settled, s.settledEpoch = true, st.layout.Epoch
		}
	}
}

// atRest reports whether nothing but traffic or consumers can change the
// layout: no sealed segment waits for retention, and no merge is allowed
// (the topic has its minimum of segments), so no cooldown or window
// running out would lead to a change.
func atRest(l topology.Layout, p scaling.Policy) bool {
	active := 0
	for _, seg := range l.Segments {
		switch seg.State {
		case topology.StateSealed:
			return false
		case topology.StateActive:
			active++
		}
	}
	return active <= p.MinSegments
}

// subscriptions asks the view, within about an evaluation interval.
func (s *scaler) subscriptions(p scaling.Policy) ([]SubscriptionInfo, error) {
	view := s.t.mgr.cfg.Subscriptions
	if view == nil {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), max(p.EvaluationInterval, 2*time.Second))
	defer cancel()
	return view.TopicSubscriptions(ctx, s.t)
}

// retire deletes the sealed segments retention allows; it reports
// whether there were any.
func (s *scaler) retire(st *topicState, p scaling.Policy, subs []SubscriptionInfo, now time.Time) bool {
	drainedBy := make([]func(topology.SegmentID) bool, len(subs))
	for i, sub := range subs {
		drained := sub.Drained
		drainedBy[i] = func(id topology.SegmentID) bool { return drained[id] }
	}
	sealedAt := func(id topology.SegmentID) (time.Time, bool) {
		seg, ok := st.layout.Segment(id)
		if !ok {
			return time.Time{}, false
		}
		ms, ok := st.epochTimes[seg.SealedEpoch]
		return time.UnixMilli(ms), ok
	}
	ids := scaling.Expired(st.layout, sealedAt, p.Retention, drainedBy, now)
	if len(ids) == 0 {
		return false
	}
	s.apply(topology.Delete(ids...).DecidedAt(st.layout.Epoch), scaling.ReasonRetention,
		fmt.Sprintf("segments %v are drained and past retention %s", ids, p.Retention))
	return true
}

// apply sends a change to the controller; op is decided at the layout
// epoch it was decided on, so the controller refuses it if the layout has
// moved on since.
func (s *scaler) apply(op topology.Op, reason scaling.Reason, detail string) {
	req := &changeReq{op: op, reason: string(reason)}
	res, err := s.t.mgr.system.Root.RequestFuture(s.t.pid, req, 30*time.Second).Result()
	if err == nil {
		if r, ok := res.(*changeResp); ok {
			err = r.err
		} else {
			err = fmt.Errorf("controller answered %T", res)
		}
	}
	switch {
	case errors.Is(err, topology.ErrStale):
		s.t.mgr.log.Debug("automatic layout change dropped: the layout moved on", "topic", s.t.uri, "op", op)
		return
	case err != nil:
		s.t.mgr.log.Warn("automatic layout change failed", "topic", s.t.uri, "op", op, "reason", reason, "detail", detail, "err", err)
		return
	}
	s.t.mgr.log.Info("automatic layout change", "topic", s.t.uri, "op", op, "reason", reason, "detail", detail)
}

// noteSuppressed counts suppressed decisions and logs each new hot key
// once.
func (s *scaler) noteSuppressed(d scaling.Decision, load scaling.Load) {
	hot := map[topology.SegmentID]bool{}
	for _, sup := range d.Suppressed {
		s.t.mgr.m.suppressed.WithLabelValues(topicLabels(s.t.uri, string(sup.Kind), string(sup.Reason))...).Inc()
		if sup.Reason != scaling.SuppressedHotKey {
			continue
		}
		hot[sup.Segment] = true
		w := load.Segments[sup.Segment]
		if prev, seen := s.hotKeys[sup.Segment]; !seen || prev != w.HotKey {
			s.hotKeys[sup.Segment] = w.HotKey
			s.t.mgr.log.Warn("hot key: one key carries most of a segment's load; splitting cannot help it",
				"topic", s.t.uri, "segment", sup.Segment, "key", displayKey(w.HotKeyName), "key_hash", topology.FormatHash(w.HotKey),
				"share", fmt.Sprintf("%.0f%%", 100*w.HotKeyShare), "msg_rate_in", int(w.Short.MsgIn))
		}
	}
	for id := range s.hotKeys {
		if !hot[id] {
			delete(s.hotKeys, id)
		}
	}
}

// publishSegmentMetrics sets the per-segment gauges of the active
// segments and deletes those of segments gone.
func (s *scaler) publishSegmentMetrics(st *topicState, load scaling.Load, suppressed []scaling.Suppression) {
	m := s.t.mgr.m
	hot := map[topology.SegmentID]bool{}
	for _, sup := range suppressed {
		if sup.Reason == scaling.SuppressedHotKey {
			hot[sup.Segment] = true
		}
	}
	live := map[topology.SegmentID]bool{}
	loads := make([]api.SegmentLoad, 0, len(st.meters))
	for id := range st.meters {
		live[id] = true
		w := load.Segments[id]
		loads = append(loads, segmentLoad(id, w))
		seg := segmentLabel(id)
		m.segMsgRate.WithLabelValues(topicLabels(s.t.uri, seg, "in")...).Set(rateValue(w.Short.MsgIn))
		m.segMsgRate.WithLabelValues(topicLabels(s.t.uri, seg, "out")...).Set(rateValue(w.Short.MsgOut))
		m.segByteRate.WithLabelValues(topicLabels(s.t.uri, seg, "in")...).Set(rateValue(w.Short.ByteIn))
		m.segByteRate.WithLabelValues(topicLabels(s.t.uri, seg, "out")...).Set(rateValue(w.Short.ByteOut))
		if hot[id] {
			m.hotKey.WithLabelValues(topicLabels(s.t.uri, seg)...).Set(w.HotKeyShare)
		} else {
			m.hotKey.DeleteLabelValues(topicLabels(s.t.uri, seg)...)
		}
		s.segSeries[id] = true
	}
	for id := range s.segSeries {
		if !live[id] {
			s.forgetSegment(id)
		}
	}
	slices.SortFunc(loads, func(a, b api.SegmentLoad) int { return cmp.Compare(a.Segment, b.Segment) })
	s.t.load.Store(&loads)
}

// segmentLoad is what topic.stats shows of a segment's tracked load.
func segmentLoad(id topology.SegmentID, w scaling.SegmentLoad) api.SegmentLoad {
	l := api.SegmentLoad{Segment: uint64(id), MsgInRate: rateValue(w.Short.MsgIn), MsgOutRate: rateValue(w.Short.MsgOut),
		ByteInRate: rateValue(w.Short.ByteIn), ByteOutRate: rateValue(w.Short.ByteOut)}
	if share := math.Round(w.HotKeyShare*1000) / 1000; share > 0 {
		l.HotKeyHash, l.HotKeyShare = topology.FormatHash(w.HotKey), share
		l.HotKey = displayKey(w.HotKeyName)
	}
	return l
}

// displayKey shows a key as text when it is printable UTF-8, else as 0x
// and hex.
func displayKey(key []byte) string {
	if len(key) == 0 {
		return ""
	}
	if utf8.Valid(key) && !slices.ContainsFunc([]rune(string(key)), func(r rune) bool { return !unicode.IsPrint(r) }) {
		return string(key)
	}
	return "0x" + hex.EncodeToString(key)
}

func (s *scaler) forgetSegment(id topology.SegmentID) {
	m, seg := s.t.mgr.m, segmentLabel(id)
	for _, dir := range []string{"in", "out"} {
		m.segMsgRate.DeleteLabelValues(topicLabels(s.t.uri, seg, dir)...)
		m.segByteRate.DeleteLabelValues(topicLabels(s.t.uri, seg, dir)...)
	}
	m.hotKey.DeleteLabelValues(topicLabels(s.t.uri, seg)...)
	delete(s.segSeries, id)
}

// publishSubscriptionMetrics sets the backlog and withheld-units gauges.
func (s *scaler) publishSubscriptionMetrics(subs []SubscriptionInfo) {
	m := s.t.mgr.m
	live := map[string]bool{}
	for _, sub := range subs {
		live[sub.Name] = true
		s.subSeries[sub.Name] = true
		m.backlog.WithLabelValues(topicLabels(s.t.uri, sub.Name)...).Set(float64(sub.Backlog))
		m.withheld.WithLabelValues(topicLabels(s.t.uri, sub.Name)...).Set(float64(sub.Withheld))
	}
	for name := range s.subSeries {
		if !live[name] {
			m.backlog.DeleteLabelValues(topicLabels(s.t.uri, name)...)
			m.withheld.DeleteLabelValues(topicLabels(s.t.uri, name)...)
			delete(s.subSeries, name)
		}
	}
}

// forgetSeries deletes every series of the topic's scaler when it stops.
func (s *scaler) forgetSeries() {
	for id := range s.segSeries {
		s.forgetSegment(id)
	}
	s.publishSubscriptionMetrics(nil)
}

func segmentLabel(id topology.SegmentID) string { return strconv.FormatUint(uint64(id), 10) }

// createdTimes returns when each active segment was created.
func createdTimes(st *topicState) map[topology.SegmentID]time.Time {
	out := map[topology.SegmentID]time.Time{}
	for _, seg := range st.layout.Active() {
		if ms, ok := st.epochTimes[seg.CreatedEpoch]; ok {
			out[seg.ID] = time.UnixMilli(ms)
		}
	}
	return out
}

// rateValue is a moving average as a metric shows it: what decays below a
// thousandth of a unit per second is 0, not 2.9e-51.
func rateValue(v float64) float64 {
	if v < 1e-3 {
		return 0
	}
	return v
}
