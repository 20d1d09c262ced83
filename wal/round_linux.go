package wal

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// syncFS makes every dirty file of d's file system durable with one
// syncfs. It reports the file system's write-back failures since d was
// opened or its last syncfs.
func syncFS(d *os.File) error {
	rc, err := d.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		for {
			if serr = unix.Syncfs(int(fd)); serr != unix.EINTR {
				return
			}
		}
	}); err != nil {
		return err
	}
	if serr != nil {
		return &os.PathError{Op: "syncfs", Path: d.Name(), Err: serr}
	}
	return nil
}

// deviceOf returns the device of f's file system, 0 when unknown.
func deviceOf(f *os.File) uint64 {
	info, err := f.Stat()
	if err != nil {
		return 0
	}
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Dev)
	}
	return 0
}
