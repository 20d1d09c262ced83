package topology

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
)

func ptr(v uint64) *uint64 { return &v }

func mustNew(t testing.TB, segments, budget int) Layout {
	t.Helper()
	l, err := New(segments, budget)
	if err != nil {
		t.Fatal(err)
	}
	mustValid(t, l)
	return l
}

func mustValid(t testing.TB, l Layout) {
	t.Helper()
	if err := l.Validate(); err != nil {
		t.Fatalf("layout at epoch %d: %v\n%s", l.Epoch, err, formatLayout(l))
	}
}

// must unwraps an operation's result inside a test.
func must(t testing.TB) func(Layout, error) Layout {
	return func(l Layout, err error) Layout {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		mustValid(t, l)
		return l
	}
}

func wantErr(t testing.TB, err, sentinel error) {
	t.Helper()
	if !errors.Is(err, sentinel) {
		t.Fatalf("error %v, want %v", err, sentinel)
	}
	const prefix = "braid/topology: "
	if got := err.Error(); len(got) <= len(prefix) || got[:len(prefix)] != prefix {
		t.Fatalf("error %q lacks the %q prefix", got, prefix)
	}
}

// drainedSet adapts a set to the predicate the ordering rule takes.
type drainedSet map[SegmentID]bool

func (d drainedSet) has(id SegmentID) bool { return d[id] }

// owners returns, in id order, the segments that ever owned hash h: the
// non-partition segments whose range holds it, and the partition h % k a
// fixed topic would have routed it to.
func owners(l Layout, h uint64) []SegmentID {
	k := uint64(0)
	for _, s := range l.Segments {
		if s.Partition >= 0 {
			k++
		}
	}
	var out []SegmentID
	for _, s := range l.Segments {
		if (s.Partition >= 0 && uint64(s.Partition) == h%k) || (s.Partition < 0 && s.Range.Contains(h)) {
			out = append(out, s.ID)
		}
	}
	return out
}

// checkChain checks that the owners of h form one chain under the ancestor
// relation, ending at the active owner.
func checkChain(l Layout, h uint64) error {
	chain := owners(l, h)
	if len(chain) == 0 {
		return fmt.Errorf("hash %s has no owner", FormatHash(h))
	}
	for i := 1; i < len(chain); i++ {
		if !l.IsDescendant(chain[i], chain[i-1]) {
			return fmt.Errorf("hash %s: owners %v: %d does not descend from %d", FormatHash(h), chain, chain[i], chain[i-1])
		}
	}
	owner, ok := l.Owner(h)
	if last := chain[len(chain)-1]; !ok || owner.ID != last {
		return fmt.Errorf("hash %s: owners %v end at %d, active owner is %d (%v)", FormatHash(h), chain, last, owner.ID, ok)
	}
	return nil
}

// randomHashes returns hashes worth checking in l: both ends of every active
// range and of a few others, the extremes of the space, and random ones.
func randomHashes(rng *rand.Rand, l Layout, n int) []uint64 {
	hashes := []uint64{0, FullRange.Hi, rng.Uint64()}
	for range n {
		s := l.Segments[rng.IntN(len(l.Segments))]
		hashes = append(hashes, s.Range.Lo, s.Range.Hi, randomIn(rng, s.Range))
	}
	return hashes
}

// randomIn returns a uniformly random hash of r.
func randomIn(rng *rand.Rand, r Range) uint64 {
	if r.IsFull() {
		return rng.Uint64()
	}
	return r.Lo + rng.Uint64N(r.Hi-r.Lo+1)
}
