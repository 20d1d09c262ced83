// Package topology is the segment DAG of one topic, as pure data.
//
// A topic's key-hash space [0, 2^64-1] is tiled by active segments. The
// engine reshapes it at runtime with three operations, each of which seals
// one or two active segments and creates their successors in the same
// layout epoch:
//
//	split     one active segment -> two children that tile its range
//	merge     two adjacent active segments -> one child over their union
//	rebucket  one active segment -> one successor, same range, new bucket count
//
// Automatic scaling adds two variants (splitn.go): SplitN splits one segment
// into up to MaxSplitWays children at once, and MergeBuckets merges with a
// chosen bucket count.
//
// There is no plain Seal: sealing an active segment without successors would
// leave part of the space without an owner. Sealed segments stay in the
// layout, linked to their parents and children, also once retention has
// deleted their data (Delete marks them deleted): the ordering rule walks
// them, and ids are never reused.
//
// # What this package owns
//
//   - The types: Range, Segment, Layout, Unit.
//   - The operations (New, FromFixed, Split, SplitN, Merge, MergeBuckets,
//     Rebucket, Delete, Relocate, Migrate, AddPartitions). Each
//     returns a new Layout and leaves its receiver untouched (copy on write:
//     the segment slice is copied, O(segments), but the Parents and Children
//     slices of unchanged segments are shared with the receiver, so treat
//     every Layout as read-only, or Clone it first), or an error that wraps
//     one of the sentinels in errors.go and says why.
//   - Operations as data (op.go): an Op names one operation and its
//     arguments, and Layout.Apply carries it out by the function above
//     that it names. A layout change request carries an Op, never a
//     function; an Op decided at a layout epoch (automatic scaling) is
//     refused with ErrStale by a layout that has moved on.
//   - The plan of a layout change (plan.go): PlanChange returns the next
//     layout and the steps that take a running topic there — spawn the
//     new segments gated, seal, compare-and-swap, publish, retire,
//     remove, reseal, hand over, open, announce — each with how it is
//     undone should it or a later step up to the commit fail. The topic
//     controller carries the steps out one by one; the plan scripts in
//     testdata/plan.txt print them.
//   - The invariants (Validate): active segments tile the whole hash space,
//     parents and children agree, sealed ranges are covered by their
//     children, epochs are ordered.
//   - The ordering rule (Readable, ReadableUnits, MayRead): a segment may be
//     delivered to an ordered subscription only when every ancestor — all
//     generations up, not only the direct parents — is drained or deleted.
//   - The stable JSON form of a layout (what topic.describe and the layout
//     push carry) and ParseHash for hashes written by people.
//
// # What it does not own
//
// No I/O, no clocks, no actors, no locks: the topic controller carries a
// plan out (spawning actors, persisting with compare-and-swap on the KV
// revision, publishing), automatic scaling decides when to split, and
// placement which node a new segment goes to.
// Hashing keys and choosing an entry bucket live in package routing; which
// segments a subscription has drained lives with the consumer group, and is
// passed in here as a function.
//
// # Ids and epochs
//
// Segment ids are allocated from Layout.NextID and never reused, so a
// segment's parents always have smaller ids than it has: Segments sorted by id
// is a topological order of the DAG, and the DAG cannot have a cycle. Every
// operation advances Layout.Epoch by exactly one; the successors it creates
// carry that epoch as CreatedEpoch and the segments it seals carry it as
// SealedEpoch.
//
// # Migrated fixed topics
//
// A fixed topic routes a key by hash % N, which is not a range. FromFixed
// models its N partitions as sealed parents whose Range is the whole space
// and whose Partition field holds the partition index; their N active
// children tile the space, and each child has all N partitions as parents,
// so no child is readable before every partition is drained.
package topology
