// Package lifecycle runs the lifecycle of a node's bucket logs beside the
// topics that write them: the storage worker and the compactor, each one
// actor per node, started once the topics are recovered (Lifecycle.Start)
// and stopped before they close (Close).
//
// The storage worker (storage.go, storage_tier.go) visits, every tick, the
// open logs of the topics, and now and then the logs of their sealed
// segments, and applies their storage policies: it rolls a log's open file
// by age, removes closed files by retention (time and bytes), trims the
// head of an oversized oldest file in place, offloads closed files to the
// remote tier and drops their local copies, expires them from the tier,
// and starts a compaction of a topic whose logs grew past its
// compaction_threshold_bytes. The logs this node holds of another node's
// topic it visits by that topic's own policies. A namespace's storage_tick
// re-arms it as the topics apply their policies (Rearm, which the node
// hands the topics as actors.Config.OnStorageTick).
//
// The compactor (compactor.go) runs the compactions of the topics whose
// home is here, two at once: it decides the latest record of each key
// across the segment DAG (package compaction), writes each unit's
// compacted log of the next generation, records the generation in the
// topic's compaction record in the metadata store (the commit point) and
// removes the other generations. topic.compact and topic.compaction reach
// it through the front-end (Compact, CompactionStatus).
//
// What it owns: when and how logs roll, shrink, move to the remote tier
// and are compacted, the compacted logs' generations on disk, and the
// metrics of these (braid_storage_*, braid_tier_* but the reads,
// braid_topic_disk_bytes, braid_topic_tier_bytes, braid_compaction*). What
// it does not own: the logs and their primitives (wal, wal/tier, logstore),
// the topics, their policies and the reads of their compacted view
// (actors, which also counts, per topic, what the worker did: topic.stats),
// and the compaction's decision (compaction). It reaches the topics through
// what actors exports for it (actors/lifecycle.go), never their actors.
package lifecycle
