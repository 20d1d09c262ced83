package wal_test

import (
	"testing"

	"github.com/braidmq/braid/wal"
	"github.com/braidmq/braid/wal/crashfs"
)

// trimWorkload: a big first file, rolled, then its head trimmed twice (to
// the start of an append's frame, which is where TrimHead lands), a reopen,
// and the file dropped whole; appends between.
func trimWorkload() []step {
	n := 0
	appendStep := func() step {
		rec := crashRecord(n)
		n++
		return step{
			name:  "append",
			do:    func(l **wal.Log, _ wal.Options) error { _, err := (*l).Append(rec); return err },
			apply: func(m model) model { m.recs = append(m.recs, rec); return m },
		}
	}
	var steps []step
	for range 12 {
		steps = append(steps, appendStep())
	}
	steps = append(steps, step{
		name:  "roll",
		do:    func(l **wal.Log, _ wal.Options) error { _, err := (*l).Roll(); return err },
		apply: func(m model) model { return m },
	}, appendStep())
	trim := func(at uint64) step {
		return step{
			name: "trim head",
			do: func(l **wal.Log, _ wal.Options) error {
				_, err := (*l).TrimHead(at, 0)
				return err
			},
			apply: func(m model) model { m.first = at; return m },
		}
	}
	reopen := reopenStep()
	steps = append(steps, trim(4), appendStep(), trim(9), reopen, appendStep(), step{
		name:  "drop the trimmed file",
		do:    func(l **wal.Log, _ wal.Options) error { return (*l).DropFilesBefore(12) },
		apply: func(m model) model { m.first = 12; return m },
	}, reopen, appendStep())
	return steps
}

// TestCrashAtEveryOperationOfAHeadTrim: a crash before any operation of
// trimming a file's head, or dropping a trimmed file, leaves the log at
// the old start or the new one, every record kept whole, and no hole.
func TestCrashAtEveryOperationOfAHeadTrim(t *testing.T) {
	opts := wal.Options{Durability: wal.DurabilityAlways, SegmentBytes: wal.Unlimited}
	first := true
	total, steps := crashEachOperation(t, opts, trimWorkload, func(mem *crashfs.Mem, acked, attempted model) {
		if first && acked.first != 12 {
			t.Fatalf("the workload ends at first offset %d", acked.first)
		}
		first = false
		opts := opts
		opts.FS = mem
		checkRecovered(t, mem, opts, acked, attempted)
	})
	t.Logf("%d crash points, by step: %v", total, steps)
	if steps["trim head"] == 0 || steps["drop the trimmed file"] == 0 {
		t.Fatalf("no crash inside a trim: %v", steps)
	}
}
