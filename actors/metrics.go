package actors

import (
	"github.com/braidmq/braid/wal"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the Prometheus series of this package.
type metrics struct {
	appendedMsgs  *prometheus.CounterVec
	appendedBytes *prometheus.CounterVec
	restarts      prometheus.Counter
	repairs       prometheus.Counter
	repairedBytes prometheus.Counter
	layoutChanges *prometheus.CounterVec
	activeSegs    *prometheus.GaugeVec
	produceErrors *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		appendedMsgs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "braid_messages_appended_total", Help: "Messages made durable, per topic."}, []string{"topic"}),
		appendedBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "braid_bytes_appended_total", Help: "Encoded record bytes written, per topic."}, []string{"topic"}),
		restarts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "braid_bucket_restarts_total", Help: "Bucket actors restarted by their supervisor."}),
		repairs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "braid_wal_repairs_total", Help: "Logs whose torn or corrupt tail was cut at open."}),
		repairedBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "braid_wal_repaired_bytes_total", Help: "Bytes cut from log tails at open."}),
		layoutChanges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "braid_layout_changes_total", Help: "Layout changes by operation."}, []string{"op"}),
		activeSegs: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "braid_active_segments", Help: "Active segments per topic."}, []string{"topic"}),
		produceErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "braid_produce_errors_total", Help: "Produced records refused, by code."}, []string{"code"}),
	}
	if reg != nil {
		reg.MustRegister(m.appendedMsgs, m.appendedBytes, m.restarts, m.repairs, m.repairedBytes,
			m.layoutChanges, m.activeSegs, m.produceErrors)
	}
	return m
}

func (m *metrics) appended(k UnitKey, msgs, bytes int) {
	t := k.Topic.String()
	m.appendedMsgs.WithLabelValues(t).Add(float64(msgs))
	m.appendedBytes.WithLabelValues(t).Add(float64(bytes))
}

func (m *metrics) repaired(r wal.RepairReport) {
	m.repairs.Inc()
	m.repairedBytes.Add(float64(r.DroppedBytes))
}
