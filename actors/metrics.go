package actors

import (
	"sync/atomic"

	"github.com/braidmq/braid/routing"
	"github.com/braidmq/braid/wal"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the Prometheus series of this package.
type metrics struct {
	// nodeBytes counts the key and payload bytes made durable on the node
	// (the sum of the namespace series), for its load in its lease.
	nodeBytes     atomic.Uint64
	appendedMsgs  *prometheus.CounterVec
	appendedBytes *prometheus.CounterVec
	// nsAppendedMsgs and nsAppendedBytes are the same per namespace
	// ("tenant/namespace"): always there, while the per-topic series
	// exist only for active topics.
	nsAppendedMsgs  *prometheus.CounterVec
	nsAppendedBytes *prometheus.CounterVec
	restarts        prometheus.Counter
	repairs         prometheus.Counter
	repairedBytes   prometheus.Counter
	layoutChanges   *prometheus.CounterVec
	activeSegs      *prometheus.GaugeVec
	// handedOver counts records that reached a segment after its seal
	// and went to its successor; handoffFailures layout changes whose
	// handover or opening did not complete in time.
	handedOver      prometheus.Counter
	handoffFailures prometheus.Counter
	// deadLetters counts appends that reached a stopped bucket (answered
	// UNAVAILABLE).
	deadLetters prometheus.Counter
	// quarantined is the number of topics set aside (see quarantine).
	quarantined prometheus.Gauge
	// holes and lostRecords count the runs of records lost to damage in
	// bucket logs (wal.Hole) and the offsets they span.
	holes       prometheus.Counter
	lostRecords prometheus.Counter
	// Activation (activation.go): topics active, activations by result
	// and their latency, passivations, activations refused by the open
	// logs budget.
	activeTopics      prometheus.Gauge
	activations       *prometheus.CounterVec
	activationSeconds prometheus.Histogram
	passivations      prometheus.Counter
	// relocated counts segments of lost nodes sealed in metadata here
	// (relocate.go); remoteReads the reads of units owned elsewhere.
	relocated   prometheus.Counter
	remoteReads *prometheus.CounterVec
	// damagedReads counts reads of this node's copy of a replicated unit
	// that met damage in its log (damaged.go).
	damagedReads prometheus.Counter
	// damagedCopies counts this node's copies of replicated units found
	// damaged and reported to be made again (repair.go).
	damagedCopies prometheus.Counter
	// remoteAppends counts the batches written to segments other nodes
	// own (hosted.go).
	remoteAppends *prometheus.CounterVec
	// dropFailures counts the nodes that could not be told to remove the
	// logs of a deleted topic.
	dropFailures prometheus.Counter
	// lateAppends counts appends of other nodes' topics that arrived
	// (or were written) after their deadline.
	lateAppends prometheus.Counter
	// relocateFailures counts the moves of a gone or draining node's
	// segments that failed (tried again a second later).
	relocateFailures prometheus.Counter
	// replicaCopies counts copies of sealed replicated segments made again
	// on another node after one was lost (replicated.go).
	replicaCopies prometheus.Counter
	// tierReads counts the reads served from the remote tier (tiered.go).
	tierReads *prometheus.CounterVec

	// Elasticity (the scaler and the controller).
	scalingOps  *prometheus.CounterVec
	suppressed  *prometheus.CounterVec
	hotKey      *prometheus.GaugeVec
	segMsgRate  *prometheus.GaugeVec
	segByteRate *prometheus.GaugeVec
	backlog     *prometheus.GaugeVec
	withheld    *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		appendedMsgs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "braid_messages_appended_total", Help: "Messages made durable, per topic."}, topicLabelNames),
		appendedBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "braid_bytes_appended_total", Help: "Key and payload bytes made durable, per topic."}, topicLabelNames),
		nsAppendedMsgs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "braid_namespace_messages_appended_total", Help: "Messages made durable, per namespace (tenant/namespace), whether their topics are active or not."},
			[]string{"namespace"}),
		nsAppendedBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "braid_namespace_bytes_appended_total", Help: "Key and payload bytes made durable, per namespace (tenant/namespace)."},
			[]string{"namespace"}),
		restarts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "braid_bucket_restarts_total", Help: "Bucket actors restarted by their supervisor."}),
		repairs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "braid_wal_repairs_total", Help: "Logs whose torn or corrupt tail was cut at open."}),
		repairedBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "braid_wal_repaired_bytes_total", Help: "Bytes cut from log tails at open."}),
		layoutChanges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "braid_layout_changes_total", Help: "Layout changes by operation."}, []string{"op"}),
		activeSegs: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "braid_active_segments", Help: "Active segments per topic."}, topicLabelNames),
		handedOver: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "braid_produce_handed_over_total",
			Help: "Records that reached a segment after its seal and were appended to the successor owning their key (a layout change absorbed by the server)."}),
		handoffFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "braid_layout_handoff_failures_total",
			Help: "Layout changes whose sealed buckets did not hand over in time; the new segments were opened anyway and the error logged."}),
		deadLetters: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "braid_produce_stopped_bucket_total",
			Help: "Appends that reached a bucket after it stopped (a restart, a retired segment, shutdown), answered UNAVAILABLE."}),
		quarantined: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "braid_topics_quarantined",
			Help: "Topics not served because their metadata record does not read or validate (each logged at error level, answered TOPIC_QUARANTINED)."}),
		holes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "braid_wal_holes_total",
			Help: "Runs of records lost to damage in a bucket log with whole records after them, found at open or on read (each logged at error level; readers skip them with OFFSETS_LOST)."}),
		lostRecords: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "braid_wal_lost_records_total", Help: "Offsets in the holes counted by braid_wal_holes_total."}),
		activeTopics: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "braid_topics_active", Help: "Topics active on this node (their actors running, their logs open); the others activate on first use."}),
		activations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "braid_topic_activations_total", Help: "Topic activations on first use, by result (ok, failed, refused: over the open logs budget)."},
			[]string{"result"}),
		activationSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "braid_topic_activation_seconds", Help: "Time to activate a topic: read its record, start its actors, open its logs.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 8)}),
		passivations: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "braid_topic_passivations_total", Help: "Topics passivated: idle past the idle timeout, or the least recently used when the open logs budget was reached."}),
		relocated: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "braid_segments_relocated_total", Help: "Active segments of nodes whose lease lapsed that this node sealed in metadata, each given a successor with its range on a live node."}),
		remoteReads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "braid_remote_unit_reads_total", Help: "Reads of bucket logs whose segment another node owns, sent to that node, by result (ok, unavailable, error)."},
			[]string{"result"}),
		damagedReads: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "braid_replica_damaged_reads_total", Help: "Reads of this node's copy of a replicated unit refused for damage, so that another replica answers: a hole met by the read, or a copy found at its start to have lost entries it had stored (counted once)."}),
		damagedCopies: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "braid_replica_damaged_copies_total", Help: "This node's copies of replicated units found damaged (a hole read, entries lost at its start, or its replica failed), each reported to its topic's home to be made again from the other replicas."}),
		tierReads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "braid_tier_reads_total", Help: "Reads of bucket logs served from the remote tier (below the local first offset), by result (ok, error)."},
			[]string{"result"}),
		relocateFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "braid_segment_relocation_failures_total", Help: "Moves of the segments of a node that is gone or draining that a topic's home tried and could not make (tried again a second later)."}),
		replicaCopies: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "braid_replica_copies_total", Help: "Sealed replicated segments whose lost copy this node (their topic's home) had made again on another node and named in the layout."}),
		lateAppends: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "braid_remote_unit_appends_late_total", Help: "Appends a topic's home sent this node that arrived, or were made durable, after the home had stopped waiting for them: refused, or (when late only at the end) kept unacknowledged."}),
		dropFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "braid_topic_drop_failures_total", Help: "Nodes owning segments of a topic deleted here, or of segments retention deleted, that could not be told to remove their logs (they stay on that node's disk)."}),
		remoteAppends: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "braid_remote_unit_appends_total", Help: "Batches of appends this node, as a topic's home, sent to the node that owns their segment, by result (ok, failed)."},
			[]string{"result"}),
		scalingOps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "braid_scaling_operations_total",
			Help: "Layout changes per topic by operation (split, merge, rebucket, delete) and reason (manual, retention, consumers, min_segments, idle, or the rate over its split threshold)."},
			topicLabelsWith("op", "reason")),
		suppressed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "braid_scaling_suppressed_total",
			Help: "Evaluations in which a change the load called for was held back, by the change and the rule (cooldown, max_segments, min_segments, max_depth, hot_key, consumers, max_buckets, split_load, narrow)."},
			topicLabelsWith("op", "reason")),
		hotKey: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "braid_segment_hot_key_ratio",
			Help: "Share of a hot segment's msg/s carried by one key, while it keeps the segment from splitting (absent otherwise)."},
			topicLabelsWith("segment")),
		segMsgRate: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "braid_segment_messages_per_second", Help: "Short moving average of messages appended (in) and read by subscribers (out), per active segment."},
			topicLabelsWith("segment", "direction")),
		segByteRate: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "braid_segment_bytes_per_second", Help: "Short moving average of key and payload bytes appended (in) and read (out), per active segment."},
			topicLabelsWith("segment", "direction")),
		backlog: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "braid_subscription_backlog_messages", Help: "Messages not yet acknowledged by a subscription, over the segments it has not drained."},
			topicLabelsWith("subscription")),
		withheld: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "braid_subscription_withheld_units", Help: "Units a subscription may not read yet because an ancestor segment is not drained (the ordering rule)."},
			topicLabelsWith("subscription")),
	}
	walWrites := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "braid_wal_writes_total",
		Help: "Writes of log data by every log of the process (group commit: records per write is appended messages over this)."},
		func() float64 { return float64(wal.Counts().Writes) })
	walSyncs := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "braid_wal_syncs_total",
		Help: "fdatasyncs of log files by every log of the process."},
		func() float64 { return float64(wal.Counts().Syncs) })
	if reg != nil {
		reg.MustRegister(walWrites, walSyncs)
		reg.MustRegister(m.appendedMsgs, m.appendedBytes, m.nsAppendedMsgs, m.nsAppendedBytes, m.restarts, m.repairs, m.repairedBytes,
			m.layoutChanges, m.activeSegs, m.handedOver, m.handoffFailures, m.deadLetters, m.quarantined, m.holes, m.lostRecords,
			m.activeTopics, m.activations, m.activationSeconds, m.passivations, m.relocated, m.remoteReads, m.remoteAppends, m.dropFailures, m.lateAppends, m.relocateFailures, m.replicaCopies,
			m.tierReads, m.damagedReads, m.damagedCopies,
			m.scalingOps, m.suppressed, m.hotKey, m.segMsgRate, m.segByteRate, m.backlog, m.withheld)
	}
	return m
}

func (m *metrics) repaired(r wal.RepairReport) {
	if r.DroppedBytes > 0 || r.ZeroBytes > 0 {
		m.repairs.Inc()
		m.repairedBytes.Add(float64(r.DroppedBytes))
	}
}

// topicLabelNames are the labels of a per-topic series: the topic's
// tenant, namespace and short name (not its URI), so that dashboards
// group and filter by tenant and namespace.
var topicLabelNames = []string{"tenant", "namespace", "topic"}

// topicLabelsWith is topicLabelNames and more.
func topicLabelsWith(more ...string) []string {
	return append(append([]string(nil), topicLabelNames...), more...)
}

// topicLabels returns the tenant, namespace and name of a topic URI, then
// more: the label values of its per-topic series.
func topicLabels(uri string, more ...string) []string {
	name, err := routing.ParseTopic(uri)
	if err != nil {
		return append([]string{"", "", uri}, more...)
	}
	return append([]string{name.Tenant, name.Namespace, name.Name}, more...)
}

// topicMatch matches every series of a topic (DeletePartialMatch).
func topicMatch(uri string) prometheus.Labels {
	v := topicLabels(uri)
	return prometheus.Labels{"tenant": v[0], "namespace": v[1], "topic": v[2]}
}
