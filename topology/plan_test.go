package topology

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

// stepOrder is the order PlanChange lists steps in.
var stepOrder = []StepKind{StepSpawn, StepSeal, StepPersist, StepPublish, StepRetire, StepRemove, StepReseal, StepHandOver, StepOpen, StepAnnounce}

// TestPlansOfRandomChanges plans random operations, valid and not, on
// layouts with random histories, and checks every plan against what must
// hold of any change: its next layout is Apply's; it seals, creates and
// deletes exactly what that layout says; its steps come in the one order,
// each present exactly when there is something for it to do; the
// compare-and-swap is the commit; and Rollback undoes, latest first,
// exactly the steps that ran up to the one that failed (a reload only).
func TestPlansOfRandomChanges(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 9))
	planned := 0
	for range 300 {
		l := randomLayout(t, rng, rng.IntN(20))
		if rng.IntN(4) == 0 {
			l = must(t)(NewFixed(1 + rng.IntN(4)))
		}
		for range 5 {
			op := randomOp(rng, l)
			p, err := PlanChange(l, op)
			next, applyErr := l.Apply(op)
			if (err == nil) != (applyErr == nil) {
				t.Fatalf("%s: PlanChange error %v, Apply error %v", op, err, applyErr)
			}
			if err != nil {
				continue
			}
			planned++
			checkPlan(t, l, next, p)
			l = p.Next
		}
	}
	if planned < 200 {
		t.Fatalf("only %d of the random ops were valid: the generator needs a look", planned)
	}
}

func checkPlan(t *testing.T, cur, next Layout, p Plan) {
	t.Helper()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("%s\n%s\nbefore:\n%s", fmt.Sprintf(format, args...), p, formatLayout(cur))
	}
	if !reflect.DeepEqual(p.Next, next) || p.Cur != cur.Epoch {
		fail("the plan's next layout is not Apply's")
	}
	var sealed, created, deleted []SegmentID
	for _, s := range next.Segments {
		was, existed := cur.Segment(s.ID)
		switch {
		case !existed && s.State == StateActive:
			created = append(created, s.ID)
		case existed && was.State == StateActive && s.State != StateActive:
			sealed = append(sealed, s.ID)
		case existed && was.State != StateDeleted && s.State == StateDeleted:
			deleted = append(deleted, s.ID)
		}
	}
	if !slices.Equal(p.Sealed, sealed) || !slices.Equal(p.Created, created) || !slices.Equal(p.Deleted, deleted) {
		fail("sealed %v created %v deleted %v, want %v %v %v", p.Sealed, p.Created, p.Deleted, sealed, created, deleted)
	}
	// Each kind at most once, in the one order, there exactly when it has
	// something to do.
	want := map[StepKind]bool{StepPersist: true, StepPublish: true, StepAnnounce: true,
		StepSpawn: len(created) > 0, StepOpen: len(created) > 0, StepRemove: len(deleted) > 0,
		StepSeal: len(sealed) > 0, StepRetire: len(sealed) > 0, StepReseal: len(sealed) > 0, StepHandOver: len(sealed) > 0}
	last := -1
	for k, s := range p.Steps {
		i := slices.Index(stepOrder, s.Kind)
		if i <= last {
			fail("step %d (%s) out of order", k+1, s.Kind)
		}
		last = i
		if !want[s.Kind] {
			fail("step %d (%s) has nothing to do", k+1, s.Kind)
		}
		delete(want, s.Kind)
		if (s.Undo != "") != (k < p.Commit) {
			fail("step %d (%s): undo %q, but the commit is step %d", k+1, s.Kind, s.Undo, p.Commit+1)
		}
	}
	for kind, needed := range want {
		if needed {
			fail("no %s step", kind)
		}
	}
	if p.Steps[p.Commit].Kind != StepPersist || p.Steps[p.Commit].Epoch != next.Epoch {
		fail("the commit is step %d, %s", p.Commit+1, p.Steps[p.Commit])
	}
	// Rollback against a dumb reference: what ran is undone, unseal
	// before abandon, and a failed persist or anything after reloads.
	for k := range p.Steps {
		var ref []Step
		ran := func(kind StepKind) bool {
			return slices.ContainsFunc(p.Steps[:k+1], func(s Step) bool { return s.Kind == kind })
		}
		if k <= p.Commit {
			if ran(StepSeal) {
				ref = append(ref, Step{Kind: StepUnseal, Segments: sealed})
			}
			if ran(StepSpawn) {
				ref = append(ref, Step{Kind: StepAbandon, Segments: created})
			}
		}
		if k >= p.Commit {
			ref = append(ref, Step{Kind: StepReload})
		}
		if got := p.Rollback(k); !reflect.DeepEqual(got, ref) {
			fail("rollback of a failure at step %d: %v, want %v", k+1, got, ref)
		}
	}
}

// randomOp returns an operation on l: mostly one of its segments as the
// operation wants them, sometimes not.
func randomOp(rng *rand.Rand, l Layout) Op {
	active := l.Active()
	pick := func() SegmentID {
		if rng.IntN(8) == 0 {
			return SegmentID(rng.IntN(int(l.NextID) + 2))
		}
		return active[rng.IntN(len(active))].ID
	}
	var sealed []SegmentID
	for _, s := range l.Segments {
		if s.State == StateSealed {
			sealed = append(sealed, s.ID)
		}
	}
	switch rng.IntN(8) {
	case 0:
		if rng.IntN(2) == 0 {
			return Split(pick(), nil)
		}
		s := active[rng.IntN(len(active))]
		return Op{Kind: OpSplit, Segments: []SegmentID{s.ID}, At: []uint64{randomIn(rng, s.Range), randomIn(rng, s.Range)}, Buckets: rng.IntN(3)}
	case 1:
		i := rng.IntN(len(active))
		return Merge(active[i].ID, active[min(i+1, len(active)-1)].ID)
	case 2:
		return Rebucket(pick(), 1+rng.IntN(4))
	case 3:
		if len(sealed) == 0 {
			return Delete(pick())
		}
		return Delete(sealed[rng.IntN(len(sealed))])
	case 4:
		return Relocate([]SegmentID{pick()}, "node-b")
	case 5:
		return Migrate(rng.IntN(3))
	case 6:
		return AddPartitions(len(l.Partitions()) + rng.IntN(3))
	}
	return Split(pick(), nil).DecidedAt(l.Epoch - uint64(rng.IntN(2)))
}

// TestPlanOfAChangeThatCreatesNothing: a delete has no step before its
// commit, so any failure only reloads.
func TestPlanOfAChangeThatCreatesNothing(t *testing.T) {
	t.Parallel()
	l := must(t)(New(1, 1))
	l = must(t)(l.Split(0, nil))
	p, err := PlanChange(l, Delete(0))
	if err != nil {
		t.Fatal(err)
	}
	var kinds []StepKind
	for _, s := range p.Steps {
		kinds = append(kinds, s.Kind)
	}
	if want := []StepKind{StepPersist, StepPublish, StepRemove, StepAnnounce}; !slices.Equal(kinds, want) || p.Commit != 0 {
		t.Fatalf("steps %v, commit %d; want %v, 0", kinds, p.Commit, want)
	}
	if got := p.Rollback(0); !reflect.DeepEqual(got, []Step{{Kind: StepReload}}) {
		t.Fatalf("rollback of a failed persist: %v", got)
	}
}
