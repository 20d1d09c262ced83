package cluster

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
)

// ServerProcs is the GOMAXPROCS `braid serve` runs with unless told
// otherwise (--procs): the GOMAXPROCS environment variable when that is
// set, else what the Go runtime picks for this machine (its CPUs, or its
// cgroup CPU limit).
//
// More Ps than CPUs used to pay here: a goroutine blocked in a WAL fsync
// held its P until the runtime's monitor took it back, and with a P per CPU
// the CPUs idled while fsyncs held the Ps. The WAL now fsyncs through
// io_uring on Linux (wal/uring_linux.go), where the waiting goroutine
// parks, and extra Ps only cost thread switches (consumers ran 18 % slower
// at twice the CPUs).
func ServerProcs() int {
	if v := os.Getenv("GOMAXPROCS"); v != "" {
		if n, err := strconv.Atoi(v); err == nil && n > 0 {
			return n
		}
	}
	return defaultProcs()
}

// defaultProcs is the GOMAXPROCS the runtime chose at start-up (before any
// call changed it): runtime.NumCPU, or less under a cgroup CPU limit.
var defaultProcs = func() func() int {
	n := runtime.GOMAXPROCS(0)
	return func() int { return n }
}()

// SetProcs sets GOMAXPROCS to n (ServerProcs when n is 0) and returns the
// previous value.
func SetProcs(n int) (int, error) {
	if n < 0 {
		return 0, fmt.Errorf("procs %d must be positive (0: the server default)", n)
	}
	if n == 0 {
		n = ServerProcs()
	}
	return runtime.GOMAXPROCS(n), nil
}
