package logstore

import (
	"syscall"
)

// DefaultMaxOpenFiles is the descriptors bucket logs may hold, from the
// process's file limit: half of it; at least 64.
func DefaultMaxOpenFiles() int {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Cur == 0 {
		return 4096
	}
	return max(int(min(lim.Cur, 1<<30))/2, 64)
}

// DefaultMaxOpenLogs is the open logs budget: ten logs for each
// descriptor they may hold (DefaultMaxOpenFiles).
func DefaultMaxOpenLogs() int { return 10 * DefaultMaxOpenFiles() }
