// Package scaling decides when a scalable topic splits, merges or rebuckets
// its segments, and when a sealed segment may be deleted. It is pure logic
// over plain data (DESIGN.md §3, §6): no actors, no clocks, no I/O. The topic
// controller (package actors) measures, calls in here with the time, and
// applies what comes back through its layout-change path.
//
// # The pieces
//
//	Policy      the resolved settings: topic, then namespace, then broker default (Resolve)
//	Tracker     per-segment load windows fed with Samples: short and long
//	            moving averages of msg/s and bytes/s in and out, a key-hash
//	            histogram over 64 sub-ranges, the share of the heaviest key,
//	            and since when the segment has been hot or cold
//	Decide      layout + load + policy + history + now -> Split, Merge,
//	            Rebucket or nothing, with the reason and the suppressed
//	            alternatives (cooldown, max segments, max depth, hot key...)
//	Expired     the sealed segments retention may delete
//	HeavyHitters a tiny summary a bucket actor feeds with the key hashes it
//	            appends, to find a single hot key exactly and cheaply
//
// # How a decision is made
//
// A segment is hot while its short average (time constant: the evaluation
// interval) is above a split threshold in any dimension (a threshold of 0
// disables its dimension); it is cold while the larger of its short and long
// averages (long: a third of the merge window) is at or below every merge
// threshold. Decide, in this order:
//
//  1. Splits a segment that has been hot for the split window, is older than
//     the split cooldown, and whose load is not mostly one key. It splits it
//     into as many pieces as bring each to about 60 % of the threshold (one
//     step answers a 10x load step, adding one level of depth), at equal
//     widths, or, when the key-hash histogram is skewed, at equal loads.
//  2. When a subscription has more consumers than the active segments have
//     entry buckets, splits the busiest segment if it takes at least the
//     split-vs-rebucket rate and the topic is under max segments, and
//     otherwise rebuckets it to enough buckets. Rebucketing only grows.
//  3. Splits the widest segment while the topic is under min segments.
//  4. Merges the adjacent pair of segments, both cold for the merge window
//     and older than the merge cooldown, that carry the least, never below
//     min segments.
//
// # Hysteresis
//
// Oscillating load does not flap the layout, for four reasons that hold
// together: a segment must stay hot for the whole split window (a dip below
// the threshold restarts it) and cold for the whole merge window; new
// segments start their cooldowns when they are created, so a split's
// children cannot merge before the merge cooldown; merge thresholds must be
// below split thresholds (Resolve refuses otherwise); and two segments merge
// only if together they carry at most half of every split threshold, so a
// merged segment is never hot and a split's children (each carrying a share
// of a load above the threshold) merge back only once the load has halved.
//
// # Cooldowns and depth
//
// Cooldowns run per segment from its creation, whatever created it: a
// manual split, merge or rebucket starts the same cooldowns as an automatic
// one, and two independent hot ranges can split within one second of each
// other. The depth Decide bounds by max_dag_depth is the live depth: the
// longest chain of parents that retention has not deleted, so a long-lived
// topic whose old generations are deleted keeps scaling.
package scaling
