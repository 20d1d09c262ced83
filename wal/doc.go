// Package wal owns the per-actor append-only logs of Braid: one Log per
// entry bucket (or consumer group), in a directory of its own, holding
// records at dense offsets from 0.
//
// A log is a directory of files, each named by the 20-digit offset of its
// first record, rolled to a new file past a size. Every Append is stored as
// one frame (or a few, see below) carrying a version byte, a CRC32C, its
// first offset and its record count: one write per append, no copy of the
// file kept in memory. Open repairs the tail of the last file, and every
// read checks the CRC of the frame it reads.
//
// Earlier releases wrapped github.com/tidwall/wal and stored one record per
// entry; this package reads neither that layout nor its version-1 entries
// (Open refuses them with ErrUnsupportedVersion), but keeps tidwall's entry
// framing (a uvarint size before each frame) and its truncation protocol
// (".START" and ".END" replacement files).
//
// Why a log of Braid's own, measured: tidwall/wal keeps each log's tail
// file in a growing in-memory slice, fsyncs under its exclusive lock (no
// write overlaps a sync), has no checksums (a flipped byte is read back as
// data) and fails Open on a torn tail. `go run ./benchmarks/walcompare`
// appends the same encoded records through both in one run, alternating
// round by round; on the project's machine (3 rounds, median [min, max]
// of the per-round ratios), with a sync per append: 1.11x [0.90, 1.22],
// 1.43x [1.27, 1.75] and 2.01x [1.11, 2.43] tidwall's rate at 100 B in
// batches of 1, 16 and 256 records, 0.81x [0.81, 1.23], 1.85x [1.38, 2.52]
// and 1.58x [0.92, 1.96] at 1 KiB; without syncs from 0.86x [0.82, 1.28]
// (single 100 B records) to 10.33x [3.79, 11.12] (100 B batches of 256).
// docs/figures.md has the whole table.
//
// Commits of many logs can be made durable together: a CommitGroup's Round
// takes the commits of many logs (Log.StartCommitIn) and makes them
// durable with one write and one fdatasync of a Journal, one syncfs, or
// their fdatasyncs submitted together (see CommitGroup and Journal). Who
// writes which log when (the node's committer) is the caller's. A
// FileCache bounds the descriptors many logs hold.
//
// The package does not own retention policy (a storage worker decides
// what TruncateHead drops), metrics or logging (Open reports what it
// repaired through Log.Repair; the caller logs and counts it).
//
// # Offsets
//
// Offsets are dense and start at 0. Retention moves FirstOffset forward and
// may empty the log (FirstOffset == NextOffset); offsets are never reused,
// except by TruncateTail, which drops a suffix so that the next append
// reuses its offsets. Both truncations work at any offset: a frame that
// holds the cut is re-framed with the records that stay.
//
// A Log finds the frame of an offset through an index of frame positions
// (16 bytes per frame): kept for the last file as it is written, and built
// from the frame headers, without reading the records, when an older file
// is first read (the two most recently read are kept).
//
// # Format
//
// A file is a sequence of entries; each entry is one batch frame:
//
//	entry:
//	+-----------------+------------------------------------------------+
//	| size (uvarint)  | frame (size bytes)                             |
//	+-----------------+------------------------------------------------+
//
//	frame (version 2):
//	+-------------+-------------------+-----------------+--------------+
//	| version (1B)| CRC32C (4B, LE)   | first offset    | record count |
//	|    = 2      | Castagnoli, over  | (8B, LE)        | (4B, LE)     |
//	|             | the rest          |                 |   >= 1       |
//	+-------------+-------------------+-----------------+--------------+
//	| count x ( bodyLen (uvarint) | body )                             |
//	+------------------------------------------------------------------+
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
//	frame (version 3, a raft entry of a replicated log):
//	+------------------------------------------+-----------+-----------+
//	| the 17 header bytes of version 2         | term      | index     |
//	| (version = 3)                            | (8B, LE)  | (8B, LE)  |
//	+------------------------------------------+-----------+-----------+
//	| count x ( bodyLen (uvarint) | body )                             |
//	+------------------------------------------------------------------+
//
// A replicated log is a raft log: AppendEntry (and WriteEntry) stores one
// raft entry as one frame of version 3, of any size, its term and index
// (both above 0) after the offsets; the CRC covers them. Offsets stay
// dense: only entries that carry records are stored. Entries lists them
// from their headers; a conflicting suffix is cut with TruncateTail at an
// entry's first offset, and a TruncateHead inside an entry keeps its term
// and index on the records that stay. Versions 2 and 3 may follow each
// other in one file; repair, holes and truncations treat them alike.
//
// An Append is cut into frames of at most 64 KiB of records (a larger
// record gets a frame of its own), which bounds what a read of one record
// checks. The first frame of a file starts at the offset in the file's
// name, and each frame starts where the one before it ends: a frame out of
// sequence is corrupt.
//
// Every length is checked against the bytes that remain, the record sizes
// must add up to the frame exactly, an unknown version is
// ErrUnsupportedVersion, and an empty frame is ErrCorrupt: a zero-filled
// tail reads as a run of zero-size entries, so "empty" must never be valid.
//
// Every version keeps the first five bytes of a frame as they are: the
// version, then a CRC32C over the rest of the frame. That lets repair tell a
// frame of another release (good CRC, unknown version: Open refuses with
// ErrUnsupportedVersion rather than cut it) from garbage (bad CRC: cut).
// Version 1 is the record frame of EncodeRecord, which AppendEncoded takes
// and which earlier releases stored one per entry:
//
//	record frame (version 1):
//	+-------------+--------------------------+-------------------------+
//	| version (1B)| CRC32C (4B, LE)          | body                    |
//	|    = 1      | Castagnoli, over body    |                         |
//	+-------------+--------------------------+-------------------------+
//
// # Durability
//
// DurabilityAlways (the default) fsyncs once per Append before returning, so
// an acknowledged append survives a crash. DurabilityInterval fsyncs from a
// background goroutine every Options.SyncInterval when something was
// written; appends go on while it runs. DurabilityNone fsyncs only on Sync,
// Close and file roll (a file is synced before the log rolls to the next
// one). New, renamed and removed files are made durable by an fsync of the
// directory in the same way. A failed fsync is never retried: the Log fails
// every later write with ErrFailed until it is reopened.
//
// The sync is an fdatasync (through io_uring on Linux): it flushes the data
// and what is needed to read it back (the size, the block map), not the
// times. Under DurabilityAlways and DurabilityInterval the tail file is
// filled with zeros ahead of its end (Options.Preallocate), so that most
// syncs find the size and the blocks unchanged and need no journal commit:
// on this project's machine, a third off the latency of the sync every
// acknowledgement waits for. A roll and Close cut the zeros off; a crash
// leaves them, and repair cuts them (below).
//
// With DurabilityAlways, a record becomes visible to Read and NextOffset only
// once it is durable; readers never see a record that a crash could take
// back.
//
// A journaled log (Options.Journal) commits in a Round of its journal's
// CommitGroup by the journal's sync, not its own: its tail is durable in
// the journal, held in memory until 64 KiB or a sync (bufferedFile), and
// synced to its own file at a roll, Close, Sync, a truncation or a
// checkpoint of the journal. ReplayJournal, run before such logs are
// opened, writes back what the journal holds (see Journal).
//
// # Crash repair
//
// Only the last file can be damaged by a crash: a file is fsynced before the
// log rolls to the next one, and truncations write their replacement file
// through a synced temporary file and a rename. Open first finishes a
// truncation that a crash interrupted: a "<first>.START" file (TruncateHead)
// replaces every file before it, an "<first>.END" file (TruncateTail)
// replaces its namesake and every file after it. Then it walks the last file
// frame by frame, checking the version, CRC, records and sequence of each.
// At the first frame that does not check out it looks for a whole frame
// after it (below); if there is none, the rest is what a crash left, and it
// truncates the file there, fsyncs the file and the directory, and reports
// the dropped bytes in Repair. A torn write, a zero-filled tail (the zeros
// written ahead of the tail, or a crash after the file size was extended but
// before the data reached the disk), garbage and a corrupted last frame all
// end up there; a cut of nothing but zeros is reported as
// RepairReport.ZeroBytes, as no record was in it. A frame is dropped whole:
// the append it belongs to was not acknowledged (an append larger than one
// frame may keep its first frames, as it was not acknowledged either).
//
// # Holes
//
// Damage with whole frames after it is not a crash: a crash only tears what
// was written last. It is a flipped bit, a bad sector, a file someone wrote
// to. Cutting there would drop every acknowledged record after it, so the
// log keeps the frames on both sides and reads the offsets between as a
// Hole: Read and ReadRange return a *HoleError (errors.Is ErrHole) that
// names the lost offsets [From, To), the file, and the damaged bytes, so
// that a reader can report it and go on at To. Nothing is rewritten; the
// damaged bytes stay, and every Open finds them again.
//
// The next whole frame is the first position after the damage where a
// frame of this version starts whose CRC, records and sizes check out, whose
// first offset is at or after where the records before the damage end, and
// whose distance from that offset is no more than the damaged bytes could
// hold (so that a frame stored inside a record's payload is not taken for
// one of the log's). Holes are found where files are read whole: in the
// last file at Open, and in an older file when it is first read (its frames
// are indexed by their headers; a frame whose header holds but whose CRC
// fails is a hole as it is read, and an older file whose frames end before
// the next file starts has a hole at its end). Options.OnHole hears of each
// once; Log.Holes lists them.
//
// A truncation keeps the part of a hole it does not cut; a TruncateHead that
// cuts inside a hole writes a file whose frames start after it (read as a
// hole of no bytes), and a TruncateTail inside a hole is refused.
//
// After a power loss (not a kill: the kernel keeps what a killed process
// wrote) the writes of the last, unacknowledged, appends may reach the disk
// out of order; a lost one followed by a kept one reads as a hole of
// records that were never acknowledged, with records after it that were
// not either.
//
// A frame of another version with a good CRC is never cut or skipped: Open
// refuses the log (the last file) or reads stop there (an older file), with
// ErrUnsupportedVersion.
//
// # Memory
//
// A Log keeps the write buffer of the last append (dropped past 1 MiB), the
// frame index of its last file and of the two older files read last, and the
// two frames read last (for readers that read a frame a few records at a
// time). It holds open its last file and the two older files read last.
//
// # Concurrency
//
// A Log is safe for concurrent use. Writers (Append, Truncate*, Sync, Close)
// are serialized. Readers run alongside appends and fsyncs: an append
// publishes its frames once they are written (and, with DurabilityAlways,
// synced), and never changes what readers may already see. Readers serialize
// among themselves to use the caches and read the frames they need, then
// decode in parallel. A roll or a truncation waits for the readers in
// flight, and they for it, only while it swaps or removes files.
package wal
