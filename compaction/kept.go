package compaction

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// keptOffsets walks the kept offsets of one unit in ascending order: from
// memory (one pass), or from the sorted runs the passes spilled, merged
// as they are walked.
type keptOffsets struct {
	mem  []uint64
	runs []*run
	file *os.File
}

// run is one pass's sorted offsets of a unit, read from its spill file.
type run struct {
	r    *bufio.Reader
	left int
	cur  uint64
	ok   bool
}

func (r *run) advance() error {
	if r.left == 0 {
		r.ok = false
		return nil
	}
	var b [8]byte
	if _, err := io.ReadFull(r.r, b[:]); err != nil {
		return fmt.Errorf("compaction: reading spilled offsets: %w", err)
	}
	r.cur, r.ok = binary.LittleEndian.Uint64(b[:]), true
	r.left--
	return nil
}

// has reports whether off is kept; offsets must be asked in ascending
// order.
func (k *keptOffsets) has(off uint64) (bool, error) {
	if k == nil {
		return false, nil
	}
	if k.runs == nil {
		for len(k.mem) > 0 && k.mem[0] < off {
			k.mem = k.mem[1:]
		}
		return len(k.mem) > 0 && k.mem[0] == off, nil
	}
	found := false
	for _, r := range k.runs {
		for r.ok && r.cur < off {
			if err := r.advance(); err != nil {
				return false, err
			}
		}
		found = found || r.ok && r.cur == off
	}
	return found, nil
}

func (k *keptOffsets) close() error {
	if k.file != nil {
		return k.file.Close()
	}
	return nil
}

// spill keeps each unit's kept offsets of every pass in a file of its
// own, one sorted run after another.
type spill struct {
	dir  string
	runs [][][2]int64 // by unit: (start byte, count) of each run
}

func newSpill(tmpDir string, units int) (*spill, error) {
	dir, err := os.MkdirTemp(tmpDir, "braid-compaction-")
	if err != nil {
		return nil, err
	}
	return &spill{dir: dir, runs: make([][][2]int64, units)}, nil
}

func (s *spill) path(u int) string { return filepath.Join(s.dir, fmt.Sprintf("u%d", u)) }

// add appends a run of sorted offsets to unit u's file.
func (s *spill) add(u int, offs []uint64) error {
	if len(offs) == 0 {
		return nil
	}
	f, err := os.OpenFile(s.path(u), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	info, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	w := bufio.NewWriter(f)
	var b [8]byte
	for _, off := range offs {
		binary.LittleEndian.PutUint64(b[:], off)
		w.Write(b[:])
	}
	err = errors.Join(w.Flush(), f.Close())
	if err == nil {
		s.runs[u] = append(s.runs[u], [2]int64{info.Size(), int64(len(offs))})
	}
	return err
}

// merged opens unit u's runs for walking.
func (s *spill) merged(u int) (*keptOffsets, error) {
	if len(s.runs[u]) == 0 {
		return &keptOffsets{}, nil
	}
	f, err := os.Open(s.path(u))
	if err != nil {
		return nil, err
	}
	k := &keptOffsets{file: f}
	for _, r := range s.runs[u] {
		rn := &run{r: bufio.NewReaderSize(io.NewSectionReader(f, r[0], r[1]*8), 4096), left: int(r[1])}
		if err := rn.advance(); err != nil {
			f.Close()
			return nil, err
		}
		k.runs = append(k.runs, rn)
	}
	return k, nil
}

func (s *spill) remove() error { return os.RemoveAll(s.dir) }
