package wal

import (
	"bytes"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

func lazyRead(t *testing.T, fsys FS, name string) []byte {
	t.Helper()
	f, err := fsys.OpenFile(name, os.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, info.Size())
	if n, err := f.ReadAt(b, 0); n != len(b) && err != io.EOF {
		t.Fatal(err)
	}
	return b
}

// TestLazyFSKeepsOnlyWhatIsSynced: writes, truncations and extensions
// read back as written (through another open too) before any sync; a
// file system made anew over the same directory (the process killed)
// sees what the last sync wrote and nothing after it.
func TestLazyFSKeepsOnlyWhatIsSynced(t *testing.T) {
	dir := t.TempDir()
	name := filepath.Join(dir, "f")
	fsys := NewLazyFS(OSFS)
	f, err := fsys.OpenFile(name, os.O_CREATE|os.O_RDWR, 0o640)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	var model []byte // what the file holds, synced or not
	var synced []byte
	for step := range 400 {
		switch k := r.IntN(10); {
		case k < 6:
			off := r.IntN(len(model) + 64)
			data := make([]byte, 1+r.IntN(100))
			for i := range data {
				data[i] = byte(r.IntN(256))
			}
			if _, err := f.WriteAt(data, int64(off)); err != nil {
				t.Fatal(err)
			}
			if end := off + len(data); end > len(model) {
				model = append(model, make([]byte, end-len(model))...)
			}
			copy(model[off:], data)
		case k < 8:
			size := r.IntN(len(model) + 32)
			if err := f.Truncate(int64(size)); err != nil {
				t.Fatal(err)
			}
			if size < len(model) {
				model = model[:size]
			} else {
				model = append(model, make([]byte, size-len(model))...)
			}
		default:
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
			synced = bytes.Clone(model)
		}
		if step%25 == 0 {
			if got := lazyRead(t, fsys, name); !bytes.Equal(got, model) {
				t.Fatalf("step %d: read %d bytes, want the %d written", step, len(got), len(model))
			}
		}
	}
	if got := lazyRead(t, fsys, name); !bytes.Equal(got, model) {
		t.Fatalf("read %d bytes, want the %d written", len(got), len(model))
	}
	// Killed: what is on the disk is what the last sync wrote.
	if got := lazyRead(t, NewLazyFS(OSFS), name); !bytes.Equal(got, synced) {
		t.Fatalf("after the kill: %d bytes, want the %d synced", len(got), len(synced))
	}
}

// TestLogOnLazyFSLosesOnlyWhatItDidNotSync: a log on the lazy file
// system, killed, keeps every record it acknowledged as durable and
// loses the ones appended since its last sync.
func TestLogOnLazyFSLosesOnlyWhatItDidNotSync(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir, Options{Durability: DurabilityNone, FS: NewLazyFS(OSFS)})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		if _, err := l.Append(Record{Key: []byte("k"), Payload: []byte{byte(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		if _, err := l.Append(Record{Key: []byte("k"), Payload: []byte{byte(100 + i)}}); err != nil {
			t.Fatal(err)
		}
	}
	if got := l.NextOffset(); got != 150 {
		t.Fatalf("next offset %d before the kill, want 150", got)
	}
	// Killed: the log is not closed; a new process opens the directory.
	again, err := Open(dir, Options{Durability: DurabilityNone, FS: NewLazyFS(OSFS)})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if got := again.NextOffset(); got != 100 {
		t.Fatalf("after the kill the log ends at %d, want the 100 synced", got)
	}
}
