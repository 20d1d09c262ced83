// Package wal owns the per-actor append-only logs of Braid: one Log per
// entry bucket (or consumer group), in a directory of its own, holding
// records at dense offsets from 0.
//
// It wraps github.com/tidwall/wal, which stores entries as
// `uvarint size | data` in files named by the 20-digit index of their first
// entry and rolls to a new file past a size. That library has no checksums
// and no torn-tail repair, so this package adds both: every entry's data is
// one frame carrying a version byte and a CRC32C, Open repairs the tail of
// the last file, and every read verifies the CRC.
//
// The package does not own group commit (the bucket actor collects its
// mailbox and calls Append once per batch), retention policy (a storage
// worker decides what TruncateHead drops), metrics or logging (Open reports
// what it repaired through Log.Repair; the caller logs and counts it).
//
// # Offsets
//
// Offsets are dense and start at 0. tidwall indexes start at 1; the mapping
// offset = index-1 stays inside this package. Retention moves FirstOffset
// forward and may empty the log (FirstOffset == NextOffset); offsets are
// never reused, except by TruncateTail, which drops a suffix so that the
// next append reuses its offsets.
//
// # Record format
//
// A file is a sequence of tidwall entries; each entry's data is one frame:
//
//	tidwall entry:
//	+-----------------+------------------------------------------------+
//	| size (uvarint)  | frame (size bytes)                             |
//	+-----------------+------------------------------------------------+
//
//	frame:
//	+-------------+--------------------------+-------------------------+
//	| version (1B)| CRC32C (4B, little end.) | body                    |
//	|    = 1      | Castagnoli, over body    |                         |
//	+-------------+--------------------------+-------------------------+
//
//	body:
//	+------------------+-----------------+-----+-----------------------+
//	| timestamp        | keyLen (uvarint)| key | headerCount (uvarint) |
//	| (varint, zigzag, |                 |     |                       |
//	|  unix ms)        |                 |     |                       |
//	+------------------+-----------------+-----+-----------------------+
//	| headerCount x ( kLen (uvarint) | k | vLen (uvarint) | v )         |
//	+------------------------------------------------------------------+
//	| payload (the rest of the body)                                   |
//	+------------------------------------------------------------------+
//
// Every length is checked against the bytes that remain, an unknown version
// is ErrUnsupportedVersion, and an empty frame is ErrCorrupt: tidwall reads
// a zero-filled tail as a run of zero-size entries, so "empty" must never be
// a valid record.
//
// Every future version keeps the first five bytes as they are: the version,
// then a CRC32C over the rest of the frame. That lets repair tell a record
// of a newer release (good CRC, unknown version: Open refuses with
// ErrUnsupportedVersion rather than cut it) from garbage (bad CRC: cut).
//
// A frame does not carry its offset. Damage to tidwall's size prefixes in an
// older file that happens to re-align on a later entry boundary could shift
// records without failing a CRC; damage that does not re-align (the usual
// case) is reported as ErrCorrupt.
//
// # Durability
//
// DurabilityAlways (the default) fsyncs once per Append before returning, so
// an acknowledged append survives a crash. DurabilityInterval fsyncs from a
// background goroutine every Options.SyncInterval when something was
// written; appends go on while it runs. DurabilityNone fsyncs only on Sync,
// Close and file roll (tidwall always syncs a file before rolling to the
// next one). New, renamed and removed files are made durable by an fsync of
// the directory in the same way. A failed fsync is never retried: the Log
// fails every later write with ErrFailed until it is reopened.
//
// With DurabilityAlways, a record becomes visible to Read and NextOffset only
// once it is durable; readers never see a record that a crash could take
// back.
//
// # Crash repair
//
// Only the last file can be damaged by a crash: tidwall fsyncs a file before
// it rolls to the next one, and TruncateHead/TruncateTail rewrite files
// through a synced temporary file and a rename. Open therefore walks the
// file tidwall will treat as the last one and keeps exactly its valid
// prefix: the entries whose framing is complete, whose size is not zero and
// whose frame passes the version and CRC check. It truncates the file after
// the last valid entry, fsyncs the file and the directory, and reports the
// dropped bytes in Repair. A torn write, a zero-filled tail (a crash after
// the file size was extended but before the data reached the disk), garbage
// and a corrupted last record all end up there.
//
// Damage in an earlier file is not repaired (it would lose acknowledged
// data silently); it is detected on read: Read returns an error wrapping
// ErrCorrupt for every record whose frame does not check out.
//
// # Memory
//
// tidwall keeps the whole last file in memory, plus the most recently read
// older files (two), so a Log holds about 3 x Options.SegmentBytes at most.
//
// # Concurrency
//
// A Log is safe for concurrent use. Writers (Append, Truncate*, Sync, Close)
// are serialized. Readers run alongside fsync (this package fsyncs through a
// descriptor of its own, not under tidwall's lock) but not alongside
// tidwall's own file writes; reads of the stored frames are serialized among
// themselves (tidwall's file cache is not safe for concurrent reads), while
// CRC checks and decoding run in parallel.
package wal
