package wal

import (
	"bytes"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"testing"
)

// TestBufferedFileReadsAsAFile writes and reads a bufferedFile and a plain
// file side by side, at random: appends at the end of what the buffered
// one holds, zeros ahead of it, overwrites across it, flushes, syncs and
// truncations. Every read returns what the plain file returns.
func TestBufferedFileReadsAsAFile(t *testing.T) {
	dir := t.TempDir()
	open := func(name string) File {
		f, err := OSFS.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_RDWR, 0o640)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	plain, buffered := open("plain"), newBufferedFile(open("buffered"))
	defer plain.Close()
	defer buffered.Close()
	rng := rand.New(rand.NewSource(1))
	size := int64(0)
	chunk := func(n int) []byte {
		p := make([]byte, n)
		rng.Read(p)
		return p
	}
	for step := range 4000 {
		var p []byte
		var off int64
		switch op := rng.Intn(10); {
		case op < 5: // an append, the usual case
			p, off = chunk(1+rng.Intn(3000)), size
		case op == 5: // zeros ahead of the end
			p, off = make([]byte, 1+rng.Intn(9000)), size+int64(rng.Intn(3000))
		case op == 6 && size > 0: // an overwrite anywhere
			off = rng.Int63n(size)
			p = chunk(1 + rng.Intn(2000))
		case op == 7:
			if err := buffered.Sync(); err != nil {
				t.Fatal(err)
			}
		case op == 8 && size > 0:
			size = rng.Int63n(size)
			if err := plain.Truncate(size); err != nil {
				t.Fatal(err)
			}
			if err := buffered.Truncate(size); err != nil {
				t.Fatal(err)
			}
		}
		if p != nil {
			if _, err := plain.WriteAt(p, off); err != nil {
				t.Fatal(err)
			}
			var err error
			if rng.Intn(3) > 0 {
				err = buffered.appendAt(p, off)
			} else {
				_, err = buffered.WriteAt(p, off)
			}
			if err != nil {
				t.Fatal(err)
			}
			size = max(size, off+int64(len(p)))
		}
		// Read a range across the end, and one inside.
		for _, r := range [][2]int64{{max(size-int64(rng.Intn(5000)), 0), int64(1 + rng.Intn(8000))}, {rng.Int63n(size + 1), int64(1 + rng.Intn(500))}} {
			want, got := make([]byte, r[1]), make([]byte, r[1])
			wn, werr := plain.ReadAt(want, r[0])
			gn, gerr := buffered.ReadAt(got, r[0])
			if wn != gn || (werr == io.EOF) != (gerr == io.EOF) || !bytes.Equal(want[:wn], got[:gn]) {
				t.Fatalf("step %d: read %d bytes at %d: buffered %d, %v; plain %d, %v", step, r[1], r[0], gn, gerr, wn, werr)
			}
		}
	}
}
