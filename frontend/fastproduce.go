package frontend

import (
	"bytes"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/braidmq/braid/cluster"

	"github.com/braidmq/braid/actors"
	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/authz"
	"github.com/braidmq/braid/frontend/natsio"
	"github.com/braidmq/braid/routing"
	"github.com/braidmq/braid/wal"
	"github.com/nats-io/nuid"
	"github.com/prometheus/client_golang/prometheus"
)

// fastProduce serves the produce endpoints (produce and produce-batch) of
// a node with an embedded NATS server over a natsio connection through
// the server's in-process pipe, instead of a nats.go micro service: the
// single-message produce path is then one parse of the frame, one append
// per bucket for all the requests of one read, and replies written into
// one buffer (see natsio). It answers the micro-service protocol ($SRV
// PING, INFO, STATS) for braid-produce itself, so `nats micro` shows the
// service as before. The requests and replies are those of the micro
// endpoints, byte for byte; fastproduce_test.go runs the produce tests
// over both.
type fastProduce struct {
	n       *Frontend
	id      string
	started time.Time
	one     endpointStats
	batch   endpointStats
	multi   endpointStats
	// inflight is the payload bytes taken and not yet answered; past
	// produceQueueBytes new requests are refused with UNAVAILABLE.
	inflight atomic.Int64

	mu sync.Mutex
	// conn is the current connection; stopping is set once Close began.
	// Guarded by mu.
	conn     *natsio.Conn
	sids     []uint64
	stopping bool
	// paused is set while the node does not hold the entry role: the
	// connection stays (replies to what it took still go out) but takes
	// no request.
	paused  bool
	stopped chan struct{}

	// Touched by the read goroutine only:
	// topics caches the topic of a produce subject; pending holds the
	// produce-one requests of the current read, per topic: pending[:npending]
	// are in use, the rest kept for reuse.
	topics   map[string]*actors.Topic
	pending  []*pendingTopic
	npending int
	// frames holds reply buffers for readBatch.Produced to reuse.
	frames sync.Pool
}

// pendingTopic gathers the produce-one requests of one read for one topic
// in buffers reused from read to read; the read's end hands them to the
// topic as a readBatch sized exactly (a batch grown request by request
// was a fifth of what the produce path allocated).
type pendingTopic struct {
	t       *actors.Topic
	subject []byte
	start   time.Time
	recs    []wal.Record
	epochs  []uint64
	replies [][]byte
}

// endpointStats are the micro-service stats of one endpoint.
type endpointStats struct {
	requests, errors atomic.Int64
	nanos            atomic.Int64 // processing time, receipt to reply
	lastErr          atomic.Pointer[string]
	latency          prometheus.Observer // braid_request_duration_seconds, nil: none
}

// took counts n requests answered d after their receipt.
func (e *endpointStats) took(d time.Duration, n int) {
	e.nanos.Add(int64(d) * int64(n))
	if e.latency != nil {
		for range n {
			e.latency.Observe(d.Seconds())
		}
	}
}

func (e *endpointStats) failed(err *api.Error) { e.failedWith(err.Error()) }

const (
	produceServiceName = "braid-produce"
	produceQueueGroup  = "q" // micro's default queue group, as before
	topicCacheMax      = 4096
)

func (n *Frontend) startFastProduce() error {
	f := &fastProduce{n: n, id: nuid.Next(), started: time.Now().UTC(), stopped: make(chan struct{}),
		topics: map[string]*actors.Topic{}}
	f.one.latency = n.requestLatency.WithLabelValues(produceServiceName, "produce")
	f.batch.latency = n.requestLatency.WithLabelValues(produceServiceName, "produce-batch")
	f.multi.latency = n.requestLatency.WithLabelValues(produceServiceName, "produce-multi")
	if err := f.connect(); err != nil {
		return err
	}
	n.fast = f
	n.replies.Store(f)
	go f.supervise()
	return nil
}

// connect dials the embedded server and subscribes.
func (f *fastProduce) connect() error {
	// Loopback TCP rather than the server's in-process pipe: the pipe's
	// writes wait for the reader, and on two CPUs the server's write loop
	// and this connection's writer spent milliseconds waiting to be
	// scheduled after each hand-over (w=512 single-message produce:
	// 96k-135k msg/s over the pipe, 160k-165k over TCP, alternating runs).
	var tcp net.Conn
	var err error
	if f.n.cfg.Auth.TLS {
		// A TLS-only listener: the in-process pipe, which needs none.
		tcp, err = f.n.cfg.Server.InProcessConn()
	} else {
		tcp, err = net.Dial("tcp", loopbackAddr(f.n.cfg.Server.Addr()))
	}
	if err != nil {
		return fmt.Errorf("produce connection: %w", err)
	}
	opts := natsio.Options{Name: "braid-produce", OnServerError: func(msg string) {
		f.n.log.Error("NATS server error on the produce connection", "err", msg)
	}}
	if a := f.n.cfg.Auth; a.User != "" {
		opts.User, opts.Password = a.User, a.Password
	}

	conn, err := natsio.Connect(tcp, opts)
	if err != nil {
		return fmt.Errorf("produce connection: %w", err)
	}
	f.mu.Lock()
	paused := f.paused
	f.mu.Unlock()
	var sids []uint64
	if !paused {
		if sids, err = f.subscribe(conn); err != nil {
			conn.Close()
			return err
		}
	}
	f.mu.Lock()
	f.conn, f.sids = conn, sids
	f.mu.Unlock()
	return nil
}

// subscribe subscribes conn to the produce subjects and the service's
// control subjects, and waits until the server knows them (or a first
// request could find no responder).
func (f *fastProduce) subscribe(conn *natsio.Conn) ([]uint64, error) {
	var sids []uint64
	subs := []struct{ subject, queue string }{
		{api.ProducePrefix + ".*.*.*", produceQueueGroup},
		{api.ProduceBatchPrefix + ".*.*.*", produceQueueGroup},
		{api.ProduceMultiPrefix + ".*", produceQueueGroup},
		{"$SRV.*", ""},
		{"$SRV.*." + produceServiceName, ""},
		{"$SRV.*." + produceServiceName + "." + f.id, ""},
	}
	for _, s := range subs {
		sid, err := conn.Subscribe(s.subject, s.queue, f)
		if err != nil {
			return nil, err
		}
		sids = append(sids, sid)
	}
	if err := conn.Flush(10 * time.Second); err != nil {
		return nil, fmt.Errorf("produce connection: %w", err)
	}
	return sids, nil
}

// pause stops taking requests (the node gave the entry role up); the
// connection stays, for the replies to what it took.
func (f *fastProduce) pause() {
	f.mu.Lock()
	f.paused = true
	conn, sids := f.conn, f.sids
	f.sids = nil
	f.mu.Unlock()
	for _, sid := range sids {
		_ = conn.Unsubscribe(sid)
	}
	_ = conn.Flush(5 * time.Second)
}

// resume takes requests again (the node took the entry role again).
func (f *fastProduce) resume() error {
	f.mu.Lock()
	f.paused = false
	conn := f.conn
	f.mu.Unlock()
	sids, err := f.subscribe(conn)
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.sids = sids
	f.mu.Unlock()
	return nil
}

// loopbackAddr is the address to dial for a listener at addr: loopback
// when it listens on every interface.
func loopbackAddr(addr net.Addr) string {
	tcp, ok := addr.(*net.TCPAddr)
	if !ok {
		return addr.String()
	}
	if tcp.IP == nil || tcp.IP.IsUnspecified() {
		return net.JoinHostPort("127.0.0.1", strconv.Itoa(tcp.Port))
	}
	return tcp.String()
}

// supervise connects again when the connection ends before Close.
func (f *fastProduce) supervise() {
	defer close(f.stopped)
	backoff := 10 * time.Millisecond
	for {
		f.mu.Lock()
		conn, stopping := f.conn, f.stopping
		f.mu.Unlock()
		if stopping {
			return
		}
		<-conn.Done()
		f.mu.Lock()
		stopping = f.stopping
		f.mu.Unlock()
		if stopping {
			return
		}
		f.n.log.Error("the produce connection to the embedded NATS server ended; connecting again", "err", conn.Err())
		for {
			time.Sleep(backoff)
			if err := f.connect(); err == nil {
				break
			} else {
				f.n.log.Error("produce connection", "err", err)
			}
			backoff = min(2*backoff, time.Second)
			f.mu.Lock()
			stopping = f.stopping
			f.mu.Unlock()
			if stopping {
				return
			}
		}
	}
}

// stopTaking unsubscribes from the produce subjects and waits until the
// requests the server delivered before are handed to the topics.
func (f *fastProduce) stopTaking() {
	f.mu.Lock()
	f.stopping = true
	conn, sids := f.conn, f.sids
	f.mu.Unlock()
	for _, sid := range sids {
		_ = conn.Unsubscribe(sid)
	}
	_ = conn.Flush(5 * time.Second)
}

// close closes the connection once the topics have answered what they
// took.
func (f *fastProduce) close() {
	f.mu.Lock()
	f.stopping = true
	conn := f.conn
	f.mu.Unlock()
	// Once the server has answered a PING, it has routed every reply
	// written before it to its client.
	_ = conn.Flush(5 * time.Second)
	conn.Close()
	<-f.stopped
}

func (f *fastProduce) publish(subject, hdr, data []byte) {
	f.mu.Lock()
	conn := f.conn
	f.mu.Unlock()
	_ = conn.Publish(subject, nil, hdr, data)
}

// Message takes one request off the connection (natsio.Handler).
func (f *fastProduce) Message(m natsio.Msg) {
	switch {
	case bytes.HasPrefix(m.Subject, []byte(api.ProducePrefix+".")):
		f.n.produceInflight.add(1)
		f.produceOne(m)
	case bytes.HasPrefix(m.Subject, []byte(api.ProduceMultiPrefix+".")):
		f.n.produceInflight.add(1)
		f.flushPending() // a request must not overtake the requests before it
		f.produceMulti(m)
	case bytes.HasPrefix(m.Subject, []byte(api.ProduceBatchPrefix+".")):
		f.n.produceInflight.add(1)
		f.flushPending() // a batch must not overtake the requests before it
		f.produceBatch(m)
	case bytes.HasPrefix(m.Subject, []byte("$SRV.")):
		f.control(m)
	}
}

// EndOfRead hands the produce-one requests of the read to their topics
// (natsio.Handler).
func (f *fastProduce) EndOfRead() { f.flushPending() }

func (f *fastProduce) flushPending() {
	for _, p := range f.pending[:f.npending] {
		b := &readBatch{f: f, t: p.t, subject: p.subject, start: p.start,
			recs: slices.Clone(p.recs), epochs: slices.Clone(p.epochs), replies: slices.Clone(p.replies)}
		// Drop the references to the read's buffers before reuse.
		clear(p.recs)
		clear(p.replies)
		p.t, p.subject, p.recs, p.epochs, p.replies = nil, nil, p.recs[:0], p.epochs[:0], p.replies[:0]
		// Counted once for the read, not request by request: the limit
		// (produceQueueBytes) lets a read more through at most.
		var size int64
		for i := range b.recs {
			size += int64(len(b.recs[i].Payload))
		}
		f.inflight.Add(size)
		// The fences take checked for none of these (see take).
		if err := f.n.member.FenceRequests(len(b.recs)); err != nil {
			b.Produced(seq(len(b.recs)), 0, 0, 0, err)
			continue
		}
		b.t.ProduceEach(b.recs, b.epochs, b)
	}
	f.npending = 0
}

// topic resolves the topic of a produce subject, through the cache.
func (f *fastProduce) topic(subject []byte, prefix string) (*actors.Topic, error) {
	if t, ok := f.topics[string(subject)]; ok && t.Live() {
		return t, nil
	}
	s := string(subject)
	t, err := f.n.topicOf(s, prefix)
	if err != nil {
		return nil, err
	}
	if len(f.topics) >= topicCacheMax {
		clear(f.topics)
	}
	f.topics[s] = t
	return t, nil
}

// take begins serving a produce request of endpoint ep: it counts it,
// resolves its topic and reads its headers, answering the request itself
// (and reporting false) when that fails or the server holds too much.
//
// The node's fences (cluster.Member.FenceEntry, then Fence) are checked
// here, except for a produce-one request that joins the read's batch
// (batchable, and no Braid-Partition): flushPending checks them for the
// whole batch right before handing it to the topic, later than here, with
// one reading of the clock instead of two per request. A refusal found
// here still gives way to the entry fence's, as if it had been checked
// first.
func (f *fastProduce) take(ep *endpointStats, prefix string, m natsio.Msg, batchable bool) (*actors.Topic, produceHeaders, bool) {
	ep.requests.Add(1)
	if len(m.Reply) == 0 {
		f.n.produceM.noReply.Inc()
	}
	var t *actors.Topic
	var err error
	if info := rawHeaderValue(m.Header, authz.HeaderRequestInfo); info != nil {
		// Through a tenant's service import: authorized by its account.
		if tenant, _, _, ok := api.TopicTokens(string(m.Subject), strings.Count(prefix, ".")+1); ok {
			err = f.n.authorizeTenant(info, tenant, string(m.Subject))
		}
	}
	if err == nil {
		t, err = f.topic(m.Subject, prefix)
	}
	entryChecked := err != nil || !batchable
	if entryChecked {
		if fenced := f.n.member.FenceEntry(); fenced != nil {
			err = fenced
		}
	}
	if owner, ok := notOwner(err); ok {
		// Another node owns the topic: it gets the request as it came,
		// and answers the client.
		var node string
		if node, err = f.n.forwardTarget(owner, false); err == nil {
			f.mu.Lock()
			conn := f.conn
			f.mu.Unlock()
			if err = conn.Publish([]byte(fwdPrefix+"."+node+"."+string(m.Subject)), m.Reply, m.Header, m.Data); err == nil {
				f.n.produceInflight.done(1)
				return nil, produceHeaders{}, false
			}
		}
	}
	var h produceHeaders
	if err == nil {
		h, err = parseRawProduceHeaders(m.Header)
	}
	if err == nil && f.inflight.Load() > produceQueueBytes {
		err = api.Errorf(api.CodeUnavailable, "the server holds %d MiB of produce requests; retry", produceQueueBytes>>20)
	}
	deferred := batchable && h.partition < 0
	if !entryChecked && (err != nil || !deferred) {
		if fenced := f.n.member.FenceEntry(); fenced != nil {
			err = fenced
		}
	}
	if err == nil && !deferred {
		err = f.n.member.Fence()
	}
	if err != nil {
		f.fail(ep, m.Subject, m.Reply, err)
		f.n.produceInflight.done(1)
		return nil, h, false
	}
	return t, h, true
}

func (f *fastProduce) produceOne(m natsio.Msg) {
	t, h, ok := f.take(&f.one, api.ProducePrefix, m, true)
	if !ok {
		return
	}
	if h.partition >= 0 {
		f.produceToPartition(t, h, m)
		return
	}
	var b *pendingTopic
	for _, p := range f.pending[:f.npending] {
		if p.t == t {
			b = p
			break
		}
	}
	if b == nil {
		if f.npending == len(f.pending) {
			f.pending = append(f.pending, &pendingTopic{})
		}
		b = f.pending[f.npending]
		f.npending++
		b.t, b.subject, b.start = t, m.Subject, time.Now()
	}
	b.recs = append(b.recs, wal.Record{Timestamp: h.time, Key: h.key, Headers: h.headers, Payload: m.Data})
	b.epochs = append(b.epochs, h.epoch)
	b.replies = append(b.replies, m.Reply)
}

// produceToPartition serves a produce-one request naming Braid-Partition
// on its own (not batched with the topic's others: it goes to a unit of
// its own choosing).
func (f *fastProduce) produceToPartition(t *actors.Topic, h produceHeaders, m natsio.Msg) {
	rec := api.Record{Key: h.key, Time: h.time, Payload: m.Data}
	for _, hd := range h.headers {
		rec.Headers = append(rec.Headers, api.Header{Name: hd.Key, Value: hd.Value})
	}
	subject, reply, start := m.Subject, m.Reply, time.Now()
	t.ProduceFrom([]api.Record{rec}, 0, h.partition, string(reply), func(res []api.Result) {
		defer f.n.produceInflight.done(1)
		f.one.took(time.Since(start), 1)
		if err := res[0].Err(); err != nil {
			f.fail(&f.one, subject, reply, err)
			return
		}
		if len(reply) > 0 {
			f.publish(reply, nil, appendProduceReply(nil, res[0], t.PartitionOf(res[0].Segment)))
		}
	})
}

func (f *fastProduce) produceBatch(m natsio.Msg) {
	start := time.Now()
	t, h, ok := f.take(&f.batch, api.ProduceBatchPrefix, m, false)
	if !ok {
		return
	}
	recs, err := api.DecodeRecords(m.Data)
	if err != nil {
		f.fail(&f.batch, m.Subject, m.Reply, api.Errorf(api.CodeBadRequest, "%v", err))
		f.n.produceInflight.done(1)
		return
	}
	if err := t.Validate(recs); err != nil {
		f.fail(&f.batch, m.Subject, m.Reply, err)
		f.n.produceInflight.done(1)
		return
	}
	size := int64(len(m.Data))
	f.inflight.Add(size)
	subject, reply := m.Subject, m.Reply
	t.ProduceFrom(recs, h.epoch, h.partition, string(reply), func(res []api.Result) {
		defer f.n.produceInflight.done(1)
		f.inflight.Add(-size)
		f.batch.took(time.Since(start), 1)
		if len(reply) == 0 {
			for i := range res {
				if err := res[i].Err(); err != nil {
					f.fail(&f.batch, subject, reply, err)
				}
			}
			return
		}
		f.n.produceM.refusedRecords(res)
		f.publish(reply, nil, api.AppendResults(make([]byte, 0, 8+len(res)*8), res))
	})
}

// produceMulti serves a produce-multi request (see api.MultiPart): each
// part goes to its topic as a produce-batch request would.
func (f *fastProduce) produceMulti(m natsio.Msg) {
	start := time.Now()
	f.multi.requests.Add(1)
	if len(m.Reply) == 0 {
		f.n.produceM.noReply.Inc()
	}
	tenant, err := multiTenant(string(m.Subject))
	if info := rawHeaderValue(m.Header, authz.HeaderRequestInfo); err == nil && info != nil {
		err = f.n.authorizeTenant(info, tenant, string(m.Subject))
	}
	if err == nil && f.inflight.Load() > produceQueueBytes {
		err = api.Errorf(api.CodeUnavailable, "the server holds %d MiB of produce requests; retry", produceQueueBytes>>20)
	}
	if err == nil {
		err = f.n.member.FenceEntry()
	}
	if err == nil {
		err = f.n.member.Fence()
	}
	if len(m.Reply) > 0 && cluster.IsFenced(err) {
		// Fenced (its lease or role not renewed in time: the metadata
		// store may be electing a leader): nothing is taken, which the
		// no-responders status says, and the Go producer sends the
		// request again a moment later.
		f.n.produceM.refused(err)
		f.multi.failed(api.AsError(err))
		f.publish(m.Reply, noRespondersHeader, nil)
		f.n.produceInflight.done(1)
		return
	}
	if err == nil {
		size := int64(len(m.Data))
		f.inflight.Add(size)
		subject, reply := m.Subject, m.Reply
		err = produceMulti(tenant, m.Data, f.topicByName, f.n, f.n.produceM, func(replies []api.MultiReply) {
			defer f.n.produceInflight.done(1)
			f.inflight.Add(-size)
			f.multi.took(time.Since(start), 1)
			if len(reply) == 0 {
				for _, err := range multiFailures(replies) {
					f.answerErr(&f.multi, subject, reply, err)
				}
				return
			}
			if noneTook(replies) {
				f.multi.failed(errNoneTook)
				f.publish(reply, noRespondersHeader, nil)
				return
			}
			f.publish(reply, nil, encodeMultiReplies(replies))
		})
		if err != nil {
			f.inflight.Add(-size)
		}
	}
	if err != nil {
		f.fail(&f.multi, m.Subject, m.Reply, err)
		f.n.produceInflight.done(1)
	}
}

// topicByName resolves a topic through the cache of produce subjects,
// keyed as its produce-batch subject.
func (f *fastProduce) topicByName(name routing.TopicName) (*actors.Topic, error) {
	return f.topic([]byte(api.TopicSubject(api.ProduceBatchPrefix, name.Tenant, name.Namespace, name.Name)), api.ProduceBatchPrefix)
}

// fail refuses a request (or one record of it) with err: it counts the
// refusal (braid_produce_errors_total) and answers it.
func (f *fastProduce) fail(ep *endpointStats, subject, reply []byte, err error) {
	f.n.produceM.refused(err)
	f.answerErr(ep, subject, reply, err)
}

// answerErr answers a refusal counted already (produceMulti counts those
// of its parts), or counts and logs it when it has no reply subject; the
// endpoint counts it as an error.
func (f *fastProduce) answerErr(ep *endpointStats, subject, reply []byte, err error) {
	e := api.AsError(err)
	ep.failed(e)
	if len(reply) == 0 {
		f.n.produceM.dropped.WithLabelValues(e.Code.Symbol).Inc()
		if ok, suppressed := f.n.produceM.droppedLog.allow(time.Now()); ok {
			f.n.log.Error("produce request without a reply subject refused; nobody can be told", "subject", string(subject),
				"code", e.Code.Symbol, "err", e.Message, "suppressed_since_last", suppressed)
		}
		return
	}
	f.publish(reply, errorHeaderBlock(e), nil)
}

// errorHeaderBlock is the NATS header block of an error reply: the two
// micro-service headers.
func errorHeaderBlock(e *api.Error) []byte {
	code, desc := e.HeaderValues()
	b := make([]byte, 0, 64+len(desc))
	b = append(b, "NATS/1.0\r\nNats-Service-Error-Code: "...)
	b = append(b, code...)
	b = append(b, "\r\nNats-Service-Error: "...)
	b = append(b, sanitizeHeaderValue(desc)...)
	return append(b, "\r\n\r\n"...)
}

// sanitizeHeaderValue keeps a header value on one line.
func sanitizeHeaderValue(s string) string {
	if !bytes.ContainsAny([]byte(s), "\r\n") {
		return s
	}
	return string(bytes.Map(func(r rune) rune {
		if r == '\r' || r == '\n' {
			return ' '
		}
		return r
	}, []byte(s)))
}

// readBatch holds the produce-one requests of one read for one topic, and
// answers them as they land (actors.ProduceSink).
type readBatch struct {
	f       *fastProduce
	t       *actors.Topic
	subject []byte
	start   time.Time
	recs    []wal.Record
	epochs  []uint64
	replies [][]byte
}

func (b *readBatch) Produced(members []int, seg uint64, bucket int, first uint64, err error) {
	f := b.f
	var bytes int64
	for _, i := range members {
		bytes += int64(len(b.recs[i].Payload))
	}
	f.inflight.Add(-bytes)
	f.one.took(time.Since(b.start), len(members))
	defer f.n.produceInflight.done(len(members))
	if err != nil {
		for _, i := range members {
			f.fail(&f.one, b.subject, b.replies[i], err)
		}
		return
	}
	// All the replies of the group go out in one write.
	var body [96]byte
	partition := b.t.PartitionOf(seg)
	kept, _ := f.frames.Get().(*[]byte)
	if kept == nil {
		kept = new([]byte)
	}
	frames := (*kept)[:0]
	for j, i := range members {
		if reply := b.replies[i]; len(reply) > 0 {
			frames = natsio.AppendPublish(frames, reply, nil, nil,
				appendProduceReply(body[:0], api.Result{Segment: seg, Bucket: bucket, Offset: first + uint64(j)}, partition))
		}
	}
	if len(frames) > 0 {
		f.mu.Lock()
		conn := f.conn
		f.mu.Unlock()
		_ = conn.WriteFrames(frames) // copies them
	}
	if cap(frames) <= maxKeptReplyFrames {
		*kept = frames
		f.frames.Put(kept)
	}
}

// seq returns 0, 1, ..., n-1.
func seq(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

// maxKeptReplyFrames bounds the reply buffers kept for reuse.
const maxKeptReplyFrames = 1 << 20

// control answers the micro-service protocol for braid-produce:
// $SRV.<PING|INFO|STATS>[.braid-produce[.<id>]].
func (f *fastProduce) control(m natsio.Msg) {
	if len(m.Reply) == 0 {
		return
	}
	tokens := bytes.Split(m.Subject, []byte("."))
	if len(tokens) < 2 || len(tokens) > 4 || len(tokens) >= 3 && string(tokens[2]) != produceServiceName ||
		len(tokens) == 4 && string(tokens[3]) != f.id {
		return
	}
	var reply []byte
	switch string(tokens[1]) {
	case "PING":
		reply = marshalJSON(f.ping())
	case "INFO":
		reply = marshalJSON(f.info())
	case "STATS":
		reply = marshalJSON(f.stats())
	default:
		return
	}
	f.publish(m.Reply, nil, reply)
}
