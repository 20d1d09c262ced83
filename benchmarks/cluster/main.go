// Command cluster compares one Braid node with a cluster of three on this
// machine: the produce rate of one topic with the client at the topic's
// owner and at another node (its requests forwarded), the aggregate
// produce rate over topics spread across the nodes with a client on every
// node, and the replay rate of one topic. Every server is a real
// `braid serve` child on 127.0.0.1; the single node and the cluster run
// side by side and their rounds alternate, so both see the same machine.
//
//	go run ./benchmarks/cluster -messages 100000 -rounds 3
//
// On a machine of two cores, three nodes share what one node had alone:
// the figures show the cost of the cluster's hops, not its scale-out.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/benchmarks/workload"
	"github.com/braidmq/braid/client"
)

func main() {
	messages := flag.Int("messages", 100_000, "messages per produce run")
	rounds := flag.Int("rounds", 3, "alternating rounds")
	conc := flag.Int("concurrency", 256, "produce requests in flight (in all)")
	spread := flag.Int("topics", 12, "topics of the spread run")
	size := flag.Int("size", 100, "payload bytes")
	bin := flag.String("braid", "", "a braid binary (default: go build ./cmd/braid)")
	flag.DurationVar(&leaseTTL, "lease-ttl", 0, "the nodes' --lease-ttl (0: their default)")
	kills := flag.Int("kills", 0, "then kill the entry node this many times: time from the kill to the first acknowledged write of a live node's topic")
	verbose = flag.Bool("v", false, "print the nodes' log lines about what a kill moved")
	goKills := flag.Int("go-owner-kills", 0, "then kill a topic's owner this many times while a Go producer sends to it: its errors, and its longest wait for an acknowledgement")
	drains := flag.Int("drains", 0, "then drain a node owning a topic of -drain-segments segments this many times, under a Go producer: time of the drain, errors the producer saw")
	drainSegments := flag.Int("drain-segments", 16, "segments of the drained topic")
	childKills := flag.Int("child-kills", 0, "then kill the node holding a split's child (the topic's home is another) this many times: time from the kill to the first acknowledged write of the child's keys")
	splitSegments := flag.Int("split-segments", 4, "active segments of the topic split over the nodes")
	jsR3 := flag.Bool("jetstream-r3", false, "instead: Braid at --replication-factor 3 against JetStream R3 clusters (its default, and sync_interval: always), each three processes, plain single-message produce at 64 and 512 in flight")
	replication := flag.Bool("replication", false, "instead: two clusters of three, --replication-factor 1 and 3, compared round by round (plain produce at 64 and 512 in flight, Go producer, replay) with the CPU each node spent a message")
	ownerLeadsMeta = flag.Bool("owner-leads-meta", false, "with -owner-kills: kill only topics' owners that lead the metadata stream (the entry node, too, if it does)")
	factor := flag.Int("factor", 0, "the cluster of three's --replication-factor (0: its default); the single node keeps 1")
	ownerKills := flag.Int("owner-kills", 0, "then kill a topic's owner (not the entry node) this many times: time from the kill to the first acknowledged write of the topic's keys (moved to a live node)")
	flag.Parse()

	dir, err := os.MkdirTemp("", "braid-cluster-bench-")
	check(err)
	defer os.RemoveAll(dir)
	if *bin == "" {
		*bin, err = workload.BuildBraid(dir)
		check(err)
	}
	fmt.Printf("machine: %d CPUs, %s/%s, %s; %d messages of %d B per run, %d in flight, %d rounds\n",
		runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version(), *messages, *size, *conc, *rounds)
	if *replication {
		replicationRuns(*bin, dir, *rounds, *messages, *size)
		return
	}
	if *jsR3 {
		jetstreamRuns(*bin, dir, *rounds, *messages, *size)
		return
	}

	single := startNodes(*bin, filepath.Join(dir, "single"), 1)
	defer stopAll(single)
	var threeArgs []string
	if *factor > 0 {
		threeArgs = []string{"--replication-factor", strconv.Itoa(*factor)}
	}
	three := startNodes(*bin, filepath.Join(dir, "three"), 3, threeArgs...)
	defer stopAll(three)

	payload := make([]byte, *size)
	for i := range payload {
		payload[i] = byte('a' + i%26)
	}
	// The topics: one of the single node; of the cluster, one owned by the
	// entry node (which takes every client request) and one owned by
	// another node (its requests forwarded).
	oneSingle := createTopic(single[0].nc, "topic://public/default/one")
	r, err := client.NewAdmin(three[0].nc).ListNodes(context.Background())
	check(err)
	var oneThree, fwdThree api.TopicDescription
	for i := 0; oneThree.Topic == "" || fwdThree.Topic == ""; i++ {
		if i == 100 {
			check(errors.New("no topic placed on the entry node and another in 100 creates"))
		}
		d := createTopic(three[0].nc, fmt.Sprintf("topic://public/default/one%d", i))
		switch owner := d.Segments[0].Owner; {
		case owner == r.Serving && oneThree.Topic == "":
			oneThree = d
		case owner != r.Serving && fwdThree.Topic == "":
			fwdThree = d
		}
	}
	owner, other := nodeIndex(three, oneThree), nodeIndex(three, fwdThree)
	var spreadSingle, spreadThree []string
	spreadOwners := map[string]int{}
	for i := range *spread {
		uri := fmt.Sprintf("topic://public/default/spread%d", i)
		spreadSingle = append(spreadSingle, createTopic(single[0].nc, uri).Topic)
		d := createTopic(three[i%3].nc, uri)
		spreadOwners[d.Segments[0].Owner]++
		spreadThree = append(spreadThree, d.Topic)
	}
	fmt.Printf("cluster: entry node %s; %s owned by it, %s by %s; the spread topics by %v\n", r.Serving, oneThree.Topic,
		fwdThree.Topic, three[other].id, spreadOwners)
	// One topic of splitSegments segments: on the single node, and on the
	// cluster split so that its children are on the other nodes.
	splitSingle := splitTo(single[0].nc, createTopic(single[0].nc, "topic://public/default/split"), *splitSegments)
	splitThree := splitTopic(three, "topic://public/default/split", *splitSegments)
	fmt.Printf("cluster: %s active segments by node %v\n", splitThree.Topic, owners(splitThree))

	type series struct{ a, b []float64 }
	var atOwner, forwarded, spreadRuns, replay, goDirect, goForwarded, splitRuns, splitReplay series
	for r := 1; r <= *rounds; r++ {
		a := produce([]*nats.Conn{single[0].nc}, []string{oneSingle.Topic}, *messages, *conc, payload)
		b := produce([]*nats.Conn{three[owner].nc}, []string{oneThree.Topic}, *messages, *conc, payload)
		c := produce([]*nats.Conn{three[other].nc}, []string{fwdThree.Topic}, *messages, *conc, payload)
		fmt.Printf("round %d one topic: single node %.0f msg/s; cluster: owned by the entry node %.0f, forwarded to its owner %.0f\n", r, a, b, c)
		atOwner.a, atOwner.b = append(atOwner.a, a), append(atOwner.b, b)
		forwarded.a, forwarded.b = append(forwarded.a, a), append(forwarded.b, c)
		d := produce([]*nats.Conn{single[0].nc}, spreadSingle, *messages, *conc, payload)
		if r == 1 && *pprofDir != "" {
			profileNodes(three, "spread")
		}
		e := produce([]*nats.Conn{three[0].nc, three[1].nc, three[2].nc}, spreadThree, *messages, *conc, payload)
		fmt.Printf("round %d %d topics: single node %.0f msg/s, cluster (a client on every node) %.0f\n", r, *spread, d, e)
		spreadRuns.a, spreadRuns.b = append(spreadRuns.a, d), append(spreadRuns.b, e)
		// The Go producer, through the entry node's server, to the topic
		// another node owns: straight to the owner, and forwarded.
		h := produceGoRate(single[0].nc, oneSingle.Topic, *messages, payload, true)
		i := produceGoRate(three[owner].nc, fwdThree.Topic, *messages, payload, true)
		j := produceGoRate(three[owner].nc, fwdThree.Topic, *messages, payload, false)
		fmt.Printf("round %d Go producer: single node %.0f msg/s; cluster, topic of another node: straight to it %.0f, forwarded %.0f\n", r, h, i, j)
		goDirect.a, goDirect.b = append(goDirect.a, h), append(goDirect.b, i)
		goForwarded.a, goForwarded.b = append(goForwarded.a, h), append(goForwarded.b, j)
		sp := produce([]*nats.Conn{single[0].nc}, []string{splitSingle.Topic}, *messages, *conc, payload)
		sq := produce([]*nats.Conn{three[entryIndex(three)].nc}, []string{splitThree.Topic}, *messages, *conc, payload)
		fmt.Printf("round %d one topic of %d segments: single node %.0f msg/s; cluster, split over the nodes %.0f\n", r, *splitSegments, sp, sq)
		splitRuns.a, splitRuns.b = append(splitRuns.a, sp), append(splitRuns.b, sq)
		sub := "replay" + strconv.Itoa(r)
		sr := readBack(single[0].nc, splitSingle.Topic, sub, r**messages)
		ss := readBack(three[entryIndex(three)].nc, splitThree.Topic, sub, r**messages)
		fmt.Printf("round %d replay of the split topic: single node %.0f msg/s, cluster %.0f\n", r, sr, ss)
		splitReplay.a, splitReplay.b = append(splitReplay.a, sr), append(splitReplay.b, ss)
		f := readBack(single[0].nc, oneSingle.Topic, sub, r**messages)
		g := readBack(three[other].nc, fwdThree.Topic, sub, r**messages)
		fmt.Printf("round %d replay of one topic: single node %.0f msg/s, cluster (forwarded) %.0f\n", r, f, g)
		replay.a, replay.b = append(replay.a, f), append(replay.b, g)
	}
	if *rounds > 0 {
		fmt.Println()
		fmt.Println("| run | single node msg/s | three nodes msg/s | three/single [min, max] |")
		fmt.Println("|---|---|---|---|")
		row := func(name string, s series) {
			ratios := make([]float64, len(s.a))
			for i := range s.a {
				ratios[i] = s.b[i] / s.a[i]
			}
			fmt.Printf("| %s | %.0f | %.0f | %.2fx [%.2f, %.2f] |\n", name, workload.Median(s.a), workload.Median(s.b), workload.Median(ratios), slices.Min(ratios), slices.Max(ratios))
		}
		row("produce, one topic owned by the entry node", atOwner)
		row("produce, one topic owned by another node (forwarded)", forwarded)
		row(fmt.Sprintf("produce, %d topics, a client on every node", *spread), spreadRuns)
		row("replay, one topic (cluster: owned by another node, forwarded)", replay)
		row("Go producer, one topic owned by another node, straight to it", goDirect)
		row("Go producer, one topic owned by another node, forwarded (WithDirect(false))", goForwarded)
		row(fmt.Sprintf("produce, one topic of %d segments (cluster: split over the nodes, through its home)", *splitSegments), splitRuns)
		row("replay, that topic", splitReplay)
	}
	if *kills > 0 || *ownerKills > 0 || *drains > 0 || *goKills > 0 || *childKills > 0 {
		stopAll(single)
	}
	if *goKills > 0 {
		goOwnerLoss(three, *goKills)
	}
	if *drains > 0 {
		drainRuns(three, *drains, *drainSegments)
	}
	if *kills > 0 {
		nodeLoss(three, *kills, true)
	}
	if *ownerKills > 0 {
		nodeLoss(three, *ownerKills, false)
	}
	if *childKills > 0 {
		childLoss(three, *childKills)
	}
}

// nodeLoss kills a node kills times, each time measuring how long after
// the SIGKILL a produce through a live node is acknowledged again, then
// restarts the killed node. entry: the entry node is killed and the topic
// is a live node's; else the topic's owner (not the entry node) is
// killed, and the write is acknowledged once a live node has taken its
// key ranges. Each produce request waits 500 ms for its reply.
func nodeLoss(nodes []*node, kills int, entry bool) {
	what := "the owner of the written topic"
	if entry {
		what = "the entry node"
	}
	var took, tookLed []time.Duration
	for k := 1; k <= kills; k++ {
		ent := entryIndex(nodes)
		via := (ent + 1) % len(nodes)
		var d api.TopicDescription
		victim := ent
		for i := 0; ; i++ {
			d = createTopic(nodes[via].nc, fmt.Sprintf("topic://public/default/loss%d-%d-%t", k, i, entry))
			owner := nodeIndex(nodes, d)
			if entry && owner != ent {
				break
			}
			if !entry && *ownerLeadsMeta && owner >= 0 && i < 60 && nodes[owner].id != metaLeader(nodes[via].nc) {
				continue // a topic whose owner leads the metadata stream
			}
			if !entry && (owner != ent || *ownerLeadsMeta) && owner >= 0 {
				victim = owner
				break
			}
		}
		if victim == via {
			via = 3 - ent - victim
		}
		p := strings.Split(strings.TrimPrefix(d.Topic, "topic://"), "/")
		subject := api.TopicSubject(api.ProducePrefix, p[0], p[1], p[2])
		// The write before the kill may meet the cluster still settling
		// after the last restart (a lease renewal late): it is retried.
		waitAcked(nodes[via].nc, &nats.Msg{Subject: subject, Data: []byte("x")}, time.Now(),
			fmt.Sprintf("kill %d: produce to %s (owner %s) through %s before the kill", k, d.Topic, d.Segments[0].Owner, nodes[via].id))
		led := metaLeader(nodes[via].nc) == nodes[victim].id
		t0 := time.Now()
		_ = nodes[victim].cmd.Process.Kill()
		_ = nodes[victim].cmd.Wait()
		if err := tryAcked(nodes[via].nc, &nats.Msg{Subject: subject, Data: []byte("x")}, t0, fmt.Sprintf("kill %d", k)); err != nil {
			if *verbose {
				printTopicLines(nodes, d.Topic)
			}
			check(err)
		}
		dt := time.Since(t0)
		took = append(took, dt)
		note := ""
		if led {
			tookLed = append(tookLed, dt)
			note = ", which led the metadata stream"
		}
		fmt.Printf("kill %d of %s (%s%s, at %s): a write acknowledged again after %s\n", k, what, nodes[victim].id, note,
			t0.UTC().Format("15:04:05.000"), dt.Round(time.Millisecond))
		if *verbose {
			printTopicLines(nodes, d.Topic)
		}
		restart(nodes, victim)
	}
	slices.Sort(took)
	fmt.Printf("loss of %s over %d kills: p50 %s, p99 (max) %s\n", what, len(took), took[len(took)/2].Round(time.Millisecond),
		took[len(took)-1].Round(time.Millisecond))
	if len(tookLed) > 0 {
		slices.Sort(tookLed)
		fmt.Printf("  of them %d killed the metadata stream's leader: p50 %s, max %s\n", len(tookLed),
			tookLed[len(tookLed)/2].Round(time.Millisecond), tookLed[len(tookLed)-1].Round(time.Millisecond))
	}
}

// metaLeader names the server leading the metadata KV bucket's stream ("" when
// it cannot tell): a kill of that node waits for JetStream to elect
// another before any lease or role can be written.
func metaLeader(nc *nats.Conn) string {
	js, err := jetstream.New(nc)
	if err != nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, "KV_braid-meta")
	if err != nil {
		return ""
	}
	info, err := st.Info(ctx)
	if err != nil || info.Cluster == nil {
		return ""
	}
	return info.Cluster.Leader
}

// waitAcked sends m again and again (each request waiting 500 ms for its
// reply) until one is acknowledged, for up to 2 minutes after since.
func waitAcked(nc *nats.Conn, m *nats.Msg, since time.Time, what string) {
	check(tryAcked(nc, m, since, what))
}

// tryAcked is waitAcked, failing with an error.
func tryAcked(nc *nats.Conn, m *nats.Msg, since time.Time, what string) error {
	var last string
	for {
		reply, err := nc.RequestMsg(m, 500*time.Millisecond)
		switch {
		case err != nil:
			last = err.Error()
		case reply.Header.Get(micro.ErrorCodeHeader) == "":
			return nil
		default:
			last = reply.Header.Get(micro.ErrorHeader)
		}
		if time.Since(since) > 2*time.Minute {
			return fmt.Errorf("%s: no write acknowledged in 2 minutes (the last answer: %s)", what, last)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// goOwnerLoss kills the owner of a topic a Go producer (default options)
// sends to, kills times, and reports the errors the producer saw by kind
// and its longest wait for an acknowledgement.
func goOwnerLoss(nodes []*node, kills int) {
	for k := 1; k <= kills; k++ {
		ent := entryIndex(nodes)
		var d api.TopicDescription
		victim := -1
		for i := 0; victim < 0; i++ {
			d = createTopic(nodes[(ent+1)%3].nc, fmt.Sprintf("topic://public/default/goloss%d-%d", k, i))
			if o := nodeIndex(nodes, d); o != ent {
				victim = o
			}
		}
		via := 3 - ent - victim
		p, err := client.NewProducer(nodes[via].nc, d.Topic)
		check(err)
		var mu sync.Mutex
		errs := map[string]int{}
		first := map[string]string{}
		var longest time.Duration
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			ctx := context.Background()
			for i := 0; ; i++ {
				select {
				case <-stop:
					check(p.Close(ctx))
					return
				default:
				}
				sent := time.Now()
				check(p.Send(ctx, api.Record{Key: []byte(strconv.Itoa(i % 64)), Payload: make([]byte, 100)}, func(_ client.MessageID, err error) {
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						kind := "other"
						switch {
						case errors.Is(err, client.ErrTimeout):
							kind = "timeout"
						case errors.Is(err, client.ErrNoServer):
							kind = "no server"
						case errors.Is(err, api.ErrUnavailable):
							kind = "unavailable"
						}
						if errs[kind] == 0 {
							first[kind] = fmt.Sprintf("%s after %s: %v", time.Now().UTC().Format("15:04:05.000"), time.Since(sent).Round(time.Millisecond), err)
						}
						errs[kind]++
						return
					}
					longest = max(longest, time.Since(sent))
				}))
				time.Sleep(time.Millisecond)
			}
		}()
		time.Sleep(time.Second)
		killedAt := time.Now()
		_ = nodes[victim].cmd.Process.Kill()
		_ = nodes[victim].cmd.Wait()
		time.Sleep(15 * time.Second)
		close(stop)
		<-done
		mu.Lock()
		fmt.Printf("Go producer across kill %d of its topic's owner %s (at %s): errors %v, longest wait for an acknowledgement %s\n", k, nodes[victim].id,
			killedAt.UTC().Format("15:04:05.000"), errs, longest.Round(time.Millisecond))
		for kind, f := range first {
			fmt.Printf("  first %s: %s\n", kind, f)
		}
		mu.Unlock()
		if *verbose {
			printTopicLines(nodes, d.Topic)
		}
		restart(nodes, victim)
	}
}

// drainRuns drains a node owning a topic of segments segments, runs
// times, each while a Go producer sends to the topic, and reports how
// long each drain took and the errors the producer saw. The drained node
// is restarted (to take topics again) after each run.
func drainRuns(nodes []*node, runs, segments int) {
	var took []time.Duration
	errors := 0
	for k := 1; k <= runs; k++ {
		ent := entryIndex(nodes)
		via := (ent + 1) % len(nodes)
		var d api.TopicDescription
		victim := -1
		for i := 0; victim < 0; i++ {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			var err error
			d, err = client.NewAdmin(nodes[via].nc).CreateTopic(ctx, fmt.Sprintf("topic://public/default/drain%d-%d", k, i), segments)
			cancel()
			check(err)
			if o := nodeIndex(nodes, d); o != ent && o >= 0 {
				victim = o
			}
		}
		if victim == via {
			via = 3 - ent - victim
		}
		p, err := client.NewProducer(nodes[via].nc, d.Topic)
		check(err)
		stop := make(chan struct{})
		var failed atomic.Int64
		var sent atomic.Int64
		done := make(chan struct{})
		go func() {
			defer close(done)
			ctx := context.Background()
			for i := 0; ; i++ {
				select {
				case <-stop:
					check(p.Close(ctx))
					return
				default:
				}
				rec := api.Record{Key: []byte(strconv.Itoa(i % 1024)), Payload: make([]byte, 100)}
				check(p.Send(ctx, rec, func(_ client.MessageID, err error) {
					if err != nil && failed.Add(1) <= 3 {
						fmt.Printf("  producer error: %v\n", err)
					}
				}))
				sent.Add(1)
			}
		}()
		for sent.Load() < 20_000 {
			time.Sleep(10 * time.Millisecond)
		}
		t0 := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		reply, err := client.NewAdmin(nodes[via].nc).DrainNode(ctx, nodes[victim].id)
		cancel()
		check(err)
		took = append(took, time.Since(t0))
		mark := sent.Load()
		for sent.Load() < mark+20_000 {
			time.Sleep(10 * time.Millisecond)
		}
		close(stop)
		<-done
		errors += int(failed.Load())
		fmt.Printf("drain %d of %s (%d segments of one topic, %d moved): %s (the node reported %.3fs); %d messages sent, %d errors\n",
			k, nodes[victim].id, segments, reply.Segments, took[len(took)-1].Round(time.Millisecond), reply.Seconds, sent.Load(), failed.Load())
		// Stopped and started again, the node takes topics again.
		_ = nodes[victim].cmd.Process.Signal(syscall.SIGTERM)
		_ = nodes[victim].cmd.Wait()
		restart(nodes, victim)
	}
	slices.Sort(took)
	fmt.Printf("drain of a node with a %d-segment topic over %d runs: p50 %s, max %s; producer errors %d\n", segments, runs,
		took[len(took)/2].Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond), errors)
}

// entryIndex returns the index of the node holding the entry role,
// waiting up to a minute for one to hold it.
func entryIndex(nodes []*node) int {
	for wait := time.Now(); ; time.Sleep(100 * time.Millisecond) {
		r, err := client.NewAdmin(nodes[0].nc).ListNodes(context.Background())
		if err != nil {
			check(fmt.Errorf("node.list through %s: %w", nodes[0].id, err))
		}
		for i, nd := range nodes {
			if nd.id == r.Entry {
				return i
			}
		}
		if time.Since(wait) > time.Minute {
			check(fmt.Errorf("no entry node for a minute: %+v", r))
		}
	}
}

// restart starts node i again with its arguments and waits until every
// node lists it live and serving (no longer starting).
func restart(nodes []*node, i int) {
	nd := nodes[i]
	begin := time.Now()
	cmd := exec.Command(nd.cmd.Path, nd.cmd.Args[1:]...)
	cmd.Stdout, cmd.Stderr = nd.cmd.Stdout, nd.cmd.Stderr
	check(workload.StartChild(cmd))
	nd.cmd = cmd
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		r, err := client.NewAdmin(nodes[(i+1)%len(nodes)].nc).ListNodes(ctx)
		cancel()
		live := 0
		for _, x := range r.Nodes {
			// The restarted node counts once its new process holds the
			// lease (the killed one's may not have lapsed yet).
			started, _ := time.Parse(time.RFC3339Nano, x.Started)
			if x.Live && !x.Starting && (x.ID != nd.id || started.After(begin.Add(-time.Second))) {
				live++
			}
		}
		if err == nil && live == len(nodes) {
			return
		}
		if time.Now().After(deadline) {
			check(fmt.Errorf("node %s not back after 2 minutes", nd.id))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// printTopicLines prints the nodes' log lines about topic, leases and the
// entry role.
func printTopicLines(nodes []*node, topic string) {
	for _, nd := range nodes {
		b, _ := os.ReadFile(nd.log)
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, topic) || strings.Contains(line, "lease") || strings.Contains(line, "entry") {
				fmt.Printf("  %s: %s\n", nd.id, line)
			}
		}
	}
}

// ownerLeadsMeta: owner kills take the metadata stream's leader.
var ownerLeadsMeta *bool

// verbose prints the nodes' log lines about kills.
var verbose *bool

// logLevel is the nodes' --log-level.
var logLevel = flag.String("log-level", "warn", "the nodes' --log-level (their logs are kept beside the data directories while the program runs)")

// leaseTTL is the nodes' --lease-ttl (0: the default).
var leaseTTL time.Duration

// node is one braid serve child and a client connection to it.
type node struct {
	id      string
	cmd     *exec.Cmd
	nc      *nats.Conn
	log     string // its log file
	metrics string // its metrics listener with /debug/pprof (-pprof), or ""
}

// pprofDir, when set (-pprof), has the nodes serve their profiles, and
// the -jetstream-r3 run write CPU profiles of Braid's nodes there.
var pprofDir = flag.String("pprof", "", "a directory: the nodes serve Go's profiles, and -jetstream-r3 (or the spread run of the default one) writes a 5 s CPU profile of each Braid node during its first run there")

func freeAddr() string {
	addr, err := workload.FreeAddr()
	check(err)
	return addr
}

// startNodes starts n nodes (a cluster when n > 1) under dir and waits
// until each answers node.list with n live nodes.
func startNodes(bin, dir string, n int, extra ...string) []*node {
	natsAddrs, clusterAddrs := make([]string, n), make([]string, n)
	for i := range n {
		natsAddrs[i], clusterAddrs[i] = freeAddr(), freeAddr()
	}
	nodes := make([]*node, n)
	for i := range n {
		id := fmt.Sprintf("n%d", i+1)
		metrics := "off"
		if *pprofDir != "" {
			metrics = freeAddr()
		}
		args := []string{"serve", "--node-id", id, "--data-dir", filepath.Join(dir, id), "--nats-listen", natsAddrs[i],
			"--metrics-listen", metrics, "--log-level", *logLevel}
		if *pprofDir != "" {
			args = append(args, "--pprof")
		}
		if leaseTTL > 0 {
			args = append(args, "--lease-ttl", leaseTTL.String())
		}
		if n > 1 {
			var routes []string
			for _, a := range clusterAddrs {
				routes = append(routes, "nats://"+a)
			}
			// Topics stay where the runs place them.
			args = append(args, "--cluster-listen", clusterAddrs[i], "--routes", strings.Join(routes, ","), "--rebalance-interval", "-1s")
		}
		args = append(args, extra...)
		cmd := exec.Command(bin, args...)
		logPath := filepath.Join(dir + "-" + id + ".log")
		logf, err := os.Create(logPath)
		check(err)
		cmd.Stdout, cmd.Stderr = logf, logf
		check(workload.StartChild(cmd))
		nodes[i] = &node{id: id, cmd: cmd, log: logPath}
		if *pprofDir != "" {
			nodes[i].metrics = metrics
		}
	}
	for i, nd := range nodes {
		deadline := time.Now().Add(2 * time.Minute)
		for {
			nc, err := nats.Connect("nats://"+natsAddrs[i], nats.MaxReconnects(-1), nats.IgnoreDiscoveredServers())
			if err == nil {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				r, err := client.NewAdmin(nc).ListNodes(ctx)
				cancel()
				live := 0
				for _, x := range r.Nodes {
					if x.Live && !x.Starting {
						live++
					}
				}
				if err == nil && live == n {
					nd.nc = nc
					break
				}
				nc.Close()
			}
			if time.Now().After(deadline) {
				check(fmt.Errorf("node %s of %d not ready after 2 minutes", nd.id, n))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nodes
}

func stopAll(nodes []*node) {
	for _, nd := range nodes {
		if nd.nc != nil {
			nd.nc.Close()
		}
		_ = nd.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, nd := range nodes {
		done := make(chan struct{})
		go func() { _ = nd.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = nd.cmd.Process.Kill()
		}
	}
}

func createTopic(nc *nats.Conn, uri string) api.TopicDescription {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := client.NewAdmin(nc).CreateTopic(ctx, uri, 1)
	if err != nil {
		check(fmt.Errorf("topic.create %s: %w", uri, err))
	}
	return d
}

func nodeIndex(nodes []*node, d api.TopicDescription) int {
	for i, nd := range nodes {
		if nd.id == d.Segments[0].Owner {
			return i
		}
	}
	check(fmt.Errorf("topic %s owned by %q, not one of the nodes", d.Topic, d.Segments[0].Owner))
	return -1
}

// produce sends messages single-message requests, message i to
// topics[i%len] through conns[i%len], concurrency in flight in all, and
// returns the rate of the acknowledged ones.
func produce(conns []*nats.Conn, topics []string, messages, concurrency int, payload []byte) float64 {
	subjects := make([]string, len(topics))
	for i, uri := range topics {
		p := strings.Split(strings.TrimPrefix(uri, "topic://"), "/")
		subjects[i] = api.TopicSubject(api.ProducePrefix, p[0], p[1], p[2])
	}
	var next, ok, failed atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	t0 := time.Now()
	for w := range concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nc := conns[w%len(conns)]
			for {
				i := int(next.Add(1) - 1)
				if i >= messages {
					return
				}
				m := &nats.Msg{Subject: subjects[i%len(subjects)], Header: nats.Header{api.HeaderKey: []string{"k" + strconv.Itoa(i%1000)}}, Data: payload}
				reply, err := nc.RequestMsg(m, 10*time.Second)
				if err == nil && reply.Header.Get(micro.ErrorCodeHeader) != "" {
					err = errors.New(reply.Header.Get(micro.ErrorCodeHeader) + " " + reply.Header.Get(micro.ErrorHeader))
				}
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				ok.Add(1)
			}
		}()
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		fmt.Printf("  %d produce requests failed, the first: %v\n", n, firstErr.Load())
	}
	return float64(ok.Load()) / time.Since(t0).Seconds()
}

// produceGoRate sends messages records through a Go producer (direct:
// straight to the topic's owner) over 64 keys and returns the rate of the
// acknowledged ones.
func produceGoRate(nc *nats.Conn, uri string, messages int, payload []byte, direct bool) float64 {
	p, err := client.NewProducer(nc, uri, client.WithDirect(direct))
	check(err)
	ctx := context.Background()
	var failed atomic.Int64
	start := time.Now()
	for i := range messages {
		check(p.Send(ctx, api.Record{Key: []byte(strconv.Itoa(i % 64)), Payload: payload}, func(_ client.MessageID, err error) {
			if err != nil {
				failed.Add(1)
			}
		}))
	}
	check(p.Close(ctx))
	if failed.Load() > 0 {
		check(fmt.Errorf("%d of %d records failed", failed.Load(), messages))
	}
	return float64(messages) / time.Since(start).Seconds()
}

// readBack reads n messages of the topic from its start with a new stream
// subscription and returns the rate.
func readBack(nc *nats.Conn, uri, sub string, n int) float64 {
	c, err := client.NewStreamConsumer(nc, uri, sub, client.WithStart("earliest"), client.WithFetch(1000, 4<<20, 100*time.Millisecond))
	check(err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	t0 := time.Now()
	for i := 0; i < n; i++ {
		m, err := c.Next(ctx)
		if err != nil {
			check(fmt.Errorf("replay of %s after %d of %d messages: %w", uri, i, n, err))
		}
		m.Ack()
	}
	rate := float64(n) / time.Since(t0).Seconds()
	check(c.Close(ctx))
	return rate
}

func check(err error) {
	if err != nil {
		b, _ := json.Marshal(err.Error())
		fmt.Fprintf(os.Stderr, "cluster benchmark: %s\n", b)
		os.Exit(1)
	}
}
