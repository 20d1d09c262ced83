package wal

import (
	"os"

	"golang.org/x/sys/unix"
)

// syncFiles makes files durable with one syncfs of their file system
// (every dirty file of it). It reports a write-back failure anywhere on
// the file system since the first file was opened or last synced so.
func syncFiles(files []osFile) error {
	f := files[0].File
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		for {
			serr = unix.Syncfs(int(fd))
			if serr != unix.EINTR {
				return
			}
		}
	}); err != nil {
		return err
	}
	if serr != nil {
		return &os.PathError{Op: "syncfs", Path: f.Name(), Err: serr}
	}
	return nil
}
