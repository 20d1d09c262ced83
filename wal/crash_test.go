package wal_test

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/braidmq/braid/wal"
	"github.com/braidmq/braid/wal/crashfs"
)

// The crash test: a scripted workload on a strict crash file system
// (crashfs.Mem), run once to count its changing operations, then once for
// every operation, dying right before it and crashing (everything not
// synced is lost). Each time, the log must open, hold no hole, and hold
// every record that was acknowledged, as it was acknowledged.

// model is what a log holds: recs[o] for o in [first, next); for a log of
// raft entries, ids[o] is the entry that holds offset o.
type model struct {
	first uint64
	recs  []wal.Record
	ids   []wal.EntryID
}

func (m model) next() uint64 { return uint64(len(m.recs)) }

func (m model) clone() model {
	return model{first: m.first, recs: slices.Clone(m.recs), ids: slices.Clone(m.ids)}
}

// crashRecord is record i of the workload: sizes from a few bytes to past
// a file, so that appends roll files.
func crashRecord(i int) wal.Record {
	size := []int{3, 40, 200, 900, 2500}[i%5]
	payload := bytes.Repeat([]byte{byte('a' + i%26)}, size)
	copy(payload, fmt.Sprintf("#%d#", i))
	return wal.Record{Timestamp: int64(1_700_000_000_000 + i), Key: []byte(fmt.Sprintf("k%d", i%7)), Payload: payload}
}

// step is one operation of the workload: do runs it on the log (reopening
// it for a reopen step), apply says what it does to the model.
type step struct {
	name  string
	do    func(l **wal.Log, opts wal.Options) error
	apply func(m model) model
}

const crashDir = "/data/log"

// reopenStep closes the log and opens it again.
func reopenStep() step {
	return step{
		name: "close and open",
		do: func(l **wal.Log, opts wal.Options) error {
			if err := (*l).Close(); err != nil {
				return err
			}
			var err error
			*l, err = wal.Open(crashDir, opts)
			return err
		},
		apply: func(m model) model { return m },
	}
}

func crashWorkload() []step {
	n := 0
	appendStep := func(count int) step {
		recs := make([]wal.Record, count)
		for i := range recs {
			recs[i] = crashRecord(n)
			n++
		}
		return step{
			name: fmt.Sprintf("append %d", count),
			do: func(l **wal.Log, _ wal.Options) error {
				_, err := (*l).Append(recs...)
				return err
			},
			apply: func(m model) model { m.recs = append(m.recs, recs...); return m },
		}
	}
	// Writes overlapped with the commit of the ones before, as a bucket's
	// committer does.
	pipelined := func(batches int) step {
		var all [][]wal.Record
		for range batches {
			all = append(all, []wal.Record{crashRecord(n), crashRecord(n + 1)})
			n += 2
		}
		return step{
			name: fmt.Sprintf("pipelined %d", batches),
			do: func(l **wal.Log, _ wal.Options) error {
				return writeCommittingBeside(*l, len(all), func(i int) error {
					_, err := (*l).Write(all[i]...)
					return err
				})
			},
			apply: func(m model) model {
				for _, recs := range all {
					m.recs = append(m.recs, recs...)
				}
				return m
			},
		}
	}
	truncateHead := func(before func(model) uint64) step {
		var at uint64
		return step{
			name: "truncate head",
			do:   func(l **wal.Log, _ wal.Options) error { return (*l).TruncateHead(at) },
			apply: func(m model) model {
				at = before(m)
				m.first = max(m.first, at)
				return m
			},
		}
	}
	truncateTail := func(from func(model) uint64) step {
		var at uint64
		return step{
			name: "truncate tail",
			do:   func(l **wal.Log, _ wal.Options) error { return (*l).TruncateTail(at) },
			apply: func(m model) model {
				at = from(m)
				m.recs = m.recs[:at]
				m.ids = m.ids[:min(uint64(len(m.ids)), at)]
				return m
			},
		}
	}
	// A consumer group's compaction: a snapshot appended, then the head
	// before it dropped.
	compact := func() step {
		snap := crashRecord(n)
		n++
		return step{
			name: "compact",
			do: func(l **wal.Log, _ wal.Options) error {
				off, err := (*l).Append(snap)
				if err != nil {
					return err
				}
				return (*l).TruncateHead(off)
			},
			apply: func(m model) model {
				m.recs = append(m.recs, snap)
				m.first = m.next() - 1
				return m
			},
		}
	}
	reopen := reopenStep()
	sync := step{name: "sync", do: func(l **wal.Log, _ wal.Options) error { return (*l).Sync() }, apply: func(m model) model { return m }}

	var steps []step
	for i := range 10 {
		steps = append(steps, appendStep(1+i%4))
	}
	steps = append(steps, pipelined(3), truncateHead(func(m model) uint64 { return 5 }))
	for i := range 5 {
		steps = append(steps, appendStep(1+i%3))
	}
	steps = append(steps, truncateTail(func(m model) uint64 { return m.next() - 3 }), sync, reopen)
	for range 4 {
		steps = append(steps, appendStep(2))
	}
	steps = append(steps,
		truncateHead(func(m model) uint64 { return (m.first + m.next()) / 2 }),
		compact(), appendStep(3), compact(), reopen, appendStep(1))
	return steps
}

// writeCommittingBeside runs write(0), ..., write(n-1) on l, each
// followed by a commit that runs beside the next write, as a bucket's
// committer does: a write that rolls waits for the commit in flight, so
// one goroutine cannot do both.
func writeCommittingBeside(l *wal.Log, n int, write func(i int) error) error {
	var inFlight chan error
	wait := func() error {
		if inFlight == nil {
			return nil
		}
		err := <-inFlight
		inFlight = nil
		return err
	}
	for i := range n {
		if err := write(i); err != nil {
			_ = wait()
			return err
		}
		if err := wait(); err != nil {
			return err
		}
		inFlight = make(chan error, 1)
		go func(done chan<- error) {
			_, err := l.StartCommit().Wait()
			done <- err
		}(inFlight)
	}
	return wait()
}

// crashEachOperation runs workload on a crash file system once to count
// its changing operations, checks the log it leaves, then runs it again
// dying before each of them, checking what recovers (check gets what was
// acknowledged and what the step in flight would have made). It returns
// the operations and the crash points by step.
func crashEachOperation(t *testing.T, opts wal.Options, workload func() []step, check func(mem *crashfs.Mem, acked, attempted model)) (int, map[string]int) {
	t.Helper()
	mem := crashfs.NewMem()
	opts.FS = mem
	acked, _, failed := runSteps(t, opts, workload())
	if failed != "" {
		t.Fatalf("the workload failed without a crash at %s", failed)
	}
	total := mem.Ops()
	check(mem, acked, acked)
	steps := map[string]int{}
	for k := range total {
		mem := crashfs.NewMem()
		opts.FS = mem
		mem.DieAfter(k)
		acked, attempted, failed := runSteps(t, opts, workload())
		mem.Crash()
		steps[failed]++
		check(mem, acked, attempted)
		if t.Failed() {
			t.Fatalf("crash before operation %d of %d, in %q", k, total, failed)
		}
	}
	return total, steps
}

// runWorkload runs the workload on mem until a step fails; it returns the
// model after the last step that succeeded and after the one that failed
// (the same when none did).
func runWorkload(t *testing.T, mem *crashfs.Mem, opts wal.Options) (acked, attempted model, failed string) {
	t.Helper()
	return runSteps(t, opts, crashWorkload())
}

// runSteps is runWorkload of steps.
func runSteps(t *testing.T, opts wal.Options, steps []step) (acked, attempted model, failed string) {
	t.Helper()
	l, err := wal.Open(crashDir, opts)
	if err != nil {
		return model{}, model{}, "open"
	}
	for _, s := range steps {
		next := s.apply(acked.clone())
		if err := s.do(&l, opts); err != nil {
			if !errors.Is(err, crashfs.ErrDied) {
				t.Fatalf("%s: %v", s.name, err)
			}
			return acked, next, s.name
		}
		acked = next
	}
	if err := l.Close(); err != nil {
		if !errors.Is(err, crashfs.ErrDied) {
			t.Fatalf("close: %v", err)
		}
		return acked, acked, "close"
	}
	return acked, acked, ""
}

// checkRecovered opens the log after a crash and checks it against what
// was acknowledged (acked) and what the step in flight would have made it
// (attempted).
func checkRecovered(t *testing.T, mem *crashfs.Mem, opts wal.Options, acked, attempted model) {
	t.Helper()
	checkRecoveredIn(t, crashDir, opts, acked, attempted)
}

// checkRecoveredIn is checkRecovered for the log in dir.
func checkRecoveredIn(t *testing.T, dir string, opts wal.Options, acked, attempted model) {
	t.Helper()
	var holes []wal.Hole
	opts.OnHole = func(h wal.Hole) { holes = append(holes, h) }
	l, err := wal.Open(dir, opts)
	if err != nil {
		t.Fatalf("open after the crash: %v", err)
	}
	defer l.Close()
	first, next := l.FirstOffset(), l.NextOffset()
	if lo, hi := min(acked.first, attempted.first), max(acked.first, attempted.first); first < lo || first > hi {
		t.Fatalf("first offset %d, want in [%d, %d]", first, lo, hi)
	}
	if lo, hi := min(acked.next(), attempted.next()), max(acked.next(), attempted.next()); next < lo || next > hi {
		t.Fatalf("next offset %d, want in [%d, %d]", next, lo, hi)
	}
	for off := first; off < next; off++ {
		got, err := l.Read(off)
		if err != nil {
			t.Fatalf("read %d of [%d, %d): %v", off, first, next, err)
		}
		ok := false
		for _, m := range []model{acked, attempted} {
			if off < m.next() && equalRecords(got, m.recs[off]) {
				ok = true
			}
		}
		if !ok {
			t.Fatalf("offset %d holds %q, which was never written there", off, got.Payload[:min(8, len(got.Payload))])
		}
	}
	// What both the acknowledged state and the step in flight keep must
	// have survived.
	for off := max(acked.first, attempted.first); off < min(acked.next(), attempted.next()); off++ {
		if off < first || off >= next {
			t.Fatalf("acknowledged offset %d is gone (the log holds [%d, %d))", off, first, next)
		}
	}
	if len(holes) > 0 || len(l.Holes()) > 0 {
		t.Fatalf("a crash left holes: %+v", holes)
	}
	// The log goes on.
	if off, err := l.Append(crashRecord(99999)); err != nil || off != next {
		t.Fatalf("append after recovery: offset %d, %v; want %d", off, err, next)
	}
}

func equalRecords(a, b wal.Record) bool {
	return a.Timestamp == b.Timestamp && bytes.Equal(a.Key, b.Key) && bytes.Equal(a.Payload, b.Payload)
}

func TestCrashAtEveryOperation(t *testing.T) {
	// Preallocation on and off; and on with its descriptors in a file
	// cache of one, so that every use of a file but the last opens it
	// again.
	for _, c := range []struct {
		pre   int
		files bool
	}{{0, false}, {-1, false}, {0, true}} {
		pre := c.pre
		opts := wal.Options{Durability: wal.DurabilityAlways, SegmentBytes: 1500, Preallocate: pre}
		if c.files {
			opts.Files = wal.NewFileCache(1)
		}
		mem := crashfs.NewMem()
		opts.FS = mem
		acked, _, failed := runWorkload(t, mem, opts)
		if failed != "" {
			t.Fatalf("the workload failed without a crash at %s", failed)
		}
		total := mem.Ops()
		if total < 100 {
			t.Fatalf("the workload has %d operations; too few to mean much", total)
		}
		checkRecovered(t, mem, opts, acked, acked)
		steps := map[string]int{}
		for k := range total {
			mem := crashfs.NewMem()
			opts.FS = mem
			mem.DieAfter(k)
			acked, attempted, failed := runWorkload(t, mem, opts)
			mem.Crash()
			steps[failed]++
			checkRecovered(t, mem, opts, acked, attempted)
			if t.Failed() {
				t.Fatalf("preallocate %d, file cache %v: crash before operation %d of %d, in %q", pre, c.files, k, total, failed)
			}
		}
		t.Logf("preallocate %d, file cache %v: %d crash points, by step: %v", pre, c.files, total, steps)
	}
}
