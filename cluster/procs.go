package cluster

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
)

// ServerProcs is the GOMAXPROCS `braid serve` runs with unless told
// otherwise: twice what the Go runtime picks for this machine (its CPUs, or
// its cgroup CPU limit), or the GOMAXPROCS environment variable when that
// is set.
//
// Why more than one P per CPU: with durability always, every append waits
// on blocking write and fsync system calls. A goroutine blocked in one
// keeps its P until the runtime's monitor takes it back, and fsyncs of a
// few milliseconds often end before it does, so with a P per CPU the CPUs
// sit idle while the NATS connections and the other buckets have work
// queued (measured: both Ps held by fsyncs about a third of the time in an
// execution trace of a 64 KiB-batch produce run). The spare Ps run that
// work meanwhile; the OS still runs no more threads at once than there are
// CPUs. The price is paid by consumers (queue consumers ran 18 % slower at
// 4 Ps than at 2 on 2 CPUs, median of alternating runs): their wake-ups
// more often need an OS thread switch. --procs sets it.
func ServerProcs() int {
	if v := os.Getenv("GOMAXPROCS"); v != "" {
		if n, err := strconv.Atoi(v); err == nil && n > 0 {
			return n
		}
	}
	return 2 * defaultProcs()
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
