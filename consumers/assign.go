package consumers

import (
	"cmp"
	"slices"

	"github.com/braidmq/braid/topology"
)

// Assign spreads units over consumers: it returns the consumer each unit is
// assigned to. The result is
//
//   - complete: every unit is assigned to one of consumers (none when
//     consumers is empty, which returns an empty map);
//   - balanced: the numbers of units two consumers get differ by at most one;
//   - sticky: as many units as balance allows keep the consumer current
//     gives them (current entries for units or consumers not in the inputs
//     are ignored);
//   - deterministic: it depends only on the sets of units and consumers and
//     on current, not on their order or on duplicates.
//
// Assign is idempotent: Assign(u, c, Assign(u, c, x)) == Assign(u, c, x).
// It says where units should go, not when they may move: the group moves a
// unit only once its previous owner has acknowledged what it was given.
func Assign(units []topology.Unit, consumers []string, current map[topology.Unit]string) map[topology.Unit]string {
	out := make(map[topology.Unit]string, len(units))
	consumers = sortedUnique(consumers)
	if len(consumers) == 0 || len(units) == 0 {
		return out
	}
	units = sortedUniqueUnits(units)

	// kept[c] lists, in unit order, the units c holds now and may keep.
	member := make(map[string]bool, len(consumers))
	for _, c := range consumers {
		member[c] = true
	}
	kept := make(map[string][]topology.Unit, len(consumers))
	var pool []topology.Unit
	for _, u := range units {
		if c, ok := current[u]; ok && member[c] {
			kept[c] = append(kept[c], u)
		} else {
			pool = append(pool, u)
		}
	}

	// Every consumer gets base units and extra of them one more. Handing the
	// extra slots to the consumers that hold the most keeps the most units
	// in place: only a consumer holding more than base gains by one.
	base, extra := len(units)/len(consumers), len(units)%len(consumers)
	byHeld := slices.Clone(consumers)
	slices.SortStableFunc(byHeld, func(a, b string) int {
		return cmp.Compare(len(kept[b]), len(kept[a]))
	})
	quota := make(map[string]int, len(consumers))
	for i, c := range byHeld {
		quota[c] = base
		if i < extra {
			quota[c] = base + 1
		}
	}

	for _, c := range consumers {
		held := kept[c]
		if len(held) > quota[c] {
			pool = append(pool, held[quota[c]:]...)
			held = held[:quota[c]]
		}
		for _, u := range held {
			out[u] = c
		}
		quota[c] -= len(held)
	}

	// Hand out the rest in unit order, round-robin over the consumers that
	// still have room, so that one consumer's new units come from different
	// segments where it can.
	slices.SortFunc(pool, compareUnits)
	open := make([]string, 0, len(consumers))
	for _, c := range consumers {
		if quota[c] > 0 {
			open = append(open, c)
		}
	}
	next := 0
	for _, u := range pool {
		for quota[open[next%len(open)]] == 0 {
			next++
		}
		c := open[next%len(open)]
		out[u] = c
		quota[c]--
		next++
	}
	return out
}

func compareUnits(a, b topology.Unit) int {
	if c := cmp.Compare(a.Segment, b.Segment); c != 0 {
		return c
	}
	return cmp.Compare(a.Bucket, b.Bucket)
}

func sortedUnique(names []string) []string {
	out := slices.Clone(names)
	slices.Sort(out)
	return slices.Compact(out)
}

func sortedUniqueUnits(units []topology.Unit) []topology.Unit {
	out := slices.Clone(units)
	slices.SortFunc(out, compareUnits)
	return slices.Compact(out)
}
