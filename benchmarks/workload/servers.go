package workload

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	braidnode "github.com/braidmq/braid/node"
	"github.com/braidmq/braid/wal"
	"github.com/nats-io/nats.go"
)

// Servers starts the servers a benchmark program measures. By default
// each is its own child process, as a user runs it: `braid serve` and
// `nats-server -js`, on their defaults, with this program as the client
// only. With -inproc (the old mode) Braid's node and the NATS server run
// inside this program and share its CPUs with the client.
type Servers struct {
	inProc     bool
	braidBin   string // the braid binary (child processes only)
	natsBin    string // the nats-server binary (child processes only)
	braidBuilt bool   // braidBin was built by this run (not -braid)
	natsBuilt  bool
	noJS       bool   // made by RegisterBraidFlags: Braid only
	work       string // temporary: built binaries and the servers' logs

	mu      sync.Mutex
	started int  // servers started so far, numbering their logs
	closed  bool // Close ran
}

// ServerFlags are the flags that choose how Servers runs the servers.
type ServerFlags struct {
	inProc     *bool
	braid      *string
	natsServer *string // nil: Braid only
}

// RegisterServerFlags defines -inproc, -braid and -nats-server on fs, for
// a program that measures Braid and JetStream.
func RegisterServerFlags(fs *flag.FlagSet) *ServerFlags {
	f := RegisterBraidFlags(fs)
	f.natsServer = fs.String("nats-server", "", "the nats-server binary to run (default: go build of the nats-server module in go.mod, once per run)")
	return f
}

// RegisterBraidFlags defines -inproc and -braid on fs, for a program that
// measures Braid alone: its Servers start no JetStream.
func RegisterBraidFlags(fs *flag.FlagSet) *ServerFlags {
	return &ServerFlags{
		inProc: fs.Bool("inproc", false, "run the servers inside this program, sharing its CPUs with the client "+
			"(default: each server is its own process, as users run them)"),
		braid: fs.String("braid", "", "the braid binary to run (default: go build ./cmd/braid, once per run)"),
	}
}

// Servers makes the Servers the flags ask for, building the binaries it
// needs and was not given. Close removes what it built.
func (f *ServerFlags) Servers() (*Servers, error) {
	s := &Servers{inProc: *f.inProc, braidBin: *f.braid, noJS: f.natsServer == nil}
	if !s.noJS {
		s.natsBin = *f.natsServer
	}
	work, err := os.MkdirTemp("", "braid-bench-servers-")
	if err != nil {
		return nil, err
	}
	s.work = work
	if s.inProc {
		return s, nil
	}
	if s.braidBin == "" {
		if s.braidBin, err = BuildBraid(work); err != nil {
			s.Close()
			return nil, err
		}
		s.braidBuilt = true
	}
	if s.natsBin == "" && !s.noJS {
		if s.natsBin, err = BuildNATSServer(work); err != nil {
			s.Close()
			return nil, err
		}
		s.natsBuilt = true
	}
	return s, nil
}

// BuildNATSServer builds the nats-server of the module version go.mod
// requires into dir and returns its path.
func BuildNATSServer(dir string) (string, error) {
	bin := filepath.Join(dir, "nats-server")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/nats-io/nats-server/v2").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build github.com/nats-io/nats-server/v2: %v\n%s", err, out)
	}
	return bin, nil
}

// InProc reports whether the servers run inside this program.
func (s *Servers) InProc() bool { return s.inProc }

// Mode says, in a line, how the servers run: every program prints it.
func (s *Servers) Mode() string {
	if s.inProc {
		if s.noJS {
			return "mode: in-process (-inproc): Braid's nodes run inside this program and share its CPUs with the client"
		}
		return "mode: in-process (-inproc): Braid's node and the NATS server run inside this program and share its CPUs with the client"
	}
	from := func(bin string, built bool, what string) string {
		if built {
			return "built from " + what
		}
		return bin
	}
	servers := fmt.Sprintf("braid serve (%s)", from(s.braidBin, s.braidBuilt, "this tree"))
	if !s.noJS {
		servers += fmt.Sprintf(" and nats-server -js (%s)", from(s.natsBin, s.natsBuilt, "go.mod's version"))
	}
	return "mode: separate processes: " + servers + ", each server its own process on its defaults; " +
		"this program is the client only (-inproc: all in one process)"
}

// Close removes the built binaries and the servers' logs. It does not
// stop servers: their Close does.
func (s *Servers) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		_ = os.RemoveAll(s.work)
	}
}

// logPath names the log file of the next server called name.
func (s *Servers) logPath(name string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.started++
	return filepath.Join(s.work, fmt.Sprintf("%s-%d.log", name, s.started))
}

// stopTimeout is how long a child may take to exit after SIGTERM.
const stopTimeout = 30 * time.Second

// readyTimeout is how long a child may take to start answering.
const readyTimeout = 2 * time.Minute

// BraidConfig is how to start a Braid server.
type BraidConfig struct {
	Durability      string // --durability ("": the server's default, always)
	NATSConfig      string // --nats-config: a nats-server configuration file for the embedded server
	OperatorAccount string // --operator-account
	// Args are more braid serve flags (child processes only).
	Args []string
	// Connect are the options of the connection Braid.NC (credentials,
	// TLS); with none it connects as an anonymous user.
	Connect []nats.Option
}

// Braid is a running Braid server and a connection to it.
type Braid struct {
	NC *nats.Conn

	url         string
	metricsAddr string          // its /metrics (child processes only)
	node        *braidnode.Node // in-process
	proc        *Process        // child process
}

// StartBraid starts a Braid server on data directory dir, its NATS on a
// free loopback port, and connects to it.
func (s *Servers) StartBraid(dir string, cfg BraidConfig) (*Braid, error) {
	b := &Braid{}
	if s.inProc {
		node, err := startNode(dir, cfg)
		if err != nil {
			return nil, err
		}
		b.node, b.url = node, node.ClientURL()
	} else {
		natsAddr, err := FreeAddr()
		if err != nil {
			return nil, err
		}
		if b.metricsAddr, err = FreeAddr(); err != nil {
			return nil, err
		}
		args := []string{"serve", "--data-dir", dir, "--nats-listen", natsAddr, "--metrics-listen", b.metricsAddr}
		if cfg.Durability != "" {
			args = append(args, "--durability", cfg.Durability)
		}
		if cfg.NATSConfig != "" {
			args = append(args, "--nats-config", cfg.NATSConfig)
		}
		if cfg.OperatorAccount != "" {
			args = append(args, "--operator-account", cfg.OperatorAccount)
		}
		args = append(args, cfg.Args...)
		if b.proc, err = StartProcess("braid serve", s.logPath("braid"), s.braidBin, args...); err != nil {
			return nil, err
		}
		b.url = "nats://" + natsAddr
		if err := b.proc.WaitReady(readyTimeout, func() error { return httpOK("http://" + b.metricsAddr + "/readyz") }); err != nil {
			_ = b.proc.Stop(stopTimeout)
			return nil, err
		}
	}
	nc, err := nats.Connect(b.url, cfg.Connect...)
	if err != nil {
		b.Close()
		return nil, err
	}
	b.NC = nc
	return b, nil
}

// WithBraid starts a Braid server with cfg in a new temporary directory,
// runs fn with it, then stops the server and removes the directory. A
// server that does not stop cleanly (it had exited, or needed SIGKILL) is
// a warning on standard error, not fn's failure.
func (s *Servers) WithBraid(cfg BraidConfig, fn func(b *Braid) error) error {
	dir, err := os.MkdirTemp("", "braid-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	b, err := s.StartBraid(dir, cfg)
	if err != nil {
		return err
	}
	err = fn(b)
	if cerr := b.Close(); cerr != nil {
		fmt.Fprintln(os.Stderr, "warning:", cerr)
	}
	return err
}

// URL is the server's NATS client URL.
func (b *Braid) URL() string { return b.url }

// Close closes the connection and stops the server: SIGTERM, then
// SIGKILL if it has not exited within 30 s.
func (b *Braid) Close() error {
	if b.NC != nil {
		b.NC.Close()
	}
	if b.node != nil {
		b.node.Close()
		return nil
	}
	return b.proc.Stop(stopTimeout)
}

// CPU is the CPU time the server has used so far; in-process, this whole
// program's.
func (b *Braid) CPU() (time.Duration, error) {
	if b.node != nil {
		return SelfCPU()
	}
	return b.proc.CPU()
}

// MeterCPU starts measuring the CPU the server and this program use.
func (b *Braid) MeterCPU() CPUMeter { return startCPU(b.CPU, b.node != nil) }

// WALCounts are the server's log writes and syncs so far: in-process the
// counters of package wal (every node of the process), of a child process
// braid_wal_writes_total and braid_wal_syncs_total from its /metrics.
func (b *Braid) WALCounts() (wal.IOCounts, error) {
	if b.node != nil {
		return wal.Counts(), nil
	}
	resp, err := http.Get("http://" + b.metricsAddr + "/metrics")
	if err != nil {
		return wal.IOCounts{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return wal.IOCounts{}, err
	}
	var c wal.IOCounts
	var found int
	for _, line := range strings.Split(string(body), "\n") {
		name, value, ok := strings.Cut(line, " ")
		if !ok || (name != "braid_wal_writes_total" && name != "braid_wal_syncs_total") {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			return wal.IOCounts{}, fmt.Errorf("/metrics: %s %q: %w", name, value, err)
		}
		found++
		if name == "braid_wal_writes_total" {
			c.Writes = uint64(v)
		} else {
			c.Syncs = uint64(v)
		}
	}
	if found != 2 {
		return wal.IOCounts{}, errors.New("/metrics: no braid_wal_writes_total or braid_wal_syncs_total")
	}
	return c, nil
}

// httpOK fails unless a GET of url answers 200.
func httpOK(url string) error {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}
