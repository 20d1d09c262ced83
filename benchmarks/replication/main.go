// Command replication measures Braid's raft replication (package replica)
// in one process, on disk, before it serves topics: what a write costs on
// three replicas against one, and what idle groups cost on a host.
//
// write: groups of three replicas, one host per "node", the hosts linked
// by an in-memory network that marshals every raft message (as between
// nodes); each group's log a wal.Log in a temporary directory on this
// machine's disk, fdatasynced per append (DurabilityAlways). Proposers
// keep -window proposals of -batch records of -size bytes in flight per
// group, answered once committed. Against the same with one replica (R1:
// a group of one voter, the same code path without the network). Rounds
// alternate R1 and R3; the ratio is reported as the median and the spread
// of the rounds' ratios.
//
// idle: -idle-groups groups of three replicas on three hosts elect a
// leader, commit one entry and go quiet; then the process's CPU and the
// batches the hosts send are counted over -idle-for.
//
//	go run ./benchmarks/replication -rounds 3
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/braidmq/braid/replica"
	"github.com/braidmq/braid/wal"
)

func main() {
	rounds := flag.Int("rounds", 3, "alternating rounds of R1 and R3")
	groups := flag.Int("groups", 4, "groups written at once")
	window := flag.Int("window", 16, "proposals in flight per group")
	batch := flag.Int("batch", 16, "records per proposal")
	size := flag.Int("size", 100, "payload bytes per record")
	dur := flag.Duration("for", 3*time.Second, "length of a round")
	idleGroups := flag.Int("idle-groups", 10000, "groups in the idle measurement (0: skip it)")
	idleFor := flag.Duration("idle-for", 5*time.Second, "length of the idle measurement")
	tick := flag.Duration("tick", 100*time.Millisecond, "raft tick")
	flag.Parse()
	fmt.Printf("machine: %d CPUs, %s/%s, %s; three hosts in one process, an in-memory network that marshals every message; logs on disk (DurabilityAlways), tick %v\n",
		runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version(), *tick)
	fmt.Printf("write: %d groups, %d proposals of %d records of %d B in flight per group, %v a round\n", *groups, *window, *batch, *size, *dur)
	var ratios []float64
	for r := range *rounds {
		one := write(1, *groups, *window, *batch, *size, *dur, *tick)
		three := write(3, *groups, *window, *batch, *size, *dur, *tick)
		ratios = append(ratios, three.rate/one.rate)
		fmt.Printf("round %d: R1 %.0f msg/s (CPU %.2f µs/msg), R3 %.0f msg/s (CPU %.2f µs/msg, all three replicas), R3/R1 %.2fx\n",
			r+1, one.rate, one.cpuPerMsg, three.rate, three.cpuPerMsg, three.rate/one.rate)
	}
	slices.Sort(ratios)
	fmt.Printf("R3/R1: median %.2fx [%.2f, %.2f] over %d rounds\n", ratios[len(ratios)/2], ratios[0], ratios[len(ratios)-1], len(ratios))
	if *idleGroups > 0 {
		idle(*idleGroups, *idleFor, *tick)
	}
}

type result struct {
	rate, cpuPerMsg float64
}

// cluster is n hosts with the network between them.
type cluster struct {
	hosts map[replica.Peer]*replica.Host
	peers map[uint64]replica.Peer
	root  string
	logs  []*wal.Log
	files *wal.FileCache // bounds the descriptors of many logs
}

func newCluster(n int, tick time.Duration) *cluster {
	root, err := os.MkdirTemp("", "braid-replication-")
	check(err)
	c := &cluster{hosts: map[replica.Peer]*replica.Host{}, peers: map[uint64]replica.Peer{}, root: root, files: wal.NewFileCache(2000)}
	for i := range n {
		c.peers[uint64(i+1)] = replica.Peer{Node: fmt.Sprintf("n%d", i+1), Incarnation: "bench"}
	}
	var mu sync.RWMutex
	mu.Lock()
	for _, p := range c.peers {
		c.hosts[p] = replica.NewHost(replica.HostConfig{Self: p, TickInterval: tick, Send: func(to replica.Peer, batch []replica.Envelope) {
			out := make([]replica.Envelope, len(batch))
			for i, e := range batch {
				out[i] = e
				if e.Message != nil {
					b, err := proto.Marshal(e.Message)
					check(err)
					m := new(pb.Message)
					check(proto.Unmarshal(b, m))
					out[i].Message = m
				}
			}
			mu.RLock()
			h := c.hosts[to]
			mu.RUnlock()
			h.Deliver(p, to, out)
		}})
	}
	mu.Unlock()
	return c
}

// group starts group name on every host and returns its replicas by raft
// id.
func (c *cluster) group(name string, durability wal.Durability) map[uint64]*replica.Group {
	voters := make([]uint64, 0, len(c.peers))
	for id := range c.peers {
		voters = append(voters, id)
	}
	out := map[uint64]*replica.Group{}
	for id, p := range c.peers {
		dir := filepath.Join(c.root, p.Node, name)
		check(replica.Bootstrap(nil, dir+".state", voters))
		l, err := wal.Open(dir, wal.Options{Durability: durability, Files: c.files})
		check(err)
		c.logs = append(c.logs, l)
		st, err := replica.OpenStorage(l, nil, dir+".state")
		check(err)
		g, err := c.hosts[p].Start(replica.Config{Group: name, ID: id, Peers: c.peers, Storage: st})
		check(err)
		out[id] = g
	}
	return out
}

func (c *cluster) close() {
	for _, h := range c.hosts {
		h.Close()
	}
	for _, l := range c.logs {
		l.Close()
	}
	os.RemoveAll(c.root)
}

// leaderOf campaigns replica 1 and waits for the group's leader.
func leaderOf(g map[uint64]*replica.Group) *replica.Group {
	g[1].Campaign()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if lead, _, _ := g[1].Status(); lead != 0 {
			return g[lead]
		}
		time.Sleep(5 * time.Millisecond)
	}
	fmt.Fprintln(os.Stderr, "replication: no leader in 30 s")
	os.Exit(1)
	return nil
}

func write(replicas, groups, window, batch, size int, dur, tick time.Duration) result {
	c := newCluster(replicas, tick)
	defer c.close()
	var leaders []*replica.Group
	for i := range groups {
		leaders = append(leaders, leaderOf(c.group(fmt.Sprintf("g%d", i), wal.DurabilityAlways)))
	}
	payload := make([]byte, size)
	recs := make([]wal.Record, batch)
	for i := range recs {
		recs[i] = wal.Record{Timestamp: time.Now().UnixMilli(), Key: []byte(fmt.Sprintf("key-%d", i)), Payload: payload}
	}
	var msgs atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	cpu0 := cpuTime()
	start := time.Now()
	for _, g := range leaders {
		for range window {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					if err := g.Propose(recs).Wait(); err != nil {
						fmt.Fprintln(os.Stderr, "replication: proposal:", err)
						os.Exit(1)
					}
					msgs.Add(int64(batch))
				}
			}()
		}
	}
	time.Sleep(dur)
	close(stop)
	wg.Wait()
	elapsed := time.Since(start)
	cpu := cpuTime() - cpu0
	n := msgs.Load()
	return result{rate: float64(n) / elapsed.Seconds(), cpuPerMsg: float64(cpu.Microseconds()) / float64(n)}
}

func idle(groups int, dur, tick time.Duration) {
	c := newCluster(3, tick)
	defer c.close()
	var all []map[uint64]*replica.Group
	for i := range groups {
		all = append(all, c.group(fmt.Sprintf("g%d", i), wal.DurabilityNone))
	}
	for i, g := range all {
		// Leaders spread over the hosts.
		id := uint64(1 + i%3)
		g[id].Campaign()
	}
	for _, g := range all {
		for {
			if lead, _, _ := g[1].Status(); lead != 0 {
				check(g[lead].Propose([]wal.Record{{Payload: []byte("x")}}).Wait())
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
	quiet := func() int {
		n := 0
		for _, g := range all {
			for _, r := range g {
				if r.Quiesced() {
					n++
				}
			}
		}
		return n
	}
	deadline := time.Now().Add(time.Minute)
	for quiet() < 3*groups && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	batches := func() (n uint64) {
		for _, h := range c.hosts {
			n += h.Counters().Batches.Load()
		}
		return n
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	b0, cpu0 := batches(), cpuTime()
	time.Sleep(dur)
	cpu := cpuTime() - cpu0
	b := batches() - b0
	fmt.Printf("idle: %d groups x 3 replicas on 3 hosts, %d of %d replicas quiet; over %v: CPU %.3f%% of a core for all (%.2f ns a group a second), %.0f batches/s between the hosts (beacons), heap %.1f KiB a replica (logs open)\n",
		groups, quiet(), 3*groups, dur, 100*cpu.Seconds()/dur.Seconds(),
		float64(cpu.Nanoseconds())/dur.Seconds()/float64(groups), float64(b)/dur.Seconds(),
		float64(ms.HeapInuse)/1024/float64(3*groups))
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	check(syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "replication:", err)
		os.Exit(1)
	}
}
