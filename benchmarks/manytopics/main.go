// Command manytopics measures how one Braid server holds many topics in
// one namespace: how fast they are created, what each costs at rest
// (memory, file descriptors, goroutines, threads, idle CPU, the /metrics
// scrape), how long a restart takes with them, how long topic.list takes,
// and how produce spread over many topics compares with produce to one.
//
//	go run ./benchmarks/manytopics [-topics 1000,10000] [-produce-topics 1000] [-messages 200000]
//	    [-size 100] [-concurrency 256] [-topic-buckets 64] [-rounds 3] [-braid bin/braid]
//
// Each size runs a fresh `braid serve` child process (built from this
// module unless -braid names a binary) on 127.0.0.1 in a new data
// directory, with /metrics on a free port, and talks to it as any plain
// NATS client does: one request per create or message, -concurrency of
// them in flight, each waiting for its reply. The namespace public/many
// is created with -topic-buckets metadata buckets; the topics have one
// segment and the default entry buckets.
//
// A server that dies is a finding, not a failure of the program: it says
// so with the end of the server's log and goes on with the next size.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/braidmq/braid/benchmarks/workload"
)

// goProfile is where -go-client-cpuprofile writes ("": nowhere).
var goProfile string

type config struct {
	sizes                  []int
	produceTopics          int
	messages, size, conc   int
	topicBuckets, rounds   int
	timeout, idle          time.Duration
	settleWindow, settleBy time.Duration
	readyBy, stopBy        time.Duration
	logLevel               string
	seed                   int64
	goClient               bool
}

func main() {
	sizesFlag := flag.String("topics", "1000,10000", "numbers of topics, comma-separated; each is a fresh server and data directory")
	produceTopics := flag.Int("produce-topics", 1000, "random topics the many-topic produce runs spread over (at most the size)")
	messages := flag.Int("messages", 200_000, "messages per produce run")
	size := flag.Int("size", 100, "payload bytes")
	conc := flag.Int("concurrency", 256, "create and produce requests in flight")
	topicBuckets := flag.Int("topic-buckets", 64, "topic_buckets of the namespace public/many")
	rounds := flag.Int("rounds", 3, "alternating produce rounds (many topics, then one topic)")
	timeout := flag.Duration("timeout", 10*time.Second, "timeout of one create or produce request")
	idle := flag.Duration("idle", 10*time.Second, "idle CPU window")
	settleBy := flag.Duration("settle", 60*time.Second, "deadline of the settle after creation and after the restart")
	readyBy := flag.Duration("ready-timeout", 120*time.Second, "how long a (re)started server may take to answer")
	stopBy := flag.Duration("stop-timeout", 60*time.Second, "how long the server may take to exit after SIGTERM before SIGKILL")
	logLevel := flag.String("log-level", "warn", "the server's --log-level")
	bin := flag.String("braid", "", "a braid binary to run (default: go build ./cmd/braid)")
	seed := flag.Int64("seed", 1, "seed of the random choice of produce topics")
	goClient := flag.Bool("go-client", true, "also produce through the Go client (a producer per topic), in rounds of its own")
	flag.StringVar(&goProfile, "go-client-cpuprofile", "", "write a CPU profile of this program during the Go client rounds to this file")
	serveArgs := flag.String("serve-args", "", "more braid serve flags, space-separated (e.g. --commit-sync syncfs)")
	flag.Parse()
	extraServeArgs = strings.Fields(*serveArgs)
	cfg := config{sizes: ints("topics", *sizesFlag), produceTopics: *produceTopics, messages: *messages, size: *size,
		conc: *conc, topicBuckets: *topicBuckets, rounds: *rounds, timeout: *timeout, idle: *idle,
		settleWindow: 2 * time.Second, settleBy: *settleBy, readyBy: *readyBy, stopBy: *stopBy, logLevel: *logLevel, seed: *seed,
		goClient: *goClient}
	if cfg.produceTopics < 1 || cfg.messages < 1 || cfg.size < 0 || cfg.conc < 1 || cfg.rounds < 1 {
		fatal("-produce-topics, -messages, -concurrency and -rounds must be positive, -size not negative")
	}

	tmp, err := os.MkdirTemp("", "braid-manytopics-")
	if err != nil {
		fatal(err.Error())
	}
	// Whatever ends the program (a return, a panic, SIGINT, SIGTERM) kills
	// the running server and removes the temporary directory; the child's
	// Pdeathsig covers the rest (a panic in another goroutine).
	var cleanupOnce sync.Once
	cleanup = func() {
		cleanupOnce.Do(func() {
			if s := current.Load(); s != nil {
				_ = s.kill()
			}
			_ = os.RemoveAll(tmp)
		})
	}
	defer cleanup()
	defer func() {
		if r := recover(); r != nil {
			cleanup()
			panic(r)
		}
	}()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		sig := <-sigs
		fmt.Fprintf(os.Stderr, "\n%s: killing the server and stopping\n", sig)
		cleanup()
		os.Exit(130)
	}()

	if *bin == "" {
		fmt.Print("building cmd/braid... ")
		t0 := time.Now()
		if *bin, err = workload.BuildBraid(tmp); err != nil {
			fatal(err.Error())
		}
		fmt.Printf("%s, from %s\n", time.Since(t0).Round(time.Millisecond), revision())
	}
	var nofile syscall.Rlimit
	_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &nofile)
	fmt.Printf("machine: %d CPUs, %s/%s, %s; open-files limit %d soft / %d hard (the server inherits it; Go raises the soft one to the hard one)\n",
		runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version(), nofile.Cur, nofile.Max)
	fmt.Printf("per size: a fresh server; %d produce topics, %d messages of %d B per run, %d in flight, %d rounds, request timeout %s\n\n",
		cfg.produceTopics, cfg.messages, cfg.size, cfg.conc, cfg.rounds, cfg.timeout)

	var rows []row
	for _, n := range cfg.sizes {
		dir := filepath.Join(tmp, fmt.Sprintf("n%d", n))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			fatal(err.Error())
		}
		r := runSize(cfg, *bin, dir, n)
		rows = append(rows, r)
		_ = os.RemoveAll(dir)
		fmt.Println()
	}
	printTable(rows)
}

// current is the server running now, for the cleanup.
var current atomic.Pointer[server]

// cleanup kills the running server and removes the temporary directory;
// main sets it.
var cleanup = func() {}

// row is one size's results; a field left at its zero value prints "-".
type row struct {
	topics                           int
	createRate                       float64
	rssPerTopicKB                    float64
	fds, goroutines, threads         int
	scrape                           *metricsScrape
	idleCPU                          float64
	idleOK                           bool
	restart                          time.Duration
	postRSSPerTopicKB                float64
	postFds                          int
	postOK                           bool
	list, listBefore                 time.Duration
	haveListBefore                   bool
	many, one                        float64
	ratio, ratioMin, ratioMax        float64
	goMany, goOne                    float64 // the same through the Go client
	goRatio, goRatioMin, goRatioMax  float64
	haveStats, haveRestart, haveList bool
	died                             string // the phase in which the server died
}

func runSize(cfg config, bin, dir string, n int) (r row) {
	r.topics = n
	fmt.Printf("=== %d topics\n", n)
	s, err := newServer(bin, dir, cfg.logLevel)
	if err != nil {
		fatal(err.Error())
	}
	current.Store(s)
	defer func() {
		if !s.dead() {
			d, killed, err := s.stop(cfg.stopBy)
			fmt.Printf("stop: SIGTERM to exit %s%s%s\n", d.Round(time.Millisecond), map[bool]string{true: " (needed SIGKILL)"}[killed], errSuffix(err))
		}
		current.Store(nil)
		if lines := s.logSummary(15); len(lines) > 0 {
			fmt.Printf("server log, warnings and errors by message (%s):\n  %s\n", s.logPath, strings.Join(lines, "\n  "))
		}
		_ = s.log.Close()
	}()
	died := func(phase string) bool {
		if !s.dead() {
			return false
		}
		r.died = phase
		fmt.Printf("!!! THE SERVER DIED during %s (%s); the last lines of its log:\n%s\n", phase, s.exitStatus(), indent(s.logTail(30)))
		return true
	}

	if err := s.start(); err != nil {
		fatal(err.Error())
	}
	nc, err := nats.Connect(s.url(), nats.Name("manytopics"), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond), nats.ReconnectJitter(0, 0),
		nats.RetryOnFailedConnect(true), nats.Timeout(2*time.Second), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		fatal(err.Error())
	}
	defer func() { nc.Close() }()
	if d, err := waitReady(s, nc, "tenant.list", `{}`, cfg.readyBy); err != nil {
		fmt.Printf("the server did not start: %v\n", err)
		died("start")
		return r
	} else {
		fmt.Printf("started: answers after %s\n", d.Round(time.Millisecond))
	}

	tenant, ns := "public", "many"
	_, code, desc := admin(nc, "namespace.create", fmt.Sprintf(`{"namespace":"public/many","topic_buckets":%d}`, cfg.topicBuckets), 30*time.Second)
	if code != "" {
		ns = "default"
		fmt.Printf("NOTE: namespace.create public/many with topic_buckets %d failed (%s: %s): using public/default (its default topic_buckets)\n",
			cfg.topicBuckets, code, desc)
	} else {
		fmt.Printf("namespace public/many created with topic_buckets %d\n", cfg.topicBuckets)
	}

	base, took, why := settle(s, cfg.settleWindow, cfg.settleBy)
	fmt.Printf("before any topic (settled %s%s): %s\n", took.Round(time.Millisecond), notSettled(why), base)

	// Create.
	cr := createTopics(nc, s, tenant, ns, n, cfg.conc, cfg.timeout)
	fmt.Printf("create: %s\n", cr)
	r.createRate = cr.rate()
	if died("topic creation") {
		return r
	}

	// At rest.
	st, took, why := settle(s, cfg.settleWindow, cfg.settleBy)
	if died("the settle after creation") {
		return r
	}
	fmt.Printf("after creation (settled %s%s): %s\n", took.Round(time.Millisecond), notSettled(why), st)
	if st.err == nil && base.err == nil {
		r.haveStats = true
		r.rssPerTopicKB = float64(st.rssKB-base.rssKB) / float64(n)
		r.fds, r.goroutines, r.threads = st.fds, st.goroutines, st.threads
		fmt.Printf("per topic: %.1f KiB RSS, %.2f fds, %.2f goroutines\n", r.rssPerTopicKB,
			float64(st.fds-base.fds)/float64(n), float64(st.goroutines-base.goroutines)/float64(n))
	}
	if m, err := scrape(s.metricsAddr, 30*time.Second); err != nil {
		fmt.Printf("metrics scrape: FAILED: %v\n", err)
	} else {
		r.scrape = &m
		fmt.Printf("metrics scrape: %s, %.2f MB, %d series\n", m.elapsed.Round(100*time.Microsecond), float64(m.bytes)/1e6, m.series)
	}
	if cpu, err := idleCPU(s.pid(), cfg.idle); err != nil || s.dead() {
		fmt.Printf("idle CPU: unreadable: %v\n", err)
	} else {
		r.idleCPU, r.idleOK = cpu, true
		fmt.Printf("idle CPU over %s: %.1f %% of one core\n", cfg.idle, cpu)
	}
	if died("the idle window") {
		return r
	}
	r.listBefore, r.haveListBefore = listTopics(nc, tenant, ns, n, "before the restart")
	if died("topic.list") {
		return r
	}

	// Restart.
	d, killed, err := s.stop(cfg.stopBy)
	fmt.Printf("restart: SIGTERM to exit %s (%s)%s%s\n", d.Round(time.Millisecond), s.exitStatus(),
		map[bool]string{true: " NEEDED SIGKILL"}[killed], errSuffix(err))
	if err := s.start(); err != nil {
		fatal(err.Error())
	}
	probe := fmt.Sprintf(`{"topic":"topic://%s/%s/%s"}`, tenant, ns, topicName(0))
	if d, err := waitReady(s, nc, "topic.describe", probe, cfg.readyBy); err != nil {
		fmt.Printf("restart: the server does not answer topic.describe: %v\n", err)
		if !died("the restart") {
			r.died = "restart (not answering)"
		}
		return r
	} else {
		r.restart, r.haveRestart = d, true
		fmt.Printf("restart: exec to the first answered topic.describe %s\n", d.Round(time.Millisecond))
	}
	post, took, why := settle(s, cfg.settleWindow, cfg.settleBy)
	if died("the settle after the restart") {
		return r
	}
	fmt.Printf("after the restart (settled %s%s): %s\n", took.Round(time.Millisecond), notSettled(why), post)
	if post.err == nil && base.err == nil {
		r.postOK = true
		r.postRSSPerTopicKB = float64(post.rssKB-base.rssKB) / float64(n)
		r.postFds = post.fds
	}

	// List.
	r.list, r.haveList = listTopics(nc, tenant, ns, n, "after the restart")
	if died("topic.list") {
		return r
	}

	// Produce: many random topics, then one, alternating.
	rng := rand.New(rand.NewSource(cfg.seed))
	many := make([]string, 0, min(cfg.produceTopics, n))
	for _, i := range rng.Perm(n)[:min(cfg.produceTopics, n)] {
		many = append(many, topicName(i))
	}
	one := []string{many[0]}
	var manyRates, oneRates, ratios []float64
	for round := 1; round <= cfg.rounds; round++ {
		m := produce(nc, s, tenant, ns, many, cfg.messages, cfg.size, cfg.conc, cfg.timeout)
		fmt.Printf("round %d produce to %d topics: %s\n", round, len(many), m)
		if died(fmt.Sprintf("produce to %d topics (round %d)", len(many), round)) {
			break
		}
		o := produce(nc, s, tenant, ns, one, cfg.messages, cfg.size, cfg.conc, cfg.timeout)
		fmt.Printf("round %d produce to 1 topic:    %s\n", round, o)
		if died(fmt.Sprintf("produce to one topic (round %d)", round)) {
			break
		}
		manyRates, oneRates = append(manyRates, m.rate()), append(oneRates, o.rate())
		if o.rate() > 0 {
			ratios = append(ratios, m.rate()/o.rate())
		}
	}
	if len(manyRates) > 0 {
		r.many, r.one = medianOf(manyRates), medianOf(oneRates)
	}
	if len(ratios) > 0 {
		r.ratio = medianOf(ratios)
		r.ratioMin, r.ratioMax = slices.Min(ratios), slices.Max(ratios)
		fmt.Printf("produce: many %.0f msg/s, one %.0f msg/s (medians), many/one %.2fx [%.2f, %.2f] over %d rounds\n",
			r.many, r.one, r.ratio, r.ratioMin, r.ratioMax, len(ratios))
	}
	if cfg.goClient && !s.dead() {
		produceGoRounds(cfg, s, nc, tenant, ns, many, one, &r)
	}
	if !s.dead() {
		fmt.Printf("after produce: %s\n", readStats(s.pid(), s.metricsAddr))
	}
	return r
}

// produceGoRounds runs the produce rounds through the Go client: many
// topics, then one, alternating.
func produceGoRounds(cfg config, s *server, nc *nats.Conn, tenant, ns string, many, one []string, r *row) {
	manyP, err := newGoProducers(nc, tenant, ns, many)
	if err != nil {
		fmt.Printf("Go client: %v\n", err)
		return
	}
	defer manyP.close()
	oneP, err := newGoProducers(nc, tenant, ns, one)
	if err != nil {
		fmt.Printf("Go client: %v\n", err)
		return
	}
	defer oneP.close()
	if goProfile != "" {
		f, err := os.Create(goProfile)
		if err != nil {
			fatal(err.Error())
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fatal(err.Error())
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	var manyRates, oneRates, ratios []float64
	for round := 1; round <= cfg.rounds && !s.dead(); round++ {
		m := produceGo(s, manyP, cfg.messages, cfg.size, cfg.conc, cfg.timeout)
		fmt.Printf("round %d Go client to %d topics: %s\n", round, len(many), m)
		o := produceGo(s, oneP, cfg.messages, cfg.size, cfg.conc, cfg.timeout)
		fmt.Printf("round %d Go client to 1 topic:    %s\n", round, o)
		manyRates, oneRates = append(manyRates, m.rate()), append(oneRates, o.rate())
		if o.rate() > 0 {
			ratios = append(ratios, m.rate()/o.rate())
		}
	}
	if len(ratios) > 0 {
		r.goMany, r.goOne, r.goRatio = medianOf(manyRates), medianOf(oneRates), medianOf(ratios)
		r.goRatioMin, r.goRatioMax = slices.Min(ratios), slices.Max(ratios)
		fmt.Printf("Go client produce: many %.0f msg/s, one %.0f msg/s (medians), many/one %.2fx [%.2f, %.2f] over %d rounds\n",
			r.goMany, r.goOne, r.goRatio, r.goRatioMin, r.goRatioMax, len(ratios))
	}
}

// waitReady polls op until it is answered without an error, the server
// exits or the deadline passes; it returns the time since the exec.
func waitReady(s *server, nc *nats.Conn, op, body string, deadline time.Duration) (time.Duration, error) {
	t0 := s.startedAt()
	exited := s.exitedCh()
	last := "nothing yet"
	for time.Since(t0) < deadline {
		if nc.IsConnected() {
			_, code, desc := admin(nc, op, body, time.Second)
			if code == "" {
				return time.Since(t0), nil
			}
			last = code + ": " + desc
		} else {
			last = "not connected (" + nc.Status().String() + ")"
		}
		select {
		case <-exited:
			return 0, fmt.Errorf("the server exited while starting (%s); last probe: %s", s.exitStatus(), last)
		case <-time.After(10 * time.Millisecond):
		}
	}
	return 0, fmt.Errorf("no answer within %s; last probe: %s", deadline, last)
}

// listTopics times one topic.list of the namespace, with "limit":1000
// when the server takes it (a server that does not refuses the unknown
// field with BAD_REQUEST, and the request goes again without it).
func listTopics(nc *nats.Conn, tenant, ns string, n int, when string) (time.Duration, bool) {
	var reply struct {
		Topics []string        `json:"topics"`
		Count  *int            `json:"count"`
		Next   json.RawMessage `json:"next"`
	}
	body := fmt.Sprintf(`{"namespace":"%s/%s","limit":1000}`, tenant, ns)
	t0 := time.Now()
	m, code, desc := admin(nc, "topic.list", body, 30*time.Second)
	d := time.Since(t0)
	note, want := when+", limit 1000", min(n, 1000)
	if code == codeBadRequest && strings.Contains(desc, "limit") {
		note, want = when+", no limit: the server refuses the field ("+truncate(desc, 80)+")", n
		t0 = time.Now()
		m, code, desc = admin(nc, "topic.list", fmt.Sprintf(`{"namespace":"%s/%s"}`, tenant, ns), 30*time.Second)
		d = time.Since(t0)
	}
	if code != "" {
		fmt.Printf("topic.list (%s): FAILED after %s: %s %s\n", note, d.Round(100*time.Microsecond), code, desc)
		return 0, false
	}
	if err := json.Unmarshal(m.Data, &reply); err != nil {
		fmt.Printf("topic.list (%s): %s, reply not JSON: %v\n", note, d.Round(100*time.Microsecond), err)
		return d, true
	}
	extra := ""
	if reply.Count != nil {
		extra += fmt.Sprintf(", count %d", *reply.Count)
		if *reply.Count != n {
			extra += fmt.Sprintf(" (EXPECTED %d)", n)
		}
	}
	if len(reply.Next) > 0 && string(reply.Next) != "null" && string(reply.Next) != `""` {
		extra += ", next " + truncate(string(reply.Next), 40)
	}
	if len(reply.Topics) != want {
		extra += fmt.Sprintf(" (EXPECTED %d: topics are missing from the list)", want)
	}
	fmt.Printf("topic.list (%s): %s, %d topics in the reply (%d bytes)%s\n", note, d.Round(100*time.Microsecond), len(reply.Topics), len(m.Data), extra)
	return d, true
}

func printTable(rows []row) {
	fmt.Println("| topics | create/s | RSS/topic | fds | goroutines | threads | metrics scrape (ms, MB, series) | idle CPU % | restart s | post-restart RSS/topic | post-restart fds | list ms (before / after restart) | produce many msg/s | one msg/s | many/one [min, max] | Go client many / one msg/s | Go client many/one [min, max] |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		c := []string{strconv.Itoa(r.topics), num(r.createRate, r.createRate > 0, "%.0f")}
		if r.haveStats {
			c = append(c, fmt.Sprintf("%.1f KiB", r.rssPerTopicKB), strconv.Itoa(r.fds), strconv.Itoa(r.goroutines), strconv.Itoa(r.threads))
		} else {
			c = append(c, "-", "-", "-", "-")
		}
		if r.scrape != nil {
			c = append(c, fmt.Sprintf("%.1f, %.2f, %d", float64(r.scrape.elapsed)/float64(time.Millisecond), float64(r.scrape.bytes)/1e6, r.scrape.series))
		} else {
			c = append(c, "-")
		}
		c = append(c, num(r.idleCPU, r.idleOK, "%.1f"), num(r.restart.Seconds(), r.haveRestart, "%.2f"))
		if r.postOK {
			c = append(c, fmt.Sprintf("%.1f KiB", r.postRSSPerTopicKB), strconv.Itoa(r.postFds))
		} else {
			c = append(c, "-", "-")
		}
		c = append(c, num(float64(r.listBefore)/float64(time.Millisecond), r.haveListBefore, "%.1f")+" / "+
			num(float64(r.list)/float64(time.Millisecond), r.haveList, "%.1f"),
			num(r.many, r.many > 0, "%.0f"), num(r.one, r.one > 0, "%.0f"))
		if r.ratio > 0 {
			c = append(c, fmt.Sprintf("%.2fx [%.2f, %.2f]", r.ratio, r.ratioMin, r.ratioMax))
		} else {
			c = append(c, "-")
		}
		if r.goRatio > 0 {
			c = append(c, fmt.Sprintf("%.0f / %.0f", r.goMany, r.goOne), fmt.Sprintf("%.2fx [%.2f, %.2f]", r.goRatio, r.goRatioMin, r.goRatioMax))
		} else {
			c = append(c, "-", "-")
		}
		line := "| " + strings.Join(c, " | ") + " |"
		if r.died != "" {
			line += " **server died: " + r.died + "**"
		}
		fmt.Println(line)
	}
}

func num(v float64, ok bool, format string) string {
	if !ok {
		return "-"
	}
	return fmt.Sprintf(format, v)
}

func medianOf(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

func notSettled(why string) string {
	if why == "" {
		return ""
	}
	return ", NOT SETTLED by the deadline (" + why + ")"
}

func errSuffix(err error) string {
	if err == nil {
		return ""
	}
	return "; " + err.Error()
}

func indent(s string) string { return "    " + strings.ReplaceAll(s, "\n", "\n    ") }

func ints(name, s string) []int {
	var out []int
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' }) {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			fatal(fmt.Sprintf("-%s: %q is not a positive number", name, f))
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		fatal("-" + name + ": empty")
	}
	return out
}

func fatal(msg string) {
	cleanup()
	fmt.Fprintln(os.Stderr, "manytopics:", msg)
	os.Exit(1)
}

// revision says what the server was built from: the commit and how many
// files differ from it in the work tree.
func revision() string {
	head, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "revision unknown (no git)"
	}
	st, _ := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output()
	changed := 0
	for _, l := range strings.Split(string(st), "\n") {
		if strings.TrimSpace(l) != "" {
			changed++
		}
	}
	return fmt.Sprintf("commit %s + %d modified files in the work tree", strings.TrimSpace(string(head)), changed)
}
