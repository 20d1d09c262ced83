package logstore

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the store's own counters.
type metrics struct {
	// walWriteFailures counts bucket logs failed by a write or fsync, by
	// cause; walReopens their reopens, by result (see Writer).
	walWriteFailures *prometheus.CounterVec
	walReopens       *prometheus.CounterVec
}

func newMetrics() metrics {
	return metrics{
		walWriteFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "braid_wal_write_failures_total",
			Help: "Bucket logs failed by a write or fsync (each logged at error level; appends are answered UNAVAILABLE until the log reopens), by reason (no_space, quota, read_only, io, closed, other)."},
			[]string{"reason"}),
		walReopens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "braid_wal_reopens_total", Help: "Reopens of failed bucket logs (at most one a second per log), by result (ok, failed)."},
			[]string{"result"}),
	}
}

// register registers the store's metrics: its logs' failures and reopens,
// and the series read from it (the logs open and the budget they are kept
// under, descriptors, commit rounds, the journal, the tier's cache).
func (s *Store) register(reg prometheus.Registerer, budget int) {
	if reg == nil {
		return
	}
	reg.MustRegister(s.metrics.walWriteFailures, s.metrics.walReopens,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "braid_wal_open_logs", Help: "Bucket logs open on this node."},
			func() float64 { return float64(s.OpenLogs()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "braid_wal_open_logs_limit",
			Help: "The most bucket logs open at once (--max-open-logs; by default ten for each descriptor of --max-open-files)."},
			func() float64 { return float64(budget) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "braid_wal_open_files", Help: "File descriptors bucket logs hold on this node."},
			func() float64 { return float64(s.FileCounts().Open) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "braid_wal_open_files_limit",
			Help: "The most file descriptors bucket logs hold at once (--max-open-files; by default half the process's file limit)."},
			func() float64 { return float64(s.FileCounts().Max) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "braid_wal_file_opens_total",
			Help: "Bucket log files opened, the first time or again after the descriptor cache closed them."},
			func() float64 { return float64(s.FileCounts().Opens) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "braid_wal_file_evictions_total",
			Help: "Bucket log file descriptors the cache closed to make room (the files open again on their next use)."},
			func() float64 { return float64(s.FileCounts().Evictions) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "braid_commit_rounds_total",
			Help: "Rounds of bucket log commits made durable together (one journal write and sync, or one sync of the logs, each)."},
			func() float64 { return float64(s.CommitCounts().Rounds) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "braid_commit_round_logs_total",
			Help: "Bucket log commits in the rounds counted by braid_commit_rounds_total: their ratio is the logs made durable per round."},
			func() float64 { return float64(s.CommitCounts().Commits) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "braid_journal_written_bytes_total",
			Help: "Bytes written to the node's commit journal."},
			func() float64 { return float64(s.JournalCounts().Bytes) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "braid_journal_checkpoints_total",
			Help: "Checkpoints of the commit journal: what it held synced into the bucket logs, its older files removed."},
			func() float64 { return float64(s.JournalCounts().Checkpoints) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "braid_journal_checkpoint_failures_total",
			Help: "Checkpoints of the commit journal that failed (logged at error level; the next one tries again)."},
			func() float64 { return float64(s.JournalCounts().CheckpointFailures) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "braid_journal_direct_commits_total",
			Help: "Commits of journaled bucket logs made by an fdatasync of the log's own file instead: the log wrote enough since its last commit (--commit-sync auto)."},
			func() float64 { return float64(s.JournalCounts().DirectCommits) }))
	if tr := s.tier; tr != nil {
		reg.MustRegister(
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "braid_tier_cache_downloads_total",
				Help: "Files the remote tier's read cache downloaded from the object store."},
				func() float64 { d, _, _ := tr.Stats(); return float64(d) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "braid_tier_cache_hits_total",
				Help: "Reads from the remote tier served from a file the cache had."},
				func() float64 { _, h, _ := tr.Stats(); return float64(h) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "braid_tier_cache_bytes",
				Help: "Bytes of the files the remote tier's read cache holds (--tier-cache-bytes bounds it)."},
				func() float64 { _, _, b := tr.Stats(); return float64(b) }))
	}
}
