package wal_test

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"testing"

	"github.com/braidmq/braid/wal"
	"github.com/braidmq/braid/wal/crashfs"
)

// The journal's crash test: logs committed through a journal (their own
// files never synced by a commit), with rolls, a truncation that cuts
// acknowledged records, checkpoints, a close and reopen, run on the crash
// file system and crashed before each of its changing operations. After
// each crash, the journal is replayed and every log must hold what was
// acknowledged, nothing it cut, and no hole.

const (
	journalRoot = "/data/logs"
	journalDir  = "/data/journal"
)

var journalLogNames = []string{"a", "b", "c"}

// journalRig is the workload's state: the journal, its group and the logs.
type journalRig struct {
	fs    *crashfs.Mem
	j     *wal.Journal
	g     *wal.CommitGroup
	logs  map[string]*wal.Log
	opts  wal.Options
	model map[string]model
}

type journalStep struct {
	name  string
	do    func(r *journalRig) error
	apply func(m map[string]model) // what the step does to the models
}

func cloneModels(m map[string]model) map[string]model {
	out := map[string]model{}
	for k, v := range m {
		out[k] = v.clone()
	}
	return out
}

func journalWorkload() []journalStep {
	n := 0
	round := func(names ...string) journalStep {
		recs := map[string][]wal.Record{}
		for i, name := range names {
			for range 1 + (n+i)%3 {
				recs[name] = append(recs[name], crashRecord(n))
				n++
			}
		}
		return journalStep{
			name: fmt.Sprintf("round %v", names),
			do: func(r *journalRig) error {
				round := r.g.NewRound()
				var pending []*wal.PendingCommit
				for _, name := range names {
					if _, err := r.logs[name].Write(recs[name]...); err != nil {
						return err
					}
					pending = append(pending, r.logs[name].StartCommitIn(round))
				}
				round.Start()
				var errs []error
				for _, p := range pending {
					if _, err := p.Wait(); err != nil {
						errs = append(errs, err)
					}
				}
				return errors.Join(errs...)
			},
			apply: func(m map[string]model) {
				for _, name := range names {
					lm := m[name]
					lm.recs = append(lm.recs, recs[name]...)
					m[name] = lm
				}
			},
		}
	}
	truncateTail := func(name string, keep int) journalStep {
		var at uint64
		return journalStep{
			name: "truncate tail " + name,
			do:   func(r *journalRig) error { return r.logs[name].TruncateTail(at) },
			apply: func(m map[string]model) {
				lm := m[name]
				at = lm.next() - uint64(keep)
				lm.recs = lm.recs[:at]
				m[name] = lm
			},
		}
	}
	checkpoint := journalStep{name: "checkpoint", do: func(r *journalRig) error { return r.j.Checkpoint() }, apply: func(map[string]model) {}}
	reopen := func(name string) journalStep {
		return journalStep{
			name: "reopen " + name,
			do: func(r *journalRig) error {
				if err := r.logs[name].Close(); err != nil {
					return err
				}
				l, err := wal.Open(filepath.Join(journalRoot, name), r.opts)
				r.logs[name] = l
				return err
			},
			apply: func(map[string]model) {},
		}
	}
	var steps []journalStep
	for i := range 6 {
		steps = append(steps, round(journalLogNames[:1+i%3]...))
	}
	steps = append(steps, truncateTail("b", 2), round("b", "c"), round("a", "b"), checkpoint)
	for range 4 {
		steps = append(steps, round("a", "b", "c"))
	}
	steps = append(steps, reopen("c"), round("c", "a"), truncateTail("a", 3), round("a"), checkpoint, round("b"), round("a", "b", "c"))
	return steps
}

// runJournalWorkload runs the workload until a step fails, as runWorkload.
// directBytes is the journal's SyncDirectlyFrom.
func runJournalWorkload(t *testing.T, mem *crashfs.Mem, directBytes int) (acked, attempted map[string]model, failed string) {
	t.Helper()
	acked = map[string]model{}
	r := &journalRig{fs: mem, logs: map[string]*wal.Log{}}
	var err error
	if r.j, err = wal.OpenJournal(journalDir, journalRoot, mem, math.MaxInt64); err != nil {
		return acked, acked, "open journal"
	}
	r.j.SyncDirectlyFrom(directBytes)
	if r.g, err = wal.NewCommitGroup(journalRoot, wal.SyncEach, r.j); err != nil {
		t.Fatal(err)
	}
	// Two descriptors for three logs: their files are closed and opened
	// again as the rounds go round them.
	r.opts = wal.Options{Durability: wal.DurabilityAlways, FS: mem, Journal: r.j, SegmentBytes: 1500, Files: wal.NewFileCache(2)}
	for _, name := range journalLogNames {
		if r.logs[name], err = wal.Open(filepath.Join(journalRoot, name), r.opts); err != nil {
			return acked, acked, "open " + name
		}
		acked[name] = model{}
	}
	for _, s := range journalWorkload() {
		next := cloneModels(acked)
		s.apply(next)
		if err := s.do(r); err != nil {
			if !errors.Is(err, crashfs.ErrDied) {
				t.Fatalf("%s: %v", s.name, err)
			}
			return acked, next, s.name
		}
		acked = next
	}
	return acked, acked, ""
}

// checkJournalRecovered replays the journal and checks every log.
func checkJournalRecovered(t *testing.T, mem *crashfs.Mem, acked, attempted map[string]model) {
	t.Helper()
	rep, err := wal.ReplayJournal(journalDir, journalRoot, mem)
	if err != nil {
		t.Fatalf("replay: %v", err)
	}
	if len(rep.Damaged) > 0 {
		t.Fatalf("replay found damage: %+v", rep)
	}
	for _, name := range journalLogNames {
		checkRecoveredIn(t, filepath.Join(journalRoot, name), wal.Options{FS: mem}, acked[name], attempted[name])
		if t.Failed() {
			t.Fatalf("log %s", name)
		}
	}
}

// TestJournalCrashAtEveryOperation runs the workload with every commit
// through the journal, and with an adaptive journal (SyncDirectlyFrom)
// under which a log that wrote 1,000 bytes or more since its last commit
// syncs its own file instead: rounds then mix both.
func TestJournalCrashAtEveryOperation(t *testing.T) {
	for _, directBytes := range []int{0, 1000} {
		t.Run(fmt.Sprintf("direct=%d", directBytes), func(t *testing.T) {
			t.Parallel()
			journalCrashAtEveryOperation(t, directBytes)
		})
	}
}

func journalCrashAtEveryOperation(t *testing.T, directBytes int) {
	mem := crashfs.NewMem()
	acked, _, failed := runJournalWorkload(t, mem, directBytes)
	if failed != "" {
		t.Fatalf("the workload failed without a crash at %s", failed)
	}
	total := mem.Ops()
	if total < 100 {
		t.Fatalf("the workload has %d operations; too few to mean much", total)
	}
	// The crash with nothing synced by the logs themselves since the last
	// checkpoint: only the journal holds the last rounds.
	mem.Crash()
	checkJournalRecovered(t, mem, acked, acked)
	steps := map[string]int{}
	for k := range total {
		mem := crashfs.NewMem()
		mem.DieAfter(k)
		acked, attempted, failed := runJournalWorkload(t, mem, directBytes)
		mem.Crash()
		steps[failed]++
		checkJournalRecovered(t, mem, acked, attempted)
		if t.Failed() {
			t.Fatalf("crash before operation %d of %d, in %q", k, total, failed)
		}
	}
	t.Logf("%d crash points, by step: %v", total, steps)
}
