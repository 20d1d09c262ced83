package client

import (
	"encoding/json"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/routing"
	"github.com/braidmq/braid/topology"
)

// fakeTopic is an in-process stand-in for the Braid server, on an embedded
// NATS server, for one topic: topic://t/ns/x. It implements just enough of
// the wire contract to test the client's side of it, and lets a test do
// what a real server only does in a race: route appends by a stale layout
// (so they hit a sealed segment), drop replies, or forget consumers as a
// restart would.
const fakeURI = "topic://t/ns/x"

type fakeTopic struct {
	t  testing.TB
	nc *nats.Conn // the server side's connection

	mu sync.Mutex
	// Guarded by mu:
	layout topology.Layout // the truth: sealed segments reject appends
	// stale is the layout produce routes by while staleBatches > 0: it
	// lags the truth, as a node's routing cache can.
	stale        topology.Layout
	staleBatches int
	logs         map[unit][]api.Message
	rr           int
	sealedCount  int    // appends rejected with SEGMENT_SEALED
	dropReplies  bool   // answer no produce batch
	dropBatch    int    // answer every produce batch but the one with this number (1 = the first), and the rest of its request
	requests     int    // produce-multi requests received
	push         bool   // publish layout changes
	owner        string // the node the layout names as owner ("": none)
	produceSub   *nats.Subscription
	batches      int // produce batches received
	// sealing lists segments sealed by a change in progress that the
	// layout does not show yet (and may never: a rollback clears it).
	sealing map[uint64]bool
	// produceDelay answers produce batches this late (in order);
	// unanswered and maxUnanswered count the batches waiting.
	produceDelay  time.Duration
	unanswered    int
	maxUnanswered int

	// Consumer side: one subscription, any number of consumers, every unit
	// to every consumer (enough for one consumer per test).
	consumers  map[string]bool
	sent       map[unit]uint64 // next offset to hand out
	ackedUpTo  map[unit]uint64 // one past the highest acked offset
	ackReqs    int
	joins      int
	leaves     int
	fetchDelay time.Duration
	ackDelay   time.Duration // answer (and apply) acks this late
	// dropFetches drops that many fetch replies that carry messages;
	// resyncs counts the fetches that asked to resync.
	dropFetches int
	resyncs     int
	ackArrived  int // ack requests received, applied or not
}

func startNATS(t testing.TB) *server.Server {
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server not ready")
	}
	t.Cleanup(s.Shutdown)
	return s
}

func connect(t testing.TB, url string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// newFake starts a NATS server and the fake topic with a layout of segments
// segments and budget buckets; it returns the fake and a client connection.
func newFake(t testing.TB, segments, budget int) (*fakeTopic, *nats.Conn) {
	t.Helper()
	s := startNATS(t)
	l, err := topology.New(segments, budget)
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeTopic{
		t: t, nc: connect(t, s.ClientURL()), layout: l, stale: l, push: true,
		logs: map[unit][]api.Message{}, consumers: map[string]bool{},
		sent: map[unit]uint64{}, ackedUpTo: map[unit]uint64{},
	}
	sub := func(subject string, h nats.MsgHandler) *nats.Subscription {
		s, err := f.nc.Subscribe(subject, h)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	sub(api.AdminSubject(api.AdminTopicDescribe), f.describe)
	f.produceSub = sub(api.ProduceMultiPrefix+".t", f.produceMulti)
	for _, verb := range []string{api.ConsumeJoin, api.ConsumeFetch, api.ConsumeAck, api.ConsumeLeave} {
		sub(api.ConsumeSubject(verb, "t", "ns", "x"), f.consume(verb))
	}
	if err := f.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return f, connect(t, s.ClientURL())
}

func replyErr(m *nats.Msg, e *api.Error) {
	code, desc := e.HeaderValues()
	r := nats.NewMsg(m.Reply)
	r.Header.Set(headerErrorCode, code)
	r.Header.Set(headerError, desc)
	_ = m.RespondMsg(r)
}

func replyJSON(m *nats.Msg, v any) {
	b, _ := json.Marshal(v)
	_ = m.Respond(b)
}

func (f *fakeTopic) description() api.TopicDescription {
	d := description(f.t, f.layout)
	d.Topic = fakeURI
	for i := range d.Segments {
		d.Segments[i].Owner = f.owner
	}
	return d
}

func (f *fakeTopic) describe(m *nats.Msg) {
	var req api.TopicRequest
	if err := json.Unmarshal(m.Data, &req); err != nil {
		replyErr(m, api.Errorf(api.CodeBadRequest, "%v", err))
		return
	}
	if req.Topic != fakeURI {
		replyErr(m, api.Errorf(api.CodeTopicNotFound, "%s", req.Topic))
		return
	}
	f.mu.Lock()
	d := f.description()
	f.mu.Unlock()
	replyJSON(m, d)
}

// change applies a layout operation; with lag > 0 the produce endpoint
// keeps routing by the old layout for that many batches.
func (f *fakeTopic) change(op func(topology.Layout) (topology.Layout, error), lag int) {
	f.mu.Lock()
	next, err := op(f.layout)
	if err != nil {
		f.mu.Unlock()
		f.t.Fatal(err)
	}
	f.stale, f.staleBatches = f.layout, lag
	f.layout = next
	push := f.push
	d := f.description()
	f.mu.Unlock()
	if push {
		b, _ := json.Marshal(d)
		_ = f.nc.Publish(api.TopicSubject(api.LayoutPrefix, "t", "ns", "x"), b)
	}
}

// produceMulti serves the producer's produce-multi requests: each part
// for the fake's topic is appended as the server would; a part for any
// other topic is TOPIC_NOT_FOUND. dropReplies, or a part numbered
// dropBatch, withholds the whole reply.
func (f *fakeTopic) produceMulti(m *nats.Msg) {
	parts, err := api.DecodeMulti(m.Data)
	if err != nil {
		replyErr(m, api.Errorf(api.CodeBadRequest, "%v", err))
		return
	}
	f.mu.Lock()
	f.requests++
	replies := make([]api.MultiReply, len(parts))
	drop := f.dropReplies
	for i, part := range parts {
		if part.Namespace != "ns" || part.Topic != "x" {
			replies[i].Err = api.Errorf(api.CodeTopicNotFound, "%s/%s", part.Namespace, part.Topic)
			continue
		}
		recs, err := api.DecodeRecords(part.Records)
		if err != nil {
			replies[i].Err = api.Errorf(api.CodeBadRequest, "%v", err)
			continue
		}
		f.batches++
		if f.batches == f.dropBatch {
			drop = true
		}
		if !drop {
			replies[i].Results = f.appendLocked(recs, part.Epoch)
		}
	}
	if drop {
		f.mu.Unlock()
		return
	}
	delay := f.produceDelay
	if delay > 0 {
		f.unanswered += len(parts)
		f.maxUnanswered = max(f.maxUnanswered, f.unanswered)
	}
	f.mu.Unlock()
	reply := api.AppendMultiReplies(nil, replies)
	if delay == 0 {
		_ = m.Respond(reply)
		return
	}
	time.AfterFunc(delay, func() {
		f.mu.Lock()
		f.unanswered -= len(parts)
		f.mu.Unlock()
		_ = m.Respond(reply)
	})
}

// appendLocked appends a batch routed by layout epoch routed (0: none),
// as the server does; the caller holds mu.
func (f *fakeTopic) appendLocked(recs []api.Record, routed uint64) []api.Result {
	by := f.layout
	if f.staleBatches > 0 {
		by = f.stale
		f.staleBatches--
	}
	// As the server does: a keyed record routed by an older layout than
	// its segment is refused (api.HeaderEpoch).
	results := make([]api.Result, len(recs))
	for i, r := range recs {
		u := f.route(by, r)
		s, _ := f.layout.Segment(topology.SegmentID(u.segment))
		var e *api.Error
		switch {
		case s.State != topology.StateActive:
			e = api.SealedError(u.segment, f.layout.Epoch)
		case f.sealing[u.segment]:
			e = api.SealedError(u.segment, f.layout.Epoch+1)
		case len(r.Key) > 0 && routed != 0 && s.CreatedEpoch > routed:
			e = api.StaleRouteError(routed, f.layout.Epoch)
		}
		if e != nil {
			f.sealedCount++
			results[i] = api.Result{Code: e.Code.Number, Epoch: e.Epoch, Message: e.Message}
			continue
		}
		off := uint64(len(f.logs[u]))
		f.logs[u] = append(f.logs[u], api.Message{
			Segment: u.segment, Bucket: u.bucket, Offset: off, Time: time.Now().UnixMilli(),
			Key: slices.Clone(r.Key), Payload: slices.Clone(r.Payload), Headers: r.Headers,
		})
		results[i] = api.Result{Segment: u.segment, Bucket: u.bucket, Offset: off}
	}
	return results
}

func (f *fakeTopic) route(l topology.Layout, r api.Record) unit {
	if len(r.Key) == 0 {
		var units []unit
		for _, s := range l.Active() {
			for b := range s.Buckets {
				units = append(units, unit{uint64(s.ID), b})
			}
		}
		f.rr++
		return units[f.rr%len(units)]
	}
	h := routing.KeyHash(r.Key)
	s, _ := l.Owner(h)
	return unit{uint64(s.ID), routing.Bucket(h, s.Buckets)}
}

// keyOrder returns, per key, the payloads in the order an ordered reader
// sees them: segments by id (parents before children), then offsets.
func (f *fakeTopic) keyOrder() map[string][]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	units := make([]unit, 0, len(f.logs))
	for u := range f.logs {
		units = append(units, u)
	}
	slices.SortFunc(units, compareUnits)
	out := map[string][]string{}
	for _, u := range units {
		for _, m := range f.logs[u] {
			out[string(m.Key)] = append(out[string(m.Key)], string(m.Payload))
		}
	}
	return out
}

func (f *fakeTopic) consume(verb string) nats.MsgHandler {
	return func(m *nats.Msg) {
		f.mu.Lock()
		defer f.mu.Unlock()
		switch verb {
		case api.ConsumeJoin:
			var req api.JoinRequest
			_ = json.Unmarshal(m.Data, &req)
			f.consumers[req.Consumer] = true
			f.joins++
			replyJSON(m, api.JoinReply{Subscription: req.Subscription, Consumer: req.Consumer, Consumers: len(f.consumers)})
		case api.ConsumeFetch:
			var req api.FetchRequest
			_ = json.Unmarshal(m.Data, &req)
			if !f.consumers[req.Consumer] {
				replyErr(m, api.Errorf(api.CodeConsumerUnknown, "consumer %s", req.Consumer))
				return
			}
			units := make([]unit, 0, len(f.logs))
			for u := range f.logs {
				units = append(units, u)
			}
			slices.SortFunc(units, compareUnits)
			if req.Resync { // as the server does: deliver again from received
				f.resyncs++
				received := map[unit]uint64{}
				for _, p := range req.Received {
					received[unit{p.Segment, p.Bucket}] = p.Offset
				}
				for _, u := range units {
					if from := max(received[u], f.ackedUpTo[u]); from < f.sent[u] {
						f.sent[u] = from
					}
				}
			}
			var out []api.Message
			for _, u := range units {
				for f.sent[u] < uint64(len(f.logs[u])) && len(out) < req.Max {
					msg := &f.logs[u][f.sent[u]]
					msg.Deliveries++
					out = append(out, *msg)
					f.sent[u]++
				}
			}
			r := nats.NewMsg(m.Reply)
			r.Header.Set(api.FetchReplyHeaderAssigned, strconv.Itoa(len(units)))
			r.Data = api.AppendMessages(nil, out)
			wait := f.fetchDelay
			if len(out) == 0 {
				wait = max(wait, 5*time.Millisecond) // a short long-poll
			}
			if len(out) > 0 && f.dropFetches > 0 {
				f.dropFetches-- // delivered, as far as the server knows
				return
			}
			time.AfterFunc(wait, func() { _ = m.RespondMsg(r) })
		case api.ConsumeAck:
			var req api.AckRequest
			_ = json.Unmarshal(m.Data, &req)
			if len(req.Acks) == 0 {
				replyErr(m, api.Errorf(api.CodeInvalidArgument, "no acks"))
				return
			}
			if !f.consumers[req.Consumer] {
				replyErr(m, api.Errorf(api.CodeConsumerUnknown, "consumer %s", req.Consumer))
				return
			}
			for _, p := range req.Acks {
				if u := (unit{p.Segment, p.Bucket}); p.Offset >= f.sent[u] {
					replyErr(m, api.Errorf(api.CodeInvalidArgument, "ack of %v offset %d beyond delivered %d", u, p.Offset, f.sent[u]))
					return
				}
			}
			f.ackArrived++
			apply := func() { // with f.mu held
				f.ackReqs++
				for _, p := range req.Acks {
					u := unit{p.Segment, p.Bucket}
					f.ackedUpTo[u] = max(f.ackedUpTo[u], p.Offset+1)
				}
				replyJSON(m, api.OKReply{OK: true})
			}
			if f.ackDelay == 0 {
				apply()
				return
			}
			time.AfterFunc(f.ackDelay, func() {
				f.mu.Lock()
				defer f.mu.Unlock()
				apply()
			})
		case api.ConsumeLeave:
			var req api.LeaveRequest
			_ = json.Unmarshal(m.Data, &req)
			delete(f.consumers, req.Consumer)
			f.leaves++
			replyJSON(m, api.OKReply{OK: true})
		}
	}
}

// restart forgets every consumer and rewinds delivery to the acked
// positions, as a server restart does.
func (f *fakeTopic) restart() {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.consumers)
	for u := range f.sent {
		f.sent[u] = f.ackedUpTo[u]
	}
}

// checkAllAcked fails the test unless every unit is acked to its end;
// prefix starts the message.
func (f *fakeTopic) checkAllAcked(t *testing.T, prefix string) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for u, log := range f.logs {
		if f.ackedUpTo[u] != uint64(len(log)) {
			t.Errorf("%sunit %v acked up to %d of %d", prefix, u, f.ackedUpTo[u], len(log))
		}
	}
}

// append writes n records of keys k0..k(keys-1) straight into the logs.
func (f *fakeTopic) appendDirect(n, keys int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range n {
		r := api.Record{Key: []byte("k" + strconv.Itoa(i%keys)), Payload: []byte(strconv.Itoa(i))}
		u := f.route(f.layout, r)
		f.logs[u] = append(f.logs[u], api.Message{Segment: u.segment, Bucket: u.bucket,
			Offset: uint64(len(f.logs[u])), Key: r.Key, Payload: r.Payload})
	}
}
