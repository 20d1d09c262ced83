package workload

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Process is a server running as a child of this program (`braid serve`,
// `nats-server`), as a user runs it. Its standard output and error go to
// a log file; if it exits before Stop asks it to, the log's last lines
// are printed to standard error, so a crash mid-benchmark says why.
type Process struct {
	name    string // what the messages call it: "braid serve", "nats-server"
	logPath string
	cmd     *exec.Cmd
	exited  chan struct{} // closed once the process has been reaped

	mu       sync.Mutex
	waitErr  error // its exit status, once exited is closed
	stopping bool  // Stop sent SIGTERM: an exit is expected
}

// spawner starts every child from one goroutine locked to its OS thread.
// The kernel sends a child its Pdeathsig when the thread that forked it
// exits, not the process; a program that ends in log.Fatal runs no
// deferred Stop, and this way its servers die with it all the same.
var spawner = sync.OnceValue(func() chan func() {
	ch := make(chan func())
	go func() {
		runtime.LockOSThread()
		for f := range ch {
			f()
		}
	}()
	return ch
})

// StartChild starts cmd as a child that gets SIGKILL when this program
// ends, however it ends: it sets cmd's Pdeathsig and starts it from the
// one thread every child is started from (see spawner).
func StartChild(cmd *exec.Cmd) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	errc := make(chan error, 1)
	spawner() <- func() { errc <- cmd.Start() }
	return <-errc
}

// StartProcess execs bin with args, its output appended to logPath, and
// returns without waiting for it to serve (see WaitReady).
func StartProcess(name, logPath, bin string, args ...string) (*Process, error) {
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(log, "=== %s %s at %s\n", bin, strings.Join(args, " "), time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := StartChild(cmd); err != nil {
		log.Close()
		return nil, fmt.Errorf("starting %s (%s): %w", name, bin, err)
	}
	p := &Process{name: name, logPath: logPath, cmd: cmd, exited: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		log.Close()
		p.mu.Lock()
		p.waitErr = err
		expected := p.stopping
		p.mu.Unlock()
		close(p.exited)
		if !expected {
			fmt.Fprintf(os.Stderr, "%s (pid %d) exited on its own: %s\n", name, cmd.Process.Pid, p.exitStatus())
			fmt.Fprintf(os.Stderr, "last lines of %s:\n%s\n", logPath, p.LogTail(30))
		}
	}()
	return p, nil
}

// Pid is the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// LogPath is the file its output goes to.
func (p *Process) LogPath() string { return p.logPath }

// Exited is closed once the process has exited.
func (p *Process) Exited() <-chan struct{} { return p.exited }

func (p *Process) exitStatus() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.waitErr == nil {
		return "exit status 0"
	}
	return p.waitErr.Error()
}

// ErrNotReady is returned by WaitReady when the process did not become
// ready in time or exited first.
var ErrNotReady = errors.New("braid/benchmarks: server not ready")

// WaitReady polls ready every 50 ms until it returns nil. It fails with
// ErrNotReady and the last poll's error when the process exits first or
// timeout passes (then with the log's tail too).
func (p *Process) WaitReady(timeout time.Duration, ready func() error) error {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		err := ready()
		if err == nil {
			return nil
		}
		select {
		case <-p.exited:
			// Its log's tail is on standard error already.
			return fmt.Errorf("%w: %s (pid %d) exited while starting: %s (last poll: %v); its log: %s",
				ErrNotReady, p.name, p.Pid(), p.exitStatus(), err, p.logPath)
		case <-tick.C:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: %s (pid %d) not ready after %s (last poll: %v); last lines of %s:\n%s",
				ErrNotReady, p.name, p.Pid(), timeout, err, p.logPath, p.LogTail(30))
		}
	}
}

// Stop sends SIGTERM and waits up to timeout for the process to exit,
// then sends SIGKILL. It fails when the process had already exited on its
// own, or needed the SIGKILL.
func (p *Process) Stop(timeout time.Duration) error {
	p.mu.Lock()
	p.stopping = true
	p.mu.Unlock()
	select {
	case <-p.exited:
		return fmt.Errorf("%s (pid %d) had already exited: %s", p.name, p.Pid(), p.exitStatus())
	default:
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return fmt.Errorf("SIGTERM to %s: %w", p.name, err)
	}
	select {
	case <-p.exited:
		return nil
	case <-time.After(timeout):
	}
	if err := p.cmd.Process.Kill(); err != nil {
		return fmt.Errorf("SIGKILL to %s: %w", p.name, err)
	}
	<-p.exited
	return fmt.Errorf("%s (pid %d) did not exit within %s of SIGTERM: killed", p.name, p.Pid(), timeout)
}

// LogTail returns the last n lines of the log.
func (p *Process) LogTail(n int) string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return err.Error()
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	return string(bytes.Join(lines[max(0, len(lines)-n):], []byte("\n")))
}

// CPU is the CPU time (user and system) the process has used so far.
func (p *Process) CPU() (time.Duration, error) { return ProcessCPU(p.Pid()) }

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat:
// 100 on every Linux architecture Go runs on (sysconf(_SC_CLK_TCK) would
// need cgo).
const clockTicks = 100

// ProcessCPU is the CPU time (user and system, of every thread) process
// pid has used so far, from /proc/<pid>/stat: 10 ms resolution.
func ProcessCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, in parentheses, may hold spaces: count fields
	// after its closing parenthesis (field 3, the state, comes first).
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no ')' in %q", pid, b)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields after the name", pid, len(f))
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64) // field 14
	stime, err2 := strconv.ParseInt(f[12], 10, 64) // field 15
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: utime %q stime %q", pid, f[11], f[12])
	}
	return time.Duration(utime+stime) * time.Second / clockTicks, nil
}

// SelfCPU is the CPU time (user and system) this program has used so far.
func SelfCPU() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, err
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

// FreeAddr returns a loopback host:port nobody listens on right now (a
// child told to listen there may still lose it to another program: rare
// enough for benchmarks).
func FreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := l.Addr().String()
	return addr, l.Close()
}
