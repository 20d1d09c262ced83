// Package workload drives the benchmark workloads of Braid and of NATS
// JetStream on the same machine, so that both are measured in one run:
// produce throughput and latency, consume (replay) throughput, and the
// producer-visible pause of a split under load.
//
// Servers starts what is measured as users run it: `braid serve` and
// `nats-server -js` as child processes, each on its defaults, the program
// being the client only (Process: start, readiness, SIGTERM then SIGKILL,
// a log whose tail is printed if the child dies, its CPU time); or, with
// -inproc, both inside the program, as the benchmarks used to.
//
// It is a library for the programs under benchmarks/ and for `braid bench`;
// it asserts nothing, and prints nothing but a child server's unexpected
// exit and a stop that went wrong (on standard error).
package workload

import (
	"fmt"
	"slices"
	"time"
)

// Spec describes a produce workload.
type Spec struct {
	Messages int // how many
	Size     int // payload bytes
	Keys     int // keyed over this many keys (0: unkeyed)
	// Progress, when set, is told how many messages are done (acknowledged)
	// every ProgressEvery of them, from any goroutine.
	Progress func(done int64)
}

// ProgressEvery is how many messages pass between two Progress calls.
const ProgressEvery = 4096

// Key returns the key of message i ("" when unkeyed).
func (s Spec) Key(i int) string {
	if s.Keys == 0 {
		return ""
	}
	return fmt.Sprintf("key-%05d", i%s.Keys)
}

// Result is the outcome of one run.
type Result struct {
	Name     string
	Messages int
	Elapsed  time.Duration
	P50, P99 time.Duration // per-message latency (zero when not measured)
	Errors   int
	CPU      CPU    // what the server and the client spent (see Measure)
	Note     string // what else the run measured, printed last
}

// Rate is messages per second.
func (r Result) Rate() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Messages) / r.Elapsed.Seconds()
}

func (r Result) String() string {
	s := fmt.Sprintf("%-12s %10.0f msg/s  %8d msgs in %-9s", r.Name, r.Rate(), r.Messages, r.Elapsed.Round(time.Millisecond))
	if r.P99 > 0 {
		s += fmt.Sprintf("  p50 %-9s p99 %-9s", r.P50.Round(10*time.Microsecond), r.P99.Round(10*time.Microsecond))
	}
	if r.Errors > 0 {
		s += fmt.Sprintf("  %d ERRORS", r.Errors)
	}
	if c := r.CPU.PerMessage(r.Messages); c != "" {
		s += "  " + c
	}
	if r.Note != "" {
		s += "  " + r.Note
	}
	return s
}

// percentiles returns the 50th and 99th percentile of d (sorted in place).
func percentiles(d []time.Duration) (p50, p99 time.Duration) {
	if len(d) == 0 {
		return 0, 0
	}
	slices.Sort(d)
	return d[len(d)*50/100], d[min(len(d)-1, len(d)*99/100)]
}

// ProduceWindow is the producer window (client.WithMaxInFlight) of the
// throughput runs: two default batches (1,000 records) for each of the 16
// entry buckets of the benchmark topic. A larger window queues records in
// the client without sending more at once, and gives the garbage collector
// more live records to scan: 50,000 produced 1 KiB records 5-10 % slower
// than 24,000-32,000 here, 100,000 15 % slower.
const ProduceWindow = 32_000
