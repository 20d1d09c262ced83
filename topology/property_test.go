package topology

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
)

// TestRandomHistories applies long random sequences of operations — valid
// and invalid — and checks after every step that the layout is valid, that
// the epoch moved by exactly one (or not at all on a refusal, with the
// layout unchanged), and that the owners of sampled hashes form one chain.
func TestRandomHistories(t *testing.T) {
	t.Parallel()
	steps := 2000
	if testing.Short() || raceEnabled {
		steps = 400
	}
	for seed := range uint64(6) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(seed, 1))
			var start Layout
			if seed%3 == 2 {
				start = must(t)(FromFixed(1+rng.IntN(8), 1+rng.IntN(4)))
			} else {
				start = must(t)(New(1+rng.IntN(16), 1+rng.IntN(32)))
			}
			randomWalk(t, rng, start, steps)
		})
	}
}

// randomLayout returns a valid layout with a random history of the given
// number of steps.
func randomLayout(t testing.TB, rng *rand.Rand, steps int) Layout {
	t.Helper()
	return randomWalk(t, rng, must(t)(New(1+rng.IntN(8), 1+rng.IntN(16))), steps)
}

func randomWalk(t testing.TB, rng *rand.Rand, l Layout, steps int) Layout {
	t.Helper()
	for step := range steps {
		var snapshot Layout
		if step%50 == 0 {
			snapshot = l.Clone()
		}
		next, what, wantErr, err := randomStep(rng, l)
		if step%50 == 0 && !reflect.DeepEqual(l, snapshot) {
			t.Fatalf("step %d: %s modified its receiver", step, what)
		}
		if wantErr != nil || err != nil {
			if !errors.Is(err, wantErr) || wantErr == nil {
				t.Fatalf("step %d: %s: error %v, want %v\n%s", step, what, err, wantErr, formatLayout(l))
			}
			continue
		}
		if err := next.Validate(); err != nil {
			t.Fatalf("step %d: %s: %v\nbefore:\n%s\nafter:\n%s", step, what, err, formatLayout(l), formatLayout(next))
		}
		if next.Epoch != l.Epoch+1 {
			t.Fatalf("step %d: %s: epoch %d -> %d", step, what, l.Epoch, next.Epoch)
		}
		for _, h := range randomHashes(rng, next, 2) {
			if err := checkChain(next, h); err != nil {
				t.Fatalf("step %d: %s: %v\n%s", step, what, err, formatLayout(next))
			}
		}
		l = next
	}
	return l
}

// randomStep picks an operation, sometimes one that must be refused, and
// returns its result, a description, and the error a correct
// implementation returns (nil when it must succeed).
func randomStep(rng *rand.Rand, l Layout) (next Layout, what string, wantErr, err error) {
	active := l.Active()
	any := l.Segments[rng.IntN(len(l.Segments))]
	pick := rng.IntN(100)
	switch {
	case len(active) > 48 && pick < 50, pick < 25:
		// Merge a random adjacent pair, in random order.
		if len(active) < 2 {
			break
		}
		i := rng.IntN(len(active) - 1)
		a, b := active[i].ID, active[i+1].ID
		if rng.IntN(2) == 0 {
			a, b = b, a
		}
		next, err = l.Merge(a, b)
		return next, fmt.Sprintf("merge %d %d", a, b), nil, err
	case pick < 30:
		// Merge any two segments: refused unless both active and adjacent.
		other := l.Segments[rng.IntN(len(l.Segments))]
		next, err = l.Merge(any.ID, other.ID)
		switch {
		case any.ID == other.ID:
			wantErr = ErrNotAdjacent
		case any.State != StateActive || other.State != StateActive:
			wantErr = ErrNotActive
		case !any.Range.Adjacent(other.Range):
			wantErr = ErrNotAdjacent
		}
		return next, fmt.Sprintf("merge %d %d", any.ID, other.ID), wantErr, err
	case pick < 40:
		// Rebucket, sometimes to the same or an invalid count.
		s := active[rng.IntN(len(active))]
		buckets := rng.IntN(18) // 0 and 17 stand for the out-of-range counts
		switch buckets {
		case 17:
			buckets = MaxBuckets + 1
		}
		if buckets < 1 || buckets > MaxBuckets || buckets == s.Buckets {
			wantErr = ErrBuckets
		}
		next, err = l.Rebucket(s.ID, buckets)
		return next, fmt.Sprintf("rebucket %d %d", s.ID, buckets), wantErr, err
	case pick < 50:
		// Delete any segment: refused unless sealed.
		if any.State != StateSealed {
			wantErr = ErrNotSealed
		}
		next, err = l.Delete(any.ID)
		return next, fmt.Sprintf("delete %d", any.ID), wantErr, err
	case pick < 55:
		// Split any segment, possibly sealed or unknown.
		id := any.ID
		if rng.IntN(4) == 0 {
			id = l.NextID + SegmentID(rng.IntN(3))
		}
		s, ok := l.Segment(id)
		switch {
		case !ok:
			wantErr = ErrUnknownSegment
		case s.State != StateActive:
			wantErr = ErrNotActive
		case s.Range.Lo == s.Range.Hi:
			wantErr = ErrSplitPoint
		}
		next, err = l.Split(id, nil)
		return next, fmt.Sprintf("split %d", id), wantErr, err
	}
	// Split an active segment: at the midpoint, at a random hash, or at the
	// very edges of its range (which makes single-hash segments).
	s := active[rng.IntN(len(active))]
	r := s.Range
	var at *uint64
	switch rng.IntN(6) {
	case 0, 1:
	case 2, 3:
		at = ptr(randomIn(rng, r))
	case 4:
		at = ptr(r.Lo + 1)
	case 5:
		at = ptr(r.Hi)
	}
	if r.Lo == r.Hi || at != nil && (*at <= r.Lo || *at > r.Hi) {
		wantErr = ErrSplitPoint
	}
	next, err = l.Split(s.ID, at)
	where := "mid"
	if at != nil {
		where = FormatHash(*at)
	}
	return next, fmt.Sprintf("split %d %s", s.ID, where), wantErr, err
}
