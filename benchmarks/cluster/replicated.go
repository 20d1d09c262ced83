package main

import (
	"flag"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/braidmq/braid/benchmarks/workload"
	"github.com/nats-io/nats.go"
)

// manyTopics is how many topics the many-topics run of -replication
// writes to.
var manyTopics = flag.Int("replication-topics", 0, "with -replication: also a run over this many topics (0: none; their first round starts every group at once: docs/replication.md)")

// replicationRuns compares a cluster of three at --replication-factor 3
// with one at 1, both running at once on this machine, round by round:
// the same workloads through the topic's home, alternating which cluster
// goes first. The CPU is each node's (utime+stime from /proc) per message
// acknowledged.
func replicationRuns(bin, dir string, rounds, messages, size int) {
	r1 := startNodes(bin, filepath.Join(dir, "r1"), 3, "--replication-factor", "1")
	defer stopAll(r1)
	r3 := startNodes(bin, filepath.Join(dir, "r3"), 3, "--replication-factor", "3")
	defer stopAll(r3)
	payload := make([]byte, size)
	for i := range payload {
		payload[i] = byte('a' + i%26)
	}
	type cluster struct {
		name  string
		nodes []*node
		nc    *nats.Conn // the home's node
		topic string
	}
	setup := func(name string, nodes []*node) cluster {
		d := createTopic(nodes[0].nc, "topic://public/default/replicated")
		home := nodeIndex(nodes, d)
		fmt.Printf("%s: topic %s, home %s, replicas %+v\n", name, d.Topic, d.Segments[0].Owner, d.Segments[0].Replicas)
		return cluster{name, nodes, nodes[home].nc, d.Topic}
	}
	clusters := []cluster{setup("R1", r1), setup("R3", r3)}
	// Many topics on each cluster, their homes spread by placement.
	many := map[string][]string{}
	for _, c := range clusters {
		if *manyTopics <= 0 {
			break
		}
		begin := time.Now()
		names := make([]string, *manyTopics)
		var wg sync.WaitGroup
		next := atomic.Int64{}
		for w := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := int(next.Add(1)) - 1; i < len(names); i = int(next.Add(1)) - 1 {
					names[i] = createTopic(c.nodes[(w+i)%3].nc, fmt.Sprintf("topic://public/default/many%d", i)).Topic
				}
			}()
		}
		wg.Wait()
		many[c.name] = names
		fmt.Printf("%s: %d topics created in %s\n", c.name, len(names), time.Since(begin).Round(time.Millisecond))
	}
	cpu := func(nodes []*node) []time.Duration { return processesCPU(nodePids(nodes)) }
	type run struct {
		name string
		do   func(c cluster, r int) float64
	}
	runs := []run{
		{"plain, 64 in flight", func(c cluster, _ int) float64 {
			return produce([]*nats.Conn{c.nc}, []string{c.topic}, messages, 64, payload)
		}},
		{"plain, 512 in flight", func(c cluster, _ int) float64 {
			return produce([]*nats.Conn{c.nc}, []string{c.topic}, messages, 512, payload)
		}},
		{"Go producer", func(c cluster, _ int) float64 { return produceGoRate(c.nc, c.topic, messages, payload, true) }},
		{"replay", func(c cluster, r int) float64 { return readBack(c.nc, c.topic, fmt.Sprintf("replay-%d", r), messages) }},
	}
	if *manyTopics > 0 {
		runs = append(runs, run{fmt.Sprintf("plain, %d topics, 512 in flight, a client on every node", *manyTopics), func(c cluster, _ int) float64 {
			return produce([]*nats.Conn{c.nodes[0].nc, c.nodes[1].nc, c.nodes[2].nc}, many[c.name], messages, 512, payload)
		}})
	}
	ratios := make([][]float64, len(runs))
	for r := 1; r <= rounds; r++ {
		for k, w := range runs {
			rates := map[string]float64{}
			order := clusters
			if r%2 == 0 {
				order = []cluster{clusters[1], clusters[0]}
			}
			line := fmt.Sprintf("round %d %s:", r, w.name)
			for _, c := range order {
				before := cpu(c.nodes)
				rate := w.do(c, r)
				line += fmt.Sprintf(" %s %.0f msg/s (CPU µs/msg by node %s)", c.name, rate, perMessage(before, cpu(c.nodes), messages))
				rates[c.name] = rate
			}
			ratios[k] = append(ratios[k], rates["R3"]/rates["R1"])
			fmt.Println(line)
		}
	}
	for k, w := range runs {
		v := slices.Clone(ratios[k])
		slices.Sort(v)
		fmt.Printf("%s: R3/R1 median %.2fx [%.2f, %.2f] over %d rounds\n", w.name, v[len(v)/2], v[0], v[len(v)-1], len(v))
	}
}

// nodePids lists the nodes' process ids.
func nodePids(nodes []*node) []int {
	out := make([]int, len(nodes))
	for i, nd := range nodes {
		out[i] = nd.cmd.Process.Pid
	}
	return out
}

// processesCPU is the CPU each process has used so far.
func processesCPU(pids []int) []time.Duration {
	out := make([]time.Duration, len(pids))
	for i, pid := range pids {
		out[i], _ = workload.ProcessCPU(pid)
	}
	return out
}

// perMessage prints the CPU each process spent between before and after
// per message of n, in µs: "a/b/c".
func perMessage(before, after []time.Duration, n int) string {
	var parts []string
	for i := range before {
		parts = append(parts, fmt.Sprintf("%.1f", float64((after[i]-before[i]).Microseconds())/float64(n)))
	}
	return strings.Join(parts, "/")
}
