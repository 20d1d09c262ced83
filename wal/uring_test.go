package wal

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
)

// TestFsyncFile runs fsyncs through fsyncFile (io_uring on Linux where the
// kernel allows it, the plain system call elsewhere): they succeed on a
// file, many at once (more than the ring holds), and report the kernel's
// error for a descriptor that cannot be synced and for a closed file.
func TestFsyncFile(t *testing.T) {
	dir := t.TempDir()
	var files []*os.File
	for i := 0; i < 4; i++ {
		f, err := os.Create(filepath.Join(dir, string(rune('a'+i))))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.Write([]byte("durable")); err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	if err := fsyncFile(files[0]); err != nil {
		t.Fatalf("fsync of a file: %v", err)
	}
	t.Logf("io_uring in use: %v", ringInUse())

	var wg sync.WaitGroup
	errs := make(chan error, 300)
	for i := 0; i < 300; i++ {
		wg.Add(1)
		go func(f *os.File) {
			defer wg.Done()
			if _, err := f.Write([]byte{'x'}); err != nil {
				errs <- err
				return
			}
			errs <- fsyncFile(f)
		}(files[i%len(files)])
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent fsync: %v", err)
		}
	}

	// A pipe cannot be fsynced: the kernel says EINVAL, through the ring
	// as through the system call.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if err := fsyncFile(w); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("fsync of a pipe: %v, want EINVAL", err)
	}

	closed := files[3]
	_ = closed.Close()
	if err := fsyncFile(closed); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("fsync of a closed file: %v, want os.ErrClosed", err)
	}
}
