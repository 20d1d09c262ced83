// Package routing maps a message to the place it is stored: key hash, then
// segment, then entry bucket. It also owns the names that address topics
// (tenant, namespace, topic URIs and their NATS subject tokens) and the two
// small placement functions that sit next to routing: namespace topic buckets
// and classic fixed-topic partitions.
//
// What it owns:
//
//   - Key hashing. A key hash is xxhash64(key) (DESIGN §1). Unkeyed messages
//     have no hash; [RoundRobin] spreads them over every unit of a [Table].
//   - Segment lookup. A [Table] is an immutable, sorted copy of the active
//     segments of one layout epoch, as [Span] values that tile [0, 2^64-1]
//     exactly. [Table.Lookup] is a binary search over the spans' upper bounds,
//     held in their own flat slice so the search touches as few cache lines as
//     possible (see BenchmarkLookup).
//   - Bucket choice. [Bucket] uses the low 32 bits of the hash:
//     (uint32(h) * n) >> 32. Segment ranges are contiguous intervals, so the
//     segment a key lands in is decided by the high-order bits of its hash;
//     after a few splits every key of a segment shares its top bits. Taking
//     the bucket from the low bits keeps the two choices independent, so the
//     buckets of even a narrow segment are evenly loaded. Multiply-shift
//     instead of a modulo avoids a division on the hot path.
//   - Names. [ParseTopic], [ParseNamespace] and [ValidateName] enforce the
//     name rule: every part matches [A-Za-z0-9_-]{1,128}, so every part is
//     also a single NATS subject token. Anything else is rejected with an
//     error that wraps [ErrInvalidName] and says which part is wrong and why.
//   - Subject tokens for the produce and layout-push subjects (DESIGN §5).
//
// What it does not own: the segment DAG, its invariants and the ordering rule
// live in package topology; the caller converts a layout's active segments to
// Spans and builds a new Table on every layout change. Wire message types and
// error codes live in package api. This package imports no actor, NATS or
// topology code and does no I/O.
//
// Concurrency: a Table is never modified after NewTable returns and may be
// shared freely between goroutines; RoundRobin is safe for concurrent use.
package routing
