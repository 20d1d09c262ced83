package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/braidmq/braid/benchmarks/workload"
)

// server is one `braid serve` child on one data directory, NATS address
// and metrics address, started again by restart. Every run's stdout and
// stderr go to one log file.
type server struct {
	bin, dataDir, natsAddr, metricsAddr, logLevel, logPath string
	log                                                    *os.File

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{} // closed when the running process has been reaped
	waitErr error         // its exit status, once exited is closed
	started time.Time     // when the running process was exec'd
	runs    int
}

// extraServeArgs are more braid serve flags (-serve-args).
var extraServeArgs []string

func newServer(bin, dir, logLevel string) (*server, error) {
	natsAddr, err := workload.FreeAddr()
	if err != nil {
		return nil, err
	}
	metricsAddr, err := workload.FreeAddr()
	if err != nil {
		return nil, err
	}
	s := &server{bin: bin, dataDir: filepath.Join(dir, "data"), natsAddr: natsAddr, metricsAddr: metricsAddr,
		logLevel: logLevel, logPath: filepath.Join(dir, "braid.log")}
	if s.log, err = os.Create(s.logPath); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *server) url() string { return "nats://" + s.natsAddr }

// start execs the server; it does not wait for it to serve.
func (s *server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil && !s.deadLocked() {
		return errors.New("the server is already running")
	}
	s.runs++
	fmt.Fprintf(s.log, "=== run %d at %s\n", s.runs, time.Now().Format(time.RFC3339Nano))
	args := append([]string{"serve", "--data-dir", s.dataDir, "--nats-listen", s.natsAddr,
		"--metrics-listen", s.metricsAddr, "--log-level", s.logLevel}, extraServeArgs...)
	cmd := exec.Command(s.bin, args...)
	cmd.Stdout, cmd.Stderr = s.log, s.log
	started := time.Now()
	if err := workload.StartChild(cmd); err != nil {
		return fmt.Errorf("starting %s: %w", s.bin, err)
	}
	s.cmd, s.exited, s.started = cmd, make(chan struct{}), started
	go func(exited chan struct{}) {
		err := cmd.Wait()
		s.mu.Lock()
		s.waitErr = err
		s.mu.Unlock()
		close(exited)
	}(s.exited)
	return nil
}

func (s *server) pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

func (s *server) startedAt() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.started
}

// exitedCh is closed when the current process has exited.
func (s *server) exitedCh() chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.exited
}

func (s *server) deadLocked() bool {
	if s.cmd == nil {
		return true
	}
	select {
	case <-s.exited:
		return true
	default:
		return false
	}
}

// dead reports whether the current process has exited.
func (s *server) dead() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.deadLocked()
}

// exitStatus describes how the current process ended.
func (s *server) exitStatus() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.waitErr == nil {
		return "exit status 0"
	}
	return s.waitErr.Error()
}

// stop sends SIGTERM and waits up to timeout for the exit, then SIGKILLs.
// It returns how long the exit took and whether it needed the SIGKILL.
func (s *server) stop(timeout time.Duration) (time.Duration, bool, error) {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.mu.Unlock()
	if cmd == nil {
		return 0, false, nil
	}
	t0 := time.Now()
	select {
	case <-exited:
		return 0, false, fmt.Errorf("the server (run %d) had already exited: %s", s.runs, s.exitStatus())
	default:
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return 0, false, fmt.Errorf("SIGTERM: %w", err)
	}
	select {
	case <-exited:
		return time.Since(t0), false, nil
	case <-time.After(timeout):
	}
	err := s.kill()
	return time.Since(t0), true, err
}

// kill sends SIGKILL to the current process, if it runs, and waits for it.
func (s *server) kill() error {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.mu.Unlock()
	if cmd == nil {
		return nil
	}
	select {
	case <-exited:
		return nil
	default:
	}
	if err := cmd.Process.Kill(); err != nil {
		return fmt.Errorf("SIGKILL: %w", err)
	}
	select {
	case <-exited:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("the server (pid %d) did not die within 10s of SIGKILL", cmd.Process.Pid)
	}
}

// logTail returns the last n lines of the log.
func (s *server) logTail(n int) string {
	b, err := os.ReadFile(s.logPath)
	if err != nil {
		return err.Error()
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	lines = lines[max(0, len(lines)-n):]
	return string(bytes.Join(lines, []byte("\n")))
}

// logSummary counts the log lines at warn level and above by level and
// message, over every run, most frequent first.
func (s *server) logSummary(maxLines int) []string {
	b, err := os.ReadFile(s.logPath)
	if err != nil {
		return []string{err.Error()}
	}
	counts := map[string]int{}
	other := 0
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" || strings.HasPrefix(line, "=== run ") {
			continue
		}
		lvl := field(line, "level=")
		if lvl == "" {
			// Not a slog line (a panic, a Go runtime message): keep it whole.
			if other < 20 {
				counts["raw: "+truncate(line, 160)]++
			}
			other++
			continue
		}
		if lvl != "WARN" && lvl != "ERROR" {
			continue
		}
		msg := field(line, "msg=")
		if e := field(line, "err="); e != "" {
			msg += " err=" + truncate(e, 120)
		}
		counts[lvl+" "+msg]++
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if counts[keys[i]] != counts[keys[j]] {
			return counts[keys[i]] > counts[keys[j]]
		}
		return keys[i] < keys[j]
	})
	var out []string
	for i, k := range keys {
		if i == maxLines {
			out = append(out, fmt.Sprintf("... and %d more distinct lines", len(keys)-maxLines))
			break
		}
		out = append(out, fmt.Sprintf("%6dx %s", counts[k], k))
	}
	return out
}

// field returns the value of key (e.g. "msg=") in a slog text line, quoted
// or not.
func field(line, key string) string {
	i := strings.Index(line, " "+key)
	if i < 0 {
		if !strings.HasPrefix(line, key) {
			return ""
		}
	} else {
		line = line[i+1:]
	}
	v := line[len(key):]
	if strings.HasPrefix(v, `"`) {
		for j := 1; j < len(v); j++ {
			if v[j] == '\\' {
				j++
				continue
			}
			if v[j] == '"' {
				return v[1:j]
			}
		}
		return v[1:]
	}
	if j := strings.IndexByte(v, ' '); j >= 0 {
		return v[:j]
	}
	return v
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
