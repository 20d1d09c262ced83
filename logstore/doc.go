// Package logstore is a node's storage runtime for bucket logs: the logs
// open on the node, by unit (Store: opened and repaired on first use,
// closed and removed by segment or topic, within a budget of descriptors),
// the append signals readers wait on, the node's group commit (Group: one
// round of writes and one sync, or journal write, for every log with
// appends waiting; Committer: a bucket's queue in it), the writer that
// turns a failed write into a pause and reopens the log (Writer), the
// journal and the remote tier as the logs see them.
//
// What it owns: open logs and making appends durable, with their metrics.
// What it does not own: the log format, repair, journal and tier
// themselves (wal, wal/tier), which appends go where (actors), and the
// lifecycle of the logs' files (retention, offload, compaction: package
// lifecycle).
//
// A Committer's requests are of the one type its Group commits (the
// bucket actors' appends): Request is what the group needs of them, their
// records and their answer.
package logstore
