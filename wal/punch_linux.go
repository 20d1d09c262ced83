package wal

import "golang.org/x/sys/unix"

// punchHole frees the bytes [0, n) of the open file fd, keeping its size.
func punchHole(fd uintptr, n int64) error {
	err := unix.Fallocate(int(fd), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 0, n)
	if err == unix.EOPNOTSUPP || err == unix.ENOSYS {
		return nil // a file system that cannot: the bytes stay until the file goes
	}
	return err
}
