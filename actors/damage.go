package actors

import "github.com/braidmq/braid/wal"

// What the manager does with what the logs report of their files (see
// LogEvents): it logs and counts it.

// repaired logs a log whose tail Open cut, or in which it found holes.
func (m *Manager) repaired(k UnitKey, r wal.RepairReport) {
	m.m.repaired(r)
	switch {
	case r.DroppedBytes > 0:
		// What a crash leaves: the appends written last, never
		// acknowledged.
		m.log.Warn("bucket log: cut a torn tail at open", "unit", k.String(), "file", r.File,
			"bytes", r.DroppedBytes, "records", r.DroppedRecords)
	case r.ZeroBytes > 0:
		m.log.Info("bucket log: cut the zeros written ahead of its end", "unit", k.String(), "file", r.File, "bytes", r.ZeroBytes)
	}
}

// hole logs and counts records lost to damage in a bucket log.
func (m *Manager) hole(k UnitKey, h wal.Hole) {
	m.m.holes.Inc()
	m.m.lostRecords.Add(float64(h.To - h.From))
	m.log.Error("bucket log: records lost to damage; readers skip them (OFFSETS_LOST), or read another copy of a replicated unit", "unit", k.String(),
		"from", h.From, "to", h.To, "file", h.File, "pos", h.Pos, "bytes", h.Bytes, "reason", h.Reason)
}
