package crashfs

import (
	"errors"
	"io"
	"os"
	"syscall"
	"testing"

	"github.com/braidmq/braid/wal"
)

func readAll(t *testing.T, fsys wal.FS, name string) (string, error) {
	t.Helper()
	f, err := fsys.OpenFile(name, os.O_RDONLY, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, info.Size())
	if _, err := f.ReadAt(buf, 0); err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	return string(buf), nil
}

func create(t *testing.T, m *Mem, name, data string, sync bool) wal.File {
	t.Helper()
	f, err := m.OpenFile(name, os.O_CREATE|os.O_RDWR, 0o640)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte(data)); err != nil {
		t.Fatal(err)
	}
	if sync {
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// TestMemCrashKeepsOnlyWhatWasSynced: a crash keeps a file's synced data
// and a directory's synced entries, nothing else.
func TestMemCrashKeepsOnlyWhatWasSynced(t *testing.T) {
	m := NewMem()
	if err := m.MkdirAll("/d", 0o750); err != nil {
		t.Fatal(err)
	}
	if err := m.SyncDir("/"); err != nil {
		t.Fatal(err)
	}
	a := create(t, m, "/d/a", "synced", true)
	create(t, m, "/d/b", "never synced", false)
	if err := m.SyncDir("/d"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Write([]byte(" and more")); err != nil {
		t.Fatal(err)
	}
	create(t, m, "/d/c", "synced, name not", true)
	if err := m.Rename("/d/a", "/d/renamed"); err != nil {
		t.Fatal(err)
	}
	m.Crash()
	for name, want := range map[string]string{"/d/a": "synced", "/d/b": ""} {
		if got, err := readAll(t, m, name); err != nil || got != want {
			t.Errorf("%s after the crash: %q, %v; want %q", name, got, err, want)
		}
	}
	for _, name := range []string{"/d/c", "/d/renamed"} {
		if _, err := m.Stat(name); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s survived the crash: %v", name, err)
		}
	}
}

// TestMemDurableCopiesWhatACrashKeeps: the copy holds what a crash would
// keep, and the original goes on with what it had, unsynced writes and
// all; neither sees the other's later writes.
func TestMemDurableCopiesWhatACrashKeeps(t *testing.T) {
	m := NewMem()
	if err := m.MkdirAll("/d", 0o750); err != nil {
		t.Fatal(err)
	}
	if err := m.SyncDir("/"); err != nil {
		t.Fatal(err)
	}
	a := create(t, m, "/d/a", "synced", true)
	create(t, m, "/d/b", "never synced", false)
	if err := m.SyncDir("/d"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Write([]byte(" and more")); err != nil {
		t.Fatal(err)
	}
	create(t, m, "/d/c", "synced, name not", true)
	c := m.Durable()
	for name, want := range map[string]string{"/d/a": "synced", "/d/b": ""} {
		if got, err := readAll(t, c, name); err != nil || got != want {
			t.Errorf("%s in the copy: %q, %v; want %q", name, got, err, want)
		}
	}
	if _, err := c.Stat("/d/c"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("/d/c in the copy: %v", err)
	}
	for name, want := range map[string]string{"/d/a": "synced and more", "/d/b": "never synced", "/d/c": "synced, name not"} {
		if got, err := readAll(t, m, name); err != nil || got != want {
			t.Errorf("%s in the original: %q, %v; want %q", name, got, err, want)
		}
	}
	create(t, c, "/d/a", "!", true) // writes at 0 of the copy's file
	if got, _ := readAll(t, m, "/d/a"); got != "synced and more" {
		t.Errorf("a write to the copy reached the original: %q", got)
	}
	m.Crash()
	if got, _ := readAll(t, c, "/d/a"); got != "!ynced" {
		t.Errorf("the copy after the original crashed: %q", got)
	}
}

// TestMemDieAfter: after the allowed operations, every one fails and
// changes nothing.
func TestMemDieAfter(t *testing.T) {
	m := NewMem()
	f := create(t, m, "/x", "ab", true)
	if err := m.SyncDir("/"); err != nil {
		t.Fatal(err)
	}
	before := m.Ops()
	m.DieAfter(1)
	if _, err := f.WriteAt([]byte("c"), 2); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("d"), 3); !errors.Is(err, ErrDied) {
		t.Fatalf("write after death: %v", err)
	}
	if err := f.Sync(); !errors.Is(err, ErrDied) {
		t.Fatalf("sync after death: %v", err)
	}
	if m.Ops() != before+1 {
		t.Fatalf("ops %d, want %d", m.Ops(), before+1)
	}
	m.Crash()
	if got, _ := readAll(t, m, "/x"); got != "ab" {
		t.Fatalf("after the crash: %q, want the synced %q", got, "ab")
	}
}

// TestFullRefusesWritesUntilFreed: writes fail with ENOSPC while full, and
// a sync after a refused write reports it; then they work again.
func TestFullRefusesWritesUntilFreed(t *testing.T) {
	fsys := NewFull(wal.OSFS)
	name := t.TempDir() + "/f"
	f, err := fsys.OpenFile(name, os.O_CREATE|os.O_RDWR, 0o640)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fsys.SetFull(true)
	if _, err := f.WriteAt([]byte("x"), 0); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("write while full: %v", err)
	}
	if err := f.Sync(); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("sync after a refused write: %v", err)
	}
	if _, err := fsys.OpenFile(name+"2", os.O_CREATE|os.O_RDWR, 0o640); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("create while full: %v", err)
	}
	fsys.SetFull(false)
	if _, err := f.WriteAt([]byte("x"), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if fsys.Refused() != 3 {
		t.Fatalf("refused %d, want 3 (a write, the sync after it, a create)", fsys.Refused())
	}
}
