package workload

import (
	"fmt"
	"time"
)

// CPU is the CPU time a run cost.
type CPU struct {
	// Server is the server process's; Client this program's. When Shared
	// (in-process) they are one process: Client holds both and Server is
	// zero.
	Server, Client time.Duration
	Shared         bool
	Measured       bool // false: not measured, or a reading failed
}

// PerMessage describes the CPU time per message of a run of n messages
// ("" when not measured).
func (c CPU) PerMessage(n int) string {
	if !c.Measured || n <= 0 {
		return ""
	}
	per := func(d time.Duration) string {
		return fmt.Sprintf("%.1fµs", float64(d)/float64(time.Microsecond)/float64(n))
	}
	if c.Shared {
		return "CPU/msg " + per(c.Client) + " (server and client, one process)"
	}
	return "CPU/msg server " + per(c.Server) + " client " + per(c.Client)
}

// ServerPerMessage is the server's CPU time per message of a run of n
// messages; false when not measured or in-process.
func (c CPU) ServerPerMessage(n int) (time.Duration, bool) {
	if !c.Measured || c.Shared || n <= 0 {
		return 0, false
	}
	return c.Server / time.Duration(n), true
}

// CPUMeter measures the CPU time a server and this program use from its
// start to Stop.
type CPUMeter struct {
	server       func() (time.Duration, error) // nil when in-process
	server0, me0 time.Duration
	err          error
}

// startCPU starts a meter of server (of this program alone when shared:
// then server's reading is this program's).
func startCPU(server func() (time.Duration, error), shared bool) CPUMeter {
	m := CPUMeter{server: server}
	if shared {
		m.server = nil
	} else {
		m.server0, m.err = server()
	}
	if m.err == nil {
		m.me0, m.err = SelfCPU()
	}
	return m
}

// Stop returns the CPU time used since the meter started (not Measured
// when a reading failed: the server had exited, say).
func (m CPUMeter) Stop() CPU {
	if m.err != nil {
		return CPU{}
	}
	me, err := SelfCPU()
	if err != nil {
		return CPU{}
	}
	if m.server == nil {
		return CPU{Client: me - m.me0, Shared: true, Measured: true}
	}
	server, err := m.server()
	if err != nil {
		return CPU{}
	}
	return CPU{Server: server - m.server0, Client: me - m.me0, Measured: true}
}

// Measure runs fn under a CPU meter of the server whose meter start
// makes, and sets the result's CPU.
func Measure(start func() CPUMeter, fn func() (Result, error)) (Result, error) {
	m := start()
	res, err := fn()
	res.CPU = m.Stop()
	return res, err
}
