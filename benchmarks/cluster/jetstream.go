package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/braidmq/braid/benchmarks/workload"
)

// Braid at three copies against JetStream at three replicas, with the same
// plain NATS client: three `braid serve` processes at
// --replication-factor 3, and two clusters of three `nats-server -js`
// processes with an R3 file stream, one on JetStream's defaults (it
// acknowledges before it syncs, and syncs every 2 minutes) and one with
// sync_interval: always (it syncs before it acknowledges, as Braid does).
// All nine on this machine, the client a tenth, rounds alternating the
// order; each message one request, keyed over 64 keys.

// natsCluster is three nats-server processes clustered, with the stream.
type natsCluster struct {
	name  string
	procs []*workload.Process
	nc    *nats.Conn
}

func startNATSCluster(bin, dir, name string, syncAlways bool) *natsCluster {
	c := &natsCluster{name: name}
	var client, route, monitor []string
	for range 3 {
		for _, l := range []*[]string{&client, &route, &monitor} {
			a, err := workload.FreeAddr()
			check(err)
			*l = append(*l, a)
		}
	}
	var routes []string
	for _, a := range route {
		routes = append(routes, "nats://"+a)
	}
	check(os.MkdirAll(dir, 0o755))
	conf := filepath.Join(dir, "js.conf")
	body := "jetstream {}\n"
	if syncAlways {
		body = "jetstream {\n  sync_interval: always\n}\n"
	}
	check(os.WriteFile(conf, []byte(body), 0o644))
	for i := range 3 {
		host, port, _ := strings.Cut(client[i], ":")
		_, mport, _ := strings.Cut(monitor[i], ":")
		id := fmt.Sprintf("%s-%d", name, i+1)
		p, err := workload.StartProcess(id, filepath.Join(dir, id+".log"), bin, "-js", "-c", conf, "-sd", filepath.Join(dir, id),
			"-a", host, "-p", port, "-m", mport, "-n", id, "--cluster_name", name, "--cluster", "nats://"+route[i], "--routes", strings.Join(routes, ","))
		check(err)
		c.procs = append(c.procs, p)
	}
	deadline := time.Now().Add(2 * time.Minute)
	nc, err := nats.Connect("nats://"+client[0], nats.MaxReconnects(-1))
	for err != nil && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond) // the server is starting
		nc, err = nats.Connect("nats://"+client[0], nats.MaxReconnects(-1))
	}
	check(err)
	c.nc = nc
	js, err := jetstream.New(nc)
	check(err)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: workload.StreamName, Subjects: []string{"bench.>"},
			Storage: jetstream.FileStorage, Replicas: 3})
		cancel()
		if err == nil {
			return c
		}
		if time.Now().After(deadline) {
			check(fmt.Errorf("%s: the R3 stream was not made in 2 minutes: %w", name, err))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (c *natsCluster) stop() {
	c.nc.Close()
	for _, p := range c.procs {
		_ = p.Stop(10 * time.Second)
	}
}

// jetstreamRuns measures plain single-message produce at 64 and 512 in
// flight on Braid R3 and both JetStream R3 clusters, round by round.
func jetstreamRuns(bin, dir string, rounds, messages, size int) {
	natsBin, err := workload.BuildNATSServer(dir)
	check(err)
	braid := startNodes(bin, filepath.Join(dir, "r3"), 3, "--replication-factor", "3")
	defer stopAll(braid)
	jsDefault := startNATSCluster(natsBin, filepath.Join(dir, "js-default"), "jsdefault", false)
	defer jsDefault.stop()
	jsAlways := startNATSCluster(natsBin, filepath.Join(dir, "js-always"), "jsalways", true)
	defer jsAlways.stop()
	d := createTopic(braid[0].nc, "topic://public/default/replicated")
	home := nodeIndex(braid, d)
	fmt.Printf("Braid R3: topic %s, home %s, replicas %+v\n", d.Topic, d.Segments[0].Owner, d.Segments[0].Replicas)
	spec := workload.Spec{Messages: messages, Size: size, Keys: 64}
	type system struct {
		name   string
		nc     *nats.Conn
		target workload.PlainTarget
		pids   []int
	}
	var defPids, alwaysPids []int
	for _, p := range jsDefault.procs {
		defPids = append(defPids, p.Pid())
	}
	for _, p := range jsAlways.procs {
		alwaysPids = append(alwaysPids, p.Pid())
	}
	systems := []system{
		{"Braid R3", braid[home].nc, workload.BraidTarget("public", "default", "replicated", spec), nodePids(braid)},
		{"JetStream R3 (default: acknowledged before its sync)", jsDefault.nc, workload.JetStreamTarget(spec), defPids},
		{"JetStream R3 (sync_interval: always)", jsAlways.nc, workload.JetStreamTarget(spec), alwaysPids},
	}
	for _, window := range []int{64, 512} {
		ratios := make([][]float64, len(systems)) // against Braid R3
		for r := 1; r <= rounds; r++ {
			order := slices.Clone(systems)
			if r%2 == 0 {
				slices.Reverse(order)
			}
			rates := map[string]float64{}
			for _, s := range order {
				before := processesCPU(s.pids)
				if r == 1 && *pprofDir != "" && s.name == systems[0].name {
					profileNodes(braid, fmt.Sprintf("r3-%d", window))
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
				res, err := workload.PlainProduce(ctx, s.nc, s.target, spec, window, time.Minute)
				cancel()
				check(err)
				rates[s.name] = res.Rate()
				fmt.Printf("round %d, %d in flight, %s: %.0f msg/s, p50 %s, p99 %s, errors %d, CPU µs/msg by node %s\n", r, window, s.name,
					res.Rate(), res.P50, res.P99, res.Errors, perMessage(before, processesCPU(s.pids), messages))
			}
			for i, s := range systems {
				ratios[i] = append(ratios[i], rates[systems[0].name]/rates[s.name])
			}
		}
		for i, s := range systems[1:] {
			v := slices.Clone(ratios[i+1])
			slices.Sort(v)
			fmt.Printf("%d in flight: Braid R3 / %s median %.2fx [%.2f, %.2f] over %d rounds\n", window, s.name, v[len(v)/2], v[0], v[len(v)-1], len(v))
		}
	}
}

// profileNodes starts a 5 s CPU profile of each node, written to
// -pprof's directory as <name>-<node>.pprof when done.
func profileNodes(nodes []*node, name string) {
	check(os.MkdirAll(*pprofDir, 0o755))
	for _, nd := range nodes {
		go func() {
			resp, err := http.Get("http://" + nd.metrics + "/debug/pprof/profile?seconds=5")
			if err != nil {
				fmt.Println("profile:", err)
				return
			}
			defer resp.Body.Close()
			f, err := os.Create(filepath.Join(*pprofDir, name+"-"+nd.id+".pprof"))
			if err != nil {
				return
			}
			defer f.Close()
			_, _ = io.Copy(f, resp.Body)
		}()
	}
}
