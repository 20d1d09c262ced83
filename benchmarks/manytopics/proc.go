package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/braidmq/braid/benchmarks/workload"
)

// procStats is what the kernel and /metrics say about the server process.
type procStats struct {
	rssKB      int64 // VmRSS
	fds        int   // entries of /proc/<pid>/fd
	threads    int   // Threads
	goroutines int   // go_goroutines from /metrics (-1: the scrape failed)
	err        error // the first thing that could not be read
}

func (p procStats) String() string {
	if p.err != nil {
		return "unreadable: " + p.err.Error()
	}
	return fmt.Sprintf("RSS %.1f MiB, %d fds, %d threads, %d goroutines", float64(p.rssKB)/1024, p.fds, p.threads, p.goroutines)
}

func readStats(pid int, metricsAddr string) procStats {
	var p procStats
	p.rssKB, p.threads, p.err = readStatus(pid)
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil && p.err == nil {
		p.err = err
	}
	p.fds = len(fds)
	p.goroutines = -1
	if m, err := scrape(metricsAddr, 10*time.Second); err == nil {
		p.goroutines = m.goroutines
	} else if p.err == nil {
		p.err = err
	}
	return p
}

// readStatus reads VmRSS (kB) and Threads from /proc/<pid>/status.
func readStatus(pid int) (rssKB int64, threads int, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "VmRSS:":
			rssKB, _ = strconv.ParseInt(f[1], 10, 64)
		case "Threads:":
			threads, _ = strconv.Atoi(f[1])
		}
	}
	return rssKB, threads, nil
}

// cpuAt is the CPU time the server and this program had spent at one
// moment.
type cpuAt struct {
	server, self time.Duration
	ok           bool
}

func cpuMark(s *server) cpuAt {
	server, err := workload.ProcessCPU(s.pid())
	if err != nil {
		return cpuAt{}
	}
	self, err := workload.SelfCPU()
	if err != nil {
		return cpuAt{}
	}
	return cpuAt{server: server, self: self, ok: true}
}

// since returns the CPU time the server and this program spent since c
// (zeros when either reading failed).
func (c cpuAt) since(s *server) (server, self time.Duration) {
	now := cpuMark(s)
	if !c.ok || !now.ok {
		return 0, 0
	}
	return now.server - c.server, now.self - c.self
}

// metricsScrape is one GET of /metrics.
type metricsScrape struct {
	elapsed    time.Duration
	bytes      int
	series     int // sample lines (neither comments nor empty)
	goroutines int
}

func scrape(addr string, timeout time.Duration) (metricsScrape, error) {
	c := http.Client{Timeout: timeout}
	t0 := time.Now()
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		return metricsScrape{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	m := metricsScrape{elapsed: time.Since(t0), bytes: len(b), goroutines: -1}
	if err != nil {
		return m, err
	}
	if resp.StatusCode != http.StatusOK {
		return m, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		m.series++
		if v, ok := strings.CutPrefix(line, "go_goroutines "); ok {
			if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
				m.goroutines = int(f)
			}
		}
	}
	return m, sc.Err()
}

// settle polls the server's goroutines and RSS until neither has changed
// (goroutines equal, RSS within 1 % or 512 KiB) for window, or deadline
// passes. It returns the last stats, how long it took and, when the server
// did not settle, the last change it saw ("" when it settled).
func settle(s *server, window, deadline time.Duration) (procStats, time.Duration, string) {
	const poll = 500 * time.Millisecond
	t0 := time.Now()
	last := readStats(s.pid(), s.metricsAddr)
	stableSince := time.Now()
	change := "no stable window yet"
	for time.Since(t0) < deadline {
		if s.dead() {
			return last, time.Since(t0), "the server died"
		}
		time.Sleep(poll)
		cur := readStats(s.pid(), s.metricsAddr)
		d := cur.rssKB - last.rssKB
		if d < 0 {
			d = -d
		}
		switch {
		case cur.err != nil:
			// A failed scrape or read is a change: wait for a good one.
			change = "a failed read: " + cur.err.Error()
		case last.err != nil:
			change = "a failed read before"
		case cur.goroutines != last.goroutines:
			change = fmt.Sprintf("goroutines %d -> %d", last.goroutines, cur.goroutines)
		case d > last.rssKB/100 && d > 512:
			change = fmt.Sprintf("RSS %.1f -> %.1f MiB", float64(last.rssKB)/1024, float64(cur.rssKB)/1024)
		default:
			if time.Since(stableSince) >= window {
				return cur, time.Since(t0), ""
			}
			continue
		}
		last, stableSince = cur, time.Now()
	}
	return last, time.Since(t0), "last change: " + change
}

// idleCPU measures the server's CPU over window, as % of one core.
func idleCPU(pid int, window time.Duration) (float64, error) {
	a, err := workload.ProcessCPU(pid)
	if err != nil {
		return 0, err
	}
	t0 := time.Now()
	time.Sleep(window)
	b, err := workload.ProcessCPU(pid)
	if err != nil {
		return 0, err
	}
	return (b - a).Seconds() / time.Since(t0).Seconds() * 100, nil
}
