package topology

import (
	"fmt"
	"strings"
)

// A layout change, planned. The topic controller (package actors) carries
// a change out as the steps PlanChange lists, in their order, one method
// per step kind; this file says what they are, in what order, and how each
// is undone, so that the order can be read, printed and tested without
// actors, and a test can crash the controller after any step.
//
// The order, and why:
//
//	spawn     the created segments start gated: they take no direct append
//	          until open, so that what the sealed ones hand over goes first
//	seal      the retiring segments' buckets flush what they accepted and
//	          hold what comes after (spawning first keeps the window in
//	          which appends wait down to seal and persist)
//	persist   compare-and-swap of the next layout on the store's revision:
//	          the commit point (a stale controller fails here)
//	publish   the routing snapshot of the next layout, under the topic's
//	          routeMu: afterwards no append routed by the old one is on its
//	          way, each is in a mailbox
//	retire    the sealed segments' actors stop after a grace period
//	remove    the deleted segments' actors stop and their logs go
//	reseal    the sealed buckets are sealed again by the published layout
//	          (a bucket that restarted before the seal read it as active)
//	handover  each sealed bucket forwards what it held, in order, to the
//	          successors owning the keys, and answers
//	open      the created segments take what they held back, behind what
//	          was handed over to them
//	announce  the layout push and the change's metrics
//
// So a key's appends that met the seal land in its successor before any
// routed there directly: per-key order holds for producers that know
// nothing of layouts.
//
// Undoing: a step up to the commit that fails undoes itself and every
// step before it, in reverse (unseal: the held appends are appended where
// they were sent; abandon: the spawned segments stop and their logs go,
// their ids will be allocated again); a step that fails in part is undone
// whole, which each undo allows (unsealing a bucket that never sealed,
// abandoning a segment never spawned, change nothing). A failed persist
// also reloads: the store's record may be newer than the controller's (a
// conflict) or hold the next layout after all (a timeout). Steps after
// the commit cannot undo what the store holds: they roll forward, and one
// that fails reloads, serving what the store holds.

// StepKind names a step of a layout change, or of its undoing.
type StepKind string

// The steps of a change, in the order PlanChange lists them.
const (
	StepSpawn    StepKind = "spawn"
	StepSeal     StepKind = "seal"
	StepPersist  StepKind = "persist"
	StepPublish  StepKind = "publish"
	StepRetire   StepKind = "retire"
	StepRemove   StepKind = "remove"
	StepReseal   StepKind = "reseal"
	StepHandOver StepKind = "handover"
	StepOpen     StepKind = "open"
	StepAnnounce StepKind = "announce"
)

// The steps that undo a failed change (Plan.Rollback).
const (
	// StepUnseal reverts a seal: what the buckets held is appended there.
	StepUnseal StepKind = "unseal"
	// StepAbandon stops the spawned segments and removes their logs.
	StepAbandon StepKind = "abandon"
	// StepReload has the controller read its record from the store again
	// (it restarts).
	StepReload StepKind = "reload"
)

// Step is one step of a change, as data.
type Step struct {
	Kind StepKind
	// Segments are the segments the step acts on: the created ones
	// (spawn, open, abandon), the retiring ones (seal, retire, reseal,
	// handover, unseal) or the deleted ones (remove); none for the others.
	Segments []SegmentID
	// To are the successors a handover forwards to: the created segments.
	To []SegmentID
	// Epoch is the epoch of the next layout, which seal and reseal seal
	// at and persist, publish and announce write; 0 for the others.
	Epoch uint64
	// Undo is the step that undoes this one if it or a later one up to
	// the commit fails; "" when there is nothing to undo.
	Undo StepKind
}

// String shows the step as the plan scripts print it.
func (s Step) String() string {
	var b strings.Builder
	b.WriteString(string(s.Kind))
	if len(s.Segments) > 0 {
		fmt.Fprintf(&b, " %v", s.Segments)
	}
	switch s.Kind {
	case StepSpawn:
		b.WriteString(" gated")
	case StepSeal, StepReseal:
		fmt.Fprintf(&b, " at epoch %d", s.Epoch)
	case StepPersist:
		fmt.Fprintf(&b, " epoch %d (compare-and-swap)", s.Epoch)
	case StepPublish, StepAnnounce:
		fmt.Fprintf(&b, " epoch %d", s.Epoch)
	case StepHandOver:
		fmt.Fprintf(&b, " to %v", s.To)
	case StepRetire:
		b.WriteString(" after the seal's grace")
	case StepRemove:
		b.WriteString(" (logs after the read grace)")
	}
	return b.String()
}

// Plan is a layout change as data: the layout it makes, what it seals,
// creates and deletes, and the steps that carry it out.
type Plan struct {
	Op Op
	// Cur is the epoch of the layout the change starts from.
	Cur uint64
	// Next is the layout the change writes. Its created segments have no
	// owner yet (but a relocation's): the controller places them before
	// the first step.
	Next Layout
	// Sealed are the segments active before and sealed by the change (the
	// retiring ones), Created those it creates, Deleted those it marks
	// deleted; each in id order.
	Sealed, Created, Deleted []SegmentID
	// Steps are the steps, in order.
	Steps []Step
	// Commit is the index in Steps of the persist step: steps up to it
	// are undone when one fails (Rollback), steps after it roll forward.
	Commit int
}

// PlanChange plans op on cur: the layout cur.Apply(op) makes and the steps
// that take a running topic there. It returns Apply's errors (ErrStale for
// an op decided at another epoch) and plans nothing then.
func PlanChange(cur Layout, op Op) (Plan, error) {
	next, err := cur.Apply(op)
	if err != nil {
		return Plan{}, err
	}
	p := Plan{Op: op, Cur: cur.Epoch, Next: next}
	p.Sealed, p.Created = diffActive(cur, next)
	p.Deleted = newlyDeleted(cur, next)
	add := func(s Step) { p.Steps = append(p.Steps, s) }
	epoch := next.Epoch
	if len(p.Created) > 0 {
		add(Step{Kind: StepSpawn, Segments: p.Created, Undo: StepAbandon})
	}
	if len(p.Sealed) > 0 {
		add(Step{Kind: StepSeal, Segments: p.Sealed, Epoch: epoch, Undo: StepUnseal})
	}
	p.Commit = len(p.Steps)
	add(Step{Kind: StepPersist, Epoch: epoch})
	add(Step{Kind: StepPublish, Epoch: epoch})
	if len(p.Sealed) > 0 {
		add(Step{Kind: StepRetire, Segments: p.Sealed})
	}
	if len(p.Deleted) > 0 {
		add(Step{Kind: StepRemove, Segments: p.Deleted})
	}
	if len(p.Sealed) > 0 {
		add(Step{Kind: StepReseal, Segments: p.Sealed, Epoch: epoch})
		add(Step{Kind: StepHandOver, Segments: p.Sealed, To: p.Created})
	}
	if len(p.Created) > 0 {
		add(Step{Kind: StepOpen, Segments: p.Created})
	}
	add(Step{Kind: StepAnnounce, Epoch: epoch})
	return p, nil
}

// Rollback returns the steps that undo the change when Steps[failed]
// fails: up to the commit, the undo of that step and of every one before
// it, latest first, and a reload when the persist itself failed; after
// the commit, only a reload (the store holds the next layout, which the
// controller then serves).
func (p Plan) Rollback(failed int) []Step {
	if failed > p.Commit {
		return []Step{{Kind: StepReload}}
	}
	var out []Step
	for k := min(failed, len(p.Steps)-1); k >= 0; k-- {
		if s := p.Steps[k]; s.Undo != "" {
			out = append(out, Step{Kind: s.Undo, Segments: s.Segments})
		}
	}
	if failed == p.Commit {
		out = append(out, Step{Kind: StepReload})
	}
	return out
}

// String shows the plan: a head line, then each step numbered from 1 with
// what undoes the change if that step fails.
func (p Plan) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: epoch %d -> %d", p.Op, p.Cur, p.Next.Epoch)
	for _, part := range []struct {
		verb string
		ids  []SegmentID
	}{{"seals", p.Sealed}, {"creates", p.Created}, {"deletes", p.Deleted}} {
		if len(part.ids) > 0 {
			fmt.Fprintf(&b, ", %s %v", part.verb, part.ids)
		}
	}
	for k, s := range p.Steps {
		fmt.Fprintf(&b, "\n%d %s", k+1, s)
		if k == p.Commit {
			b.WriteString(" [commit]")
		}
		undo := p.Rollback(k)
		names := make([]string, len(undo))
		for i, u := range undo {
			names[i] = u.String()
		}
		fmt.Fprintf(&b, "; if it fails: %s", strings.Join(names, ", "))
	}
	return b.String()
}

// diffActive returns the segments active in cur but not in next (sealed by
// the change), and the reverse (created), in id order.
func diffActive(cur, next Layout) (sealed, created []SegmentID) {
	active := func(l Layout, id SegmentID) bool {
		s, ok := l.Segment(id)
		return ok && s.State == StateActive
	}
	for _, s := range cur.Segments {
		if s.State == StateActive && !active(next, s.ID) {
			sealed = append(sealed, s.ID)
		}
	}
	for _, s := range next.Segments {
		if s.State == StateActive && !active(cur, s.ID) {
			created = append(created, s.ID)
		}
	}
	return sealed, created
}

// newlyDeleted returns the segments deleted in next but not in cur.
func newlyDeleted(cur, next Layout) []SegmentID {
	var out []SegmentID
	for _, s := range next.Segments {
		if s.State != StateDeleted {
			continue
		}
		if was, ok := cur.Segment(s.ID); !ok || was.State != StateDeleted {
			out = append(out, s.ID)
		}
	}
	return out
}
