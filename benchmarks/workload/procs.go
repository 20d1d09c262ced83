package workload

import (
	"runtime"

	"github.com/braidmq/braid/cluster"
)

// Client and server share the benchmark process, so before measuring a
// system the benchmarks give the process the GOMAXPROCS that system's own
// server runs with by default: Braid's `braid serve` twice the CPUs
// (cluster.ServerProcs), nats-server the Go runtime's default (the CPUs).

// jetStreamProcs is the runtime's default GOMAXPROCS, read before any
// benchmark changes it.
var jetStreamProcs = runtime.GOMAXPROCS(0)

// BraidProcs sets GOMAXPROCS to what `braid serve` uses and returns it.
func BraidProcs() int {
	n := cluster.ServerProcs()
	runtime.GOMAXPROCS(n)
	return n
}

// JetStreamProcs sets GOMAXPROCS to what nats-server uses and returns it.
func JetStreamProcs() int {
	runtime.GOMAXPROCS(jetStreamProcs)
	return jetStreamProcs
}
