package lifecycle

import (
	"github.com/braidmq/braid/routing"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the Prometheus series of the storage worker and the
// compactor. Their names are those they had in package actors.
type metrics struct {
	// The storage worker's (storage.go): what it did to the logs, its
	// errors, its passes, and what each topic holds on disk and in the
	// remote tier at its last pass.
	storageRolled, storageRemovedFiles, storageRemovedBytes, storageHeadTrims, storageErrors prometheus.Counter
	storageTickSeconds                                                                       prometheus.Histogram
	topicDiskBytes, topicTierBytes                                                           *prometheus.GaugeVec
	// The worker's in the remote tier (storage_tier.go).
	tierOffloadedFiles, tierOffloadedBytes, tierRemovedFiles, tierRemovedBytes, tierErrors prometheus.Counter
	// The compactor's (compactor.go).
	compactions, compactionErrors prometheus.Counter
}

// topicLabelNames are the labels of a per-topic series, as package actors
// names them: the topic's tenant, namespace and short name.
var topicLabelNames = []string{"tenant", "namespace", "topic"}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		storageRolled: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "braid_storage_files_rolled_total", Help: "Open files of bucket logs the storage worker rolled because they were older than segment_ms."}),
		storageRemovedFiles: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "braid_storage_files_removed_total", Help: "Closed files of bucket logs the storage worker removed (past retention, or over retention_bytes)."}),
		storageRemovedBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "braid_storage_bytes_removed_total", Help: "Bytes of the files the storage worker removed."}),
		storageHeadTrims: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "braid_storage_head_trims_total", Help: "Progressive trims of the head of an oversized oldest file (its expired or excess records given back in place; their bytes count in braid_storage_bytes_removed_total)."}),
		tierOffloadedFiles: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "braid_tier_files_offloaded_total", Help: "Closed files of bucket logs copied to the remote tier and recorded (the offload policy)."}),
		tierOffloadedBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "braid_tier_bytes_offloaded_total", Help: "Bytes of the files offloaded to the remote tier."}),
		tierRemovedFiles: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "braid_tier_files_removed_total", Help: "Files the storage worker removed from the remote tier (past retention, or over retention_bytes)."}),
		tierRemovedBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "braid_tier_bytes_removed_total", Help: "Bytes of the files removed from the remote tier."}),
		tierErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "braid_tier_errors_total", Help: "Offloads and removals in the remote tier that failed (each logged at error level; tried again at the next tick)."}),
		topicTierBytes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "braid_topic_tier_bytes", Help: "Bytes the remote tier holds of a topic's open bucket logs, at the storage worker's last pass."},
			topicLabelNames),
		compactions: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "braid_compactions_total", Help: "Compactions of topics this node ran to the end (recorded)."}),
		compactionErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "braid_compaction_errors_total", Help: "Compactions that failed (each logged at error level; the topic keeps its earlier compacted view)."}),
		storageErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "braid_storage_errors_total", Help: "Rolls, listings and removals of the storage worker that failed (each logged at error level)."}),
		storageTickSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "braid_storage_tick_seconds", Help: "Time of one pass of the storage worker over the open logs.", Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10)}),
		topicDiskBytes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "braid_topic_disk_bytes", Help: "Bytes the open bucket logs of a topic hold on this node's disk, at the storage worker's last pass."},
			topicLabelNames)}
	if reg != nil {
		reg.MustRegister(m.storageRolled, m.storageRemovedFiles, m.storageRemovedBytes, m.storageHeadTrims, m.storageErrors,
			m.storageTickSeconds, m.topicDiskBytes, m.topicTierBytes,
			m.tierOffloadedFiles, m.tierOffloadedBytes, m.tierRemovedFiles, m.tierRemovedBytes, m.tierErrors,
			m.compactions, m.compactionErrors)
	}
	return m
}

// forgetTopic drops the per-topic series of a topic none of whose logs
// the storage worker found open: they come back at its next pass over
// them.
func (m *metrics) forgetTopic(name routing.TopicName) {
	match := prometheus.Labels{"tenant": name.Tenant, "namespace": name.Namespace, "topic": name.Name}
	m.topicDiskBytes.DeletePartialMatch(match)
	m.topicTierBytes.DeletePartialMatch(match)
}
