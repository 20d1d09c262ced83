package wal

import (
	"errors"
	"fmt"
	"slices"
	"sort"
)

// ErrHole is what a HoleError is (errors.Is): the records asked for were
// lost to damage in the log's files.
var ErrHole = errors.New("braid/wal: records lost")

// Hole is a run of offsets whose records are lost: a damaged part of a file
// (a flipped byte, a cut, garbage) with records after it that are whole. A
// Log keeps the whole frames on both sides and reads the offsets between as
// a hole: Read and ReadRange return a *HoleError for them, so a reader can
// skip to To. Nothing is rewritten: the damaged bytes stay in the file, and
// every Open (or first read of the file) finds the hole again.
type Hole struct {
	// From and To are the lost offsets, [From, To).
	From, To uint64
	// File is the path of the file the damage is in.
	File string
	// Pos is where the damage starts in File, and Bytes how many bytes it
	// spans. Bytes is 0 where a file's frames skip offsets with nothing
	// between them, which a truncation into a hole leaves, or where a file
	// ends before the offset the next one starts at.
	Pos, Bytes int64
	// Reason is what was found at Pos.
	Reason string
}

// String describes the hole for a log line.
func (h Hole) String() string {
	return fmt.Sprintf("offsets [%d, %d) lost in %s at bytes [%d, %d): %s", h.From, h.To, h.File, h.Pos, h.Pos+h.Bytes, h.Reason)
}

// HoleError is returned by Read and ReadRange for an offset in a Hole.
type HoleError struct {
	Hole
}

func (e *HoleError) Error() string { return "braid/wal: " + e.Hole.String() }

// Is makes errors.Is(err, ErrHole) true.
func (e *HoleError) Is(target error) bool { return target == ErrHole }

// holeIn returns the hole of holes (sorted by From) that holds off, or nil.
func holeIn(holes []Hole, off uint64) *Hole {
	j := sort.Search(len(holes), func(j int) bool { return holes[j].To > off })
	if j < len(holes) && holes[j].From <= off {
		return &holes[j]
	}
	return nil
}

// Holes returns the holes the log knows of, by offset: those Open found in
// the last file, and those found since in older files, as they were first
// read. A file is indexed when it is first read, so a hole in a file not
// read since Open is not listed yet.
func (l *Log) Holes() []Hole {
	l.readMu.Lock()
	defer l.readMu.Unlock()
	return slices.Clone(l.holes)
}

// addHolesLocked records holes the log had not known of and reports each
// new one to Options.OnHole. The caller holds readMu (or is Open).
func (l *Log) addHolesLocked(holes []Hole) {
	for _, h := range holes {
		if h.From == h.To {
			// Damaged bytes, though no record was lost: reported once.
			if !slices.ContainsFunc(l.emptyHoles, func(e Hole) bool { return e.File == h.File && e.Pos == h.Pos }) {
				l.emptyHoles = append(l.emptyHoles, h)
				if l.opts.OnHole != nil {
					l.opts.OnHole(h)
				}
			}
			continue
		}
		if holeIn(l.holes, h.From) != nil {
			continue
		}
		i := sort.Search(len(l.holes), func(i int) bool { return l.holes[i].From > h.From })
		l.holes = slices.Insert(l.holes, i, h)
		if l.opts.OnHole != nil {
			l.opts.OnHole(h)
		}
	}
}

// clipHolesLocked forgets the lost offsets outside [first, next), after a
// truncation; the caller holds readMu.
func (l *Log) clipHolesLocked(first, next uint64) {
	kept := l.holes[:0]
	for _, h := range l.holes {
		h.From, h.To = max(h.From, first), min(h.To, next)
		if h.From < h.To {
			kept = append(kept, h)
		}
	}
	l.holes = kept
}
