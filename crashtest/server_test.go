package crashtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/braidmq/braid/internal/poll"

	"github.com/nats-io/nats.go"
)

// buildBraid builds cmd/braid into a temporary directory and returns the
// binary's path; with the race detector when the test has it.
func buildBraid(t *testing.T) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the crash test builds cmd/braid and needs the go tool: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "braid")
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	cmd := exec.Command(goTool, append(args, "github.com/braidmq/braid/cmd/braid")...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/braid: %v\n%s", err, out)
	}
	return bin
}

// freeAddr returns a loopback host:port nobody listens on right now; the
// server keeps it across its restarts, so clients reconnect to it.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// childServer is `braid serve` run as a child process on one data
// directory and one NATS address, started again after each kill. Its
// output, every run of it, goes to one log file.
type childServer struct {
	bin, dataDir, addr, logPath string
	log                         *os.File
	cmd                         *exec.Cmd
	exited                      chan struct{} // closed when the running process has been reaped
	waitErr                     error         // its exit status, once exited is closed
	runs                        int
}

// newChildServer prepares a server in t's temporary directories; the
// running process, if any, is killed when the test ends, failed or not.
func newChildServer(t *testing.T, bin string) *childServer {
	t.Helper()
	dir := t.TempDir()
	s := &childServer{bin: bin, dataDir: filepath.Join(dir, "data"), addr: freeAddr(t), logPath: filepath.Join(dir, "braid.log")}
	f, err := os.Create(s.logPath)
	if err != nil {
		t.Fatal(err)
	}
	s.log = f
	t.Cleanup(func() {
		if err := s.kill(); err != nil {
			t.Errorf("killing the server at the end: %v", err)
		}
		if t.Failed() {
			t.Logf("the server's log (%s), last lines:\n%s", s.logPath, s.logTail(60))
		}
		_ = f.Close()
	})
	return s
}

func (s *childServer) url() string { return "nats://" + s.addr }

// start starts the server process; it does not wait for it to serve.
func (s *childServer) start() error {
	if s.running() {
		return errors.New("the server is already running")
	}
	s.runs++
	fmt.Fprintf(s.log, "=== run %d at %s\n", s.runs, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(s.bin, "serve", "--data-dir", s.dataDir, "--nats-listen", s.addr,
		"--metrics-listen", "off", "--log-level", "warn", "--storage-tick", "20ms")
	cmd.Stdout, cmd.Stderr = s.log, s.log
	setDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", s.bin, err)
	}
	s.cmd, s.exited = cmd, make(chan struct{})
	go func(exited chan struct{}) {
		s.waitErr = cmd.Wait()
		close(exited)
	}(s.exited)
	return nil
}

func (s *childServer) running() bool {
	if s.cmd == nil {
		return false
	}
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}

// kill sends SIGKILL and waits until the process is reaped. A process that
// exited by itself before is an error: the server must never stop alone.
func (s *childServer) kill() error {
	if s.cmd == nil {
		return nil
	}
	defer func() { s.cmd = nil }()
	select {
	case <-s.exited:
		return fmt.Errorf("the server (run %d) had exited by itself: %v", s.runs, s.waitErr)
	default:
	}
	if err := s.cmd.Process.Kill(); err != nil {
		return fmt.Errorf("SIGKILL: %w", err)
	}
	select {
	case <-s.exited:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("the server (pid %d) did not die within 10s of SIGKILL", s.cmd.Process.Pid)
	}
}

// waitReady polls probe over nc until it succeeds, the process exits, ctx
// ends or 30s pass.
func (s *childServer) waitReady(ctx context.Context, nc *nats.Conn, probe func(context.Context) error) error {
	var last, end error // end: why the wait ended short of success or the 30s
	if poll.Until(30*time.Second, func() bool {
		if nc.IsConnected() {
			pctx, pcancel := context.WithTimeout(ctx, time.Second)
			last = probe(pctx)
			pcancel()
			if last == nil {
				return true
			}
		} else {
			last = fmt.Errorf("not connected to %s (%s)", s.addr, nc.Status())
		}
		select {
		case <-s.exited:
			end = fmt.Errorf("the server (run %d) exited while starting: %v", s.runs, s.waitErr)
			return true
		default:
		}
		if err := ctx.Err(); err != nil {
			end = fmt.Errorf("the server (run %d) not serving: %w: %v", s.runs, err, last)
			return true
		}
		return false
	}) {
		return end
	}
	return fmt.Errorf("the server (run %d) not serving after 30s: %v", s.runs, last)
}

// logTail returns the last n lines of the server's log.
func (s *childServer) logTail(n int) string {
	b, err := os.ReadFile(s.logPath)
	if err != nil {
		return err.Error()
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	lines = lines[max(0, len(lines)-n):]
	return string(bytes.Join(lines, []byte("\n")))
}

// logLines returns the lines of the server's log that contain substr.
func (s *childServer) logLines(substr string) []string {
	b, err := os.ReadFile(s.logPath)
	if err != nil {
		return []string{err.Error()}
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, substr) {
			out = append(out, line)
		}
	}
	return out
}

// logMessages counts the log lines of a level by their message.
func (s *childServer) logMessages(level string) map[string]int {
	out := map[string]int{}
	for _, line := range s.logLines("level=" + level + " ") {
		msg := line
		if i := strings.Index(line, " msg="); i >= 0 {
			msg = line[i+1:]
			if j := strings.Index(msg, `" `); j >= 0 {
				msg = msg[:j+1]
			}
		}
		out[msg]++
	}
	return out
}

// logFrom returns n lines of the server's log from the first one that
// contains substr.
func (s *childServer) logFrom(substr string, n int) string {
	b, err := os.ReadFile(s.logPath)
	if err != nil {
		return err.Error()
	}
	text := string(b)
	i := strings.Index(text, substr)
	if i < 0 {
		return ""
	}
	lines := strings.SplitN(text[i:], "\n", n+1)
	return strings.Join(lines[:min(n, len(lines))], "\n")
}

// asyncErrors counts the asynchronous errors of every client connection
// (writes to a killed server fail): counted, not printed.
var asyncErrors atomic.Int64

// connect opens a connection that reconnects for ever, quickly, so it
// survives every kill; the test closes it at its end.
func connect(t *testing.T, url, name string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url, nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond),
		nats.ReconnectJitter(10*time.Millisecond, 10*time.Millisecond), nats.Timeout(time.Second),
		nats.RetryOnFailedConnect(true), // the first connection may come before the server listens
		nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) { asyncErrors.Add(1) }))
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	return nc
}
