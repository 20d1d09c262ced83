package main

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// The wire contract, spelled out here rather than imported from api, so
// that the program is a plain NATS client (and builds while api changes).
const (
	adminPrefix    = "braid.v1.admin."
	producePrefix  = "braid.v1.produce."
	headerKey      = "Braid-Key"
	errCodeHeader  = "Nats-Service-Error-Code"
	errDescHeader  = "Nats-Service-Error"
	codeBadRequest = "400"
)

// errCounts counts failed requests by code: the Nats-Service-Error-Code of
// an error reply, or what the client saw (timeout, no responders, ...).
// It keeps the first description of each code as a sample.
type errCounts struct {
	mu     sync.Mutex
	n      map[string]int
	sample map[string]string
}

func newErrCounts() *errCounts {
	return &errCounts{n: map[string]int{}, sample: map[string]string{}}
}

func (e *errCounts) add(code, desc string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.n[code]++
	if _, ok := e.sample[code]; !ok {
		e.sample[code] = desc
	}
}

func (e *errCounts) total() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	t := 0
	for _, n := range e.n {
		t += n
	}
	return t
}

// String is "none" or "503 x12 (UNAVAILABLE: ...), timeout x3 (...)".
func (e *errCounts) String() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.n) == 0 {
		return "none"
	}
	codes := make([]string, 0, len(e.n))
	for c := range e.n {
		codes = append(codes, c)
	}
	sort.Slice(codes, func(i, j int) bool { return e.n[codes[i]] > e.n[codes[j]] })
	var parts []string
	for _, c := range codes {
		parts = append(parts, fmt.Sprintf("%s x%d (%s)", c, e.n[c], truncate(e.sample[c], 140)))
	}
	return strings.Join(parts, ", ")
}

// request sends m and waits up to timeout for its reply. A failed request
// returns the code it is counted under and a description; code "" is
// success.
func request(nc *nats.Conn, m *nats.Msg, timeout time.Duration) (reply *nats.Msg, code, desc string) {
	reply, err := nc.RequestMsg(m, timeout)
	switch {
	case errors.Is(err, nats.ErrTimeout):
		return nil, "timeout", fmt.Sprintf("no reply within %s", timeout)
	case errors.Is(err, nats.ErrNoResponders):
		return nil, "no-responders", "no responders on " + m.Subject
	case err != nil:
		return nil, "client", err.Error()
	}
	if c := reply.Header.Get(errCodeHeader); c != "" {
		return reply, c, reply.Header.Get(errDescHeader)
	}
	return reply, "", ""
}

// admin sends one admin request with a JSON body.
func admin(nc *nats.Conn, op, body string, timeout time.Duration) (reply *nats.Msg, code, desc string) {
	return request(nc, &nats.Msg{Subject: adminPrefix + op, Data: []byte(body)}, timeout)
}

// poolResult is the outcome of n requests sent by a pool.
type poolResult struct {
	ok       int
	elapsed  time.Duration
	p50, p99 time.Duration
	errs     *errCounts
	aborted  string // why the pool stopped early ("" when it did not)
	// serverCPU and selfCPU are the CPU time the server and this program
	// spent during the run (zero when unknown).
	serverCPU, selfCPU time.Duration
}

func (r poolResult) rate() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(r.ok) / r.elapsed.Seconds()
}

func (r poolResult) String() string {
	s := fmt.Sprintf("%d ok in %s = %.0f/s, p50 %s p99 %s, errors: %s", r.ok, r.elapsed.Round(time.Millisecond),
		r.rate(), r.p50.Round(10*time.Microsecond), r.p99.Round(10*time.Microsecond), r.errs)
	if r.ok > 0 && (r.serverCPU > 0 || r.selfCPU > 0) {
		s += fmt.Sprintf("; CPU per message: server %.1fus, this program %.1fus",
			float64(r.serverCPU.Microseconds())/float64(r.ok), float64(r.selfCPU.Microseconds())/float64(r.ok))
	}
	if r.aborted != "" {
		s += "; ABORTED: " + r.aborted
	}
	return s
}

// pool sends n requests, msg(i) for i in [0, n), with concurrency of them
// in flight, each waiting for its reply up to timeout. It stops early when
// the server has died.
func pool(nc *nats.Conn, s *server, n, concurrency int, timeout time.Duration, msg func(i int) *nats.Msg) poolResult {
	res := poolResult{errs: newErrCounts()}
	lat := make([]time.Duration, n)
	var next, ok atomic.Int64
	var wg sync.WaitGroup
	mark := cpuMark(s)
	t0 := time.Now()
	for w := 0; w < min(concurrency, n); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || s.dead() {
					return
				}
				t := time.Now()
				_, code, desc := request(nc, msg(i), timeout)
				lat[i] = time.Since(t)
				if code == "" {
					ok.Add(1)
				} else {
					res.errs.add(code, desc)
				}
			}
		}()
	}
	wg.Wait()
	res.elapsed = time.Since(t0)
	res.serverCPU, res.selfCPU = mark.since(s)
	res.ok = int(ok.Load())
	if sent := min(int(next.Load()), n); sent < n {
		res.aborted = fmt.Sprintf("the server died after %d of %d requests", sent, n)
		lat = lat[:sent]
	}
	res.p50, res.p99 = percentiles(lat)
	return res
}

func percentiles(d []time.Duration) (p50, p99 time.Duration) {
	if len(d) == 0 {
		return 0, 0
	}
	d = slices.Clone(d)
	slices.Sort(d)
	return d[len(d)*50/100], d[min(len(d)-1, len(d)*99/100)]
}

func topicName(i int) string { return fmt.Sprintf("t%06d", i) }

// createTopics creates n topics of one segment in tenant/ns.
func createTopics(nc *nats.Conn, s *server, tenant, ns string, n, concurrency int, timeout time.Duration) poolResult {
	return pool(nc, s, n, concurrency, timeout, func(i int) *nats.Msg {
		body := `{"topic":"topic://` + tenant + "/" + ns + "/" + topicName(i) + `","segments":1}`
		return &nats.Msg{Subject: adminPrefix + "topic.create", Data: []byte(body)}
	})
}

// produce sends messages single-message produce requests, message i to
// topics[i%len(topics)], keyed over 1,000 keys per topic.
func produce(nc *nats.Conn, s *server, tenant, ns string, topics []string, messages, size, concurrency int, timeout time.Duration) poolResult {
	subjects := make([]string, len(topics))
	for i, t := range topics {
		subjects[i] = producePrefix + tenant + "." + ns + "." + t
	}
	const keys = 1000
	headers := make([]nats.Header, keys)
	for k := range headers {
		headers[k] = nats.Header{headerKey: []string{"k" + strconv.Itoa(k)}}
	}
	payload := make([]byte, size)
	for i := range payload {
		payload[i] = byte('a' + i%26)
	}
	return pool(nc, s, messages, concurrency, timeout, func(i int) *nats.Msg {
		return &nats.Msg{Subject: subjects[i%len(subjects)], Header: headers[(i/len(subjects))%keys], Data: payload}
	})
}
