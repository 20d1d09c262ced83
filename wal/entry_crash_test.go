package wal_test

import (
	"fmt"
	"testing"

	"github.com/braidmq/braid/wal"
	"github.com/braidmq/braid/wal/crashfs"
)

// The crash test of a replicated log: raft entries appended as a leader
// does (AppendEntry) and as a follower's commit round does (WriteEntry,
// then a commit beside the next write), a conflicting suffix cut and
// written again at a later term, the head dropped inside an entry, and a
// reopen; a crash before every operation. Besides every acknowledged
// record, the recovered log must say, for every record, the entry it was
// written in.

// entryWorkload returns the steps; entries get indexes from 1 at term 1.
func entryWorkload() []step {
	n := 0     // records made
	index := 0 // the last entry's index, as the steps are built
	// entries makes count entries of 1-3 records at term, the first at
	// index from.
	entries := func(from, count int, term uint64) ([]wal.EntryID, [][]wal.Record) {
		var ids []wal.EntryID
		var recs [][]wal.Record
		for i := range count {
			batch := make([]wal.Record, 1+(from+i)%3)
			for k := range batch {
				batch[k] = crashRecord(n)
				n++
			}
			ids = append(ids, wal.EntryID{Term: term, Index: uint64(from + i)})
			recs = append(recs, batch)
		}
		return ids, recs
	}
	applyEntries := func(m model, ids []wal.EntryID, recs [][]wal.Record) model {
		for i := range ids {
			for _, r := range recs[i] {
				m.recs = append(m.recs, r)
				m.ids = append(m.ids, ids[i])
			}
		}
		return m
	}
	leader := func(count int, term uint64) step {
		ids, recs := entries(index+1, count, term)
		index += count
		return step{
			name: fmt.Sprintf("leader appends %d at term %d", count, term),
			do: func(l **wal.Log, _ wal.Options) error {
				for i := range ids {
					if _, err := (*l).AppendEntry(ids[i], recs[i]...); err != nil {
						return err
					}
				}
				return nil
			},
			apply: func(m model) model { return applyEntries(m, ids, recs) },
		}
	}
	// follower writes entries and commits each beside the next write, as
	// a commit round does.
	follower := func(count int, term uint64) step {
		ids, recs := entries(index+1, count, term)
		index += count
		return step{
			name: fmt.Sprintf("follower writes %d at term %d", count, term),
			do: func(l **wal.Log, _ wal.Options) error {
				return writeCommittingBeside(*l, len(ids), func(i int) error {
					_, err := (*l).WriteEntryData(ids[i], wal.EncodeEntryData(nil, recs[i]))
					return err
				})
			},
			apply: func(m model) model { return applyEntries(m, ids, recs) },
		}
	}
	// conflict cuts the log from the entry back entries before the last,
	// as a follower does when a new leader's log differs there (one step),
	// and writes count entries from there at term (the next).
	conflict := func(back, count int, term uint64) []step {
		from := index - back + 1
		ids, recs := entries(from, count, term)
		index = from + count - 1
		var at uint64
		cut := step{
			name: fmt.Sprintf("cut from entry %d", from),
			do: func(l **wal.Log, _ wal.Options) error {
				refs, err := (*l).Entries(0)
				if err != nil {
					return err
				}
				cut := (*l).NextOffset()
				for _, e := range refs {
					if e.Index == uint64(from) {
						cut = e.First
					}
				}
				if cut != at {
					return fmt.Errorf("entry %d starts at offset %d, the model says %d", from, cut, at)
				}
				return (*l).TruncateTail(cut)
			},
			apply: func(m model) model {
				at = uint64(len(m.ids))
				for o, id := range m.ids {
					if id.Index == uint64(from) {
						at = uint64(o)
						break
					}
				}
				m.recs, m.ids = m.recs[:at], m.ids[:at]
				return m
			},
		}
		write := step{
			name: fmt.Sprintf("new leader's entries from %d at term %d", from, term),
			do: func(l **wal.Log, _ wal.Options) error {
				for i := range ids {
					if _, err := (*l).AppendEntry(ids[i], recs[i]...); err != nil {
						return err
					}
				}
				return nil
			},
			apply: func(m model) model { return applyEntries(m, ids, recs) },
		}
		return []step{cut, write}
	}
	headInside := step{
		name: "truncate head inside an entry",
		do:   nil, // set below, once the model gives the offset
	}
	var headAt uint64
	headInside.do = func(l **wal.Log, _ wal.Options) error { return (*l).TruncateHead(headAt) }
	headInside.apply = func(m model) model {
		// The second record of the first entry of three records.
		for o := 0; o+2 < len(m.ids); o++ {
			if m.ids[o] == m.ids[o+2] && uint64(o) >= m.first {
				headAt = uint64(o + 1)
				break
			}
		}
		m.first = max(m.first, headAt)
		return m
	}
	reopen := reopenStep()

	steps := []step{leader(4, 1), follower(3, 1), leader(2, 1)}
	steps = append(steps, conflict(3, 4, 2)...)
	steps = append(steps, reopen, follower(3, 2))
	steps = append(steps, conflict(2, 1, 3)...)
	steps = append(steps, headInside, leader(3, 3), reopen)
	steps = append(steps, conflict(1, 2, 4)...)
	return steps
}

// checkEntries opens the recovered log and checks the entry of every
// record against what the model holds at its offset.
func checkEntries(t *testing.T, opts wal.Options, acked, attempted model) {
	t.Helper()
	l, err := wal.Open(crashDir, opts)
	if err != nil {
		t.Fatalf("open after the crash: %v", err)
	}
	defer l.Close()
	refs, err := l.Entries(0)
	if err != nil {
		t.Fatalf("entries: %v", err)
	}
	next := l.FirstOffset()
	for i, e := range refs {
		if e.First != next && !(i == 0 && e.First < next) {
			t.Fatalf("entry %+v does not start where the one before it ends (%d)", e, next)
		}
		if i > 0 && (e.Index != refs[i-1].Index+1 || e.Term < refs[i-1].Term) {
			t.Fatalf("entry %+v follows %+v", e, refs[i-1])
		}
		for off := max(e.First, l.FirstOffset()); off < e.Next(); off++ {
			ok := false
			for _, m := range []model{acked, attempted} {
				if off < uint64(len(m.ids)) && m.ids[off] == e.EntryID {
					ok = true
				}
			}
			if !ok {
				t.Fatalf("offset %d is in entry %+v, which never held it", off, e.EntryID)
			}
		}
		next = e.Next()
	}
	if next != l.NextOffset() {
		t.Fatalf("the entries end at %d, the log at %d", next, l.NextOffset())
	}
}

func TestCrashEntriesAtEveryOperation(t *testing.T) {
	for _, pre := range []int{0, -1} {
		opts := wal.Options{Durability: wal.DurabilityAlways, SegmentBytes: 1500, Preallocate: pre}
		total, steps := crashEachOperation(t, opts, entryWorkload, func(mem *crashfs.Mem, acked, attempted model) {
			opts := opts
			opts.FS = mem
			checkEntries(t, opts, acked, attempted)
			checkRecovered(t, mem, opts, acked, attempted)
		})
		// Without preallocation the workload counts 99 or 100 operations
		// from run to run (131 with it): the floor is below both.
		if total < 90 {
			t.Fatalf("the workload has %d operations; too few to mean much", total)
		}
		t.Logf("preallocate %d: %d crash points, by step: %v", pre, total, steps)
	}
}
