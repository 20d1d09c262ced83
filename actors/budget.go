package actors

import (
	"sort"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/meta"
)

// Two bounds keep a node with many topics inside the process's limits
// (their defaults: logstore.DefaultMaxOpenFiles, DefaultMaxOpenLogs).
//
// File descriptors: every bucket log's files are held in one FileCache
// (wal.FileCache) of --max-open-files descriptors, by default half the
// process's file limit (the rest is for consumer group logs, sockets and
// the embedded NATS server): a log whose descriptor the cache closed opens
// it again on its next use. A process out of descriptors fails in every
// part at once; this one never gets there, however many logs are active.
//
// Active logs: an active log costs memory and its topic's actors, not a
// descriptor, so the node keeps its logs under a budget, --max-open-logs
// (by default ten times the descriptors): an activation that would go over
// it first passivates the least recently used topics that nothing holds
// (their clients see only the next request's latency), and when that is
// not enough it is refused with UNAVAILABLE, saying why; the topics
// already active, and everything stored, are not touched.

// maxEvictions bounds the topics one activation may passivate to make room.
const maxEvictions = 16

// admitActivation makes room in the open logs budget for the logs of
// rec's active segments, or refuses.
func (m *Manager) admitActivation(rec meta.TopicRecord) error {
	need := 0
	for _, s := range rec.Layout.Active() {
		need += s.Buckets
	}
	limit := m.cfg.MaxOpenLogs
	if need > limit {
		return api.Errorf(api.CodeUnavailable, "topic %s needs %d logs, over the node's open logs budget of %d (--max-open-logs)", rec.Topic, need, limit)
	}
	var lru []*Topic // the active topics, least recently used first, once needed
	evicted := 0
	for {
		open := m.store.OpenLogs()
		if open+need <= limit {
			return nil
		}
		if lru == nil {
			lru = m.leastRecentlyUsed()
		}
		// Passivate the next topic nothing holds (passivate refuses the
		// others).
		for len(lru) > 0 && evicted < maxEvictions && !m.passivate(lru[0], 0) {
			lru = lru[1:]
		}
		if len(lru) == 0 || evicted == maxEvictions {
			m.log.Error("topic activation refused: the open logs budget is used up by topics in use", "topic", rec.Topic,
				"open_logs", open, "needed", need, "limit", limit)
			return api.Errorf(api.CodeUnavailable, "topic %s cannot be activated: %d bucket logs are open and it needs %d, over the node's budget of %d "+
				"(--max-open-logs, or the process's file limit); the topics in use hold them, retry later", rec.Topic, open, need, limit)
		}
		lru = lru[1:]
		evicted++
	}
}

// leastRecentlyUsed returns the active topics, least recently used first.
func (m *Manager) leastRecentlyUsed() []*Topic {
	m.mu.RLock()
	out := make([]*Topic, 0, len(m.topics))
	for _, t := range m.topics {
		out = append(out, t)
	}
	m.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].lastUse.Load() < out[j].lastUse.Load() })
	return out
}
