package frontend

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/braidmq/braid/actors"
	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/routing"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/prometheus/client_golang/prometheus"
)

// Forwarding: a topic is owned by one node (the owner its layout names),
// and only that node activates it. Every node serves every endpoint; a
// request that names a topic owned elsewhere is republished, unchanged
// and with the client's reply subject, to braid.fwd.<owner>.<subject>,
// where the owner serves it as if it had come directly and answers the
// client itself. NATS hands a queue group's message to a subscriber on
// the publisher's own server when it has one, so the requests of one
// connection pass through one node and reach the owner in order.
//
// A produce-multi request whose parts belong to several owners is split:
// the owner of each group of parts gets a produce-multi of its own parts,
// sent in the order of the requests, and the replies are put back together.

// fwdPrefix is the subject prefix of forwarded requests.
const fwdPrefix = api.DirectPrefix

// fwdTimeout bounds the wait for an owner's reply to a part of a split
// produce-multi.
const fwdTimeout = 30 * time.Second

// forwarder holds the node's forwarding state.
type forwarder struct {
	sub    *nats.Subscription // braid.fwd.<node>.>
	routes []fwdRoute         // what serves each subject pattern here

	inbox   string // replies to split produce-multi parts
	inSub   *nats.Subscription
	mu      sync.Mutex
	lastID  uint64
	pending map[uint64]func(*nats.Msg)

	forwarded, refused atomic.Int64
}

type fwdRoute struct {
	tokens  []string // the pattern's tokens ("*" matches one)
	handler micro.Handler
}

func (r fwdRoute) match(subject []string) bool {
	if len(subject) != len(r.tokens) {
		return false
	}
	for i, t := range r.tokens {
		if t != "*" && t != subject[i] {
			return false
		}
	}
	return true
}

// startForwarding subscribes to the requests other nodes forward here.
func (n *Frontend) startForwarding() error {
	f := &forwarder{pending: map[uint64]func(*nats.Msg){}}
	f.routes = n.forwardRoutes()
	var err error
	if f.sub, err = n.nc.Subscribe(fwdPrefix+"."+n.nodeID+".>", n.onForwarded); err != nil {
		return fmt.Errorf("subscribing to forwarded requests: %w", err)
	}
	// Forwarded produce requests may be many and large, as direct ones.
	_ = f.sub.SetPendingLimits(-1, produceQueueBytes)
	f.inbox = n.nc.NewInbox()
	if f.inSub, err = n.nc.Subscribe(f.inbox+".*", f.onReply); err != nil {
		return fmt.Errorf("subscribing to forwarded replies: %w", err)
	}
	n.fwd = f
	n.registry.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "braid_forwarded_requests_total",
			Help: "Requests this node forwarded to the node that owns their topic (a split produce-multi counts one per owner)."},
			func() float64 { return float64(f.forwarded.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "braid_forward_refused_total",
			Help: "Requests for a topic owned elsewhere answered UNAVAILABLE here: the owner is down, or the request had been forwarded already."},
			func() float64 { return float64(f.refused.Load()) }))
	return nil
}

// forwardRoutes lists what serves each topic-addressed subject here, for
// the requests forwarded by other nodes. Produce requests are served by the
// micro handlers even where the lean front-end takes the direct ones.
func (n *Frontend) forwardRoutes() []fwdRoute {
	var routes []fwdRoute
	add := func(pattern string, h micro.Handler) {
		routes = append(routes, fwdRoute{tokens: strings.Split(pattern, "."), handler: h})
	}
	add(api.ProducePrefix+".*.*.*", n.produceHandler(api.ProducePrefix, n.produceOne))
	add(api.ProduceBatchPrefix+".*.*.*", n.produceHandler(api.ProduceBatchPrefix, n.produceBatch))
	add(api.ProduceMultiPrefix+".*", micro.HandlerFunc(n.produceMultiHandler))
	for _, verb := range []string{api.ConsumeJoin, api.ConsumeFetch, api.ConsumeAck, api.ConsumeLeave} {
		add(api.ConsumePrefix+"."+verb+".*.*.*", n.consumeHandler(verb))
	}
	for _, verb := range []string{api.QueueJoin, api.QueueFetch, api.QueueAck, api.QueueNack, api.QueueLeave} {
		add(api.QueuePrefix+"."+verb+".*.*.*", n.queueHandler(verb))
	}
	add(api.ReadPrefix+"."+api.ReadFetch+".*.*.*", n.topicHandler(api.ReadPrefix+"."+api.ReadFetch, n.readFetch))
	add(api.ReadPrefix+"."+api.ReadOffsets+".*.*.*", n.topicHandler(api.ReadPrefix+"."+api.ReadOffsets, n.readOffsets))
	ops := n.adminOps()
	for _, op := range topicAdminOps {
		add(api.AdminSubject(op), n.adminHandler(op, ops[op]))
	}
	return routes
}

// topicAdminOps are the admin operations on one topic, which its owner
// serves.
var topicAdminOps = []string{api.AdminTopicDescribe, api.AdminTopicSplit, api.AdminTopicMerge, api.AdminTopicRebucket,
	api.AdminTopicDelete, api.AdminTopicStats, api.AdminTopicPolicies, api.AdminTopicCompact, api.AdminTopicCompaction,
	api.AdminTopicPartitions, api.AdminTopicMigrate,
	api.AdminSubscriptionList, api.AdminSubscriptionDelete, api.AdminSubscriptionSeek}

// fwdRequest is a forwarded request, served as a micro request.
type fwdRequest struct {
	nc      *nats.Conn
	msg     *nats.Msg
	subject string // the original subject
}

func (r *fwdRequest) Respond(b []byte, opts ...micro.RespondOpt) error {
	m := &nats.Msg{Subject: r.msg.Reply, Data: b, Header: nats.Header{}}
	for _, o := range opts {
		o(m)
	}
	return r.nc.PublishMsg(m)
}

func (r *fwdRequest) RespondJSON(v any, opts ...micro.RespondOpt) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return r.Respond(b, opts...)
}

func (r *fwdRequest) Error(code, description string, data []byte, opts ...micro.RespondOpt) error {
	m := &nats.Msg{Subject: r.msg.Reply, Data: data, Header: nats.Header{}}
	m.Header.Set(micro.ErrorCodeHeader, code)
	m.Header.Set(micro.ErrorHeader, description)
	for _, o := range opts {
		o(m)
	}
	return r.nc.PublishMsg(m)
}

func (r *fwdRequest) Data() []byte           { return r.msg.Data }
func (r *fwdRequest) Headers() micro.Headers { return micro.Headers(r.msg.Header) }
func (r *fwdRequest) Subject() string        { return r.subject }
func (r *fwdRequest) Reply() string          { return r.msg.Reply }

// isForwarded reports whether req came from another node: it is not
// forwarded again.
func isForwarded(req micro.Request) bool {
	_, ok := req.(*fwdRequest)
	return ok
}

// onForwarded serves a request another node forwarded here.
func (n *Frontend) onForwarded(m *nats.Msg) {
	subject := strings.TrimPrefix(m.Subject, fwdPrefix+"."+n.nodeID+".")
	tokens := strings.Split(subject, ".")
	for _, r := range n.fwd.routes {
		if r.match(tokens) {
			r.handler.Handle(&fwdRequest{nc: n.nc, msg: m, subject: subject})
			return
		}
	}
	newReplier(n.nc, &fwdRequest{nc: n.nc, msg: m, subject: subject}).err(
		api.Errorf(api.CodeNotFound, "forwarded request on %q: no such endpoint", subject))
}

// notOwner returns the owner named by err when it is a NotOwnerError.
func notOwner(err error) (string, bool) {
	if err == nil {
		return "", false // without errors.As, whose target escapes
	}
	var e *actors.NotOwnerError
	if errors.As(err, &e) {
		return e.Owner, true
	}
	return "", false
}

// forward republishes a request to the node that owns its topic; the
// owner answers the client. It fails (for the caller to answer) when the
// owner is not a live member or this request was forwarded already.
func (n *Frontend) forward(owner, subject, reply string, hdr nats.Header, data []byte, forwarded bool) error {
	node, err := n.forwardTarget(owner, forwarded)
	if err != nil {
		return err
	}
	err = n.nc.PublishMsg(&nats.Msg{Subject: fwdPrefix + "." + node + "." + subject, Reply: reply, Header: hdr, Data: data})
	if err != nil {
		return api.Errorf(api.CodeUnavailable, "forwarding to node %s: %v", node, err)
	}
	return nil
}

// forwardTarget returns the node a request for a topic owned by owner is
// forwarded to (cluster.Member.Target), or why it cannot be, and counts
// it.
func (n *Frontend) forwardTarget(owner string, forwarded bool) (string, error) {
	node, err := n.member.Target(owner, forwarded)
	if err != nil {
		n.fwd.refused.Add(1)
		return "", err
	}
	n.fwd.forwarded.Add(1)
	return node, nil
}

// forwardReq forwards a micro request whose topic another node owns;
// false when it could not be (the caller answers err).
func (n *Frontend) forwardReq(req micro.Request, owner string) error {
	return n.forward(owner, req.Subject(), req.Reply(), nats.Header(req.Headers()), req.Data(), isForwarded(req))
}

// requestOwner sends a produce-multi of some parts to their owner and calls cb
// with its reply. The publish happens before request returns, so requests
// reach each owner in the order they were made.
func (n *Frontend) requestOwner(owner, tenant string, body []byte, cb func(*nats.Msg, error)) {
	node, err := n.forwardTarget(owner, false)
	if err != nil {
		cb(nil, notSentError{err})
		return
	}
	f := n.fwd
	f.mu.Lock()
	f.lastID++
	id := f.lastID
	var timer *time.Timer
	f.pending[id] = func(m *nats.Msg) {
		timer.Stop()
		cb(m, nil)
	}
	timer = time.AfterFunc(fwdTimeout, func() {
		f.mu.Lock()
		_, waiting := f.pending[id]
		delete(f.pending, id)
		f.mu.Unlock()
		if waiting {
			cb(nil, api.Errorf(api.CodeUnavailable, "node %s did not answer in %s", node, fwdTimeout))
		}
	})
	f.mu.Unlock()
	err = n.nc.PublishMsg(&nats.Msg{Subject: fwdPrefix + "." + node + "." + api.ProduceMultiPrefix + "." + tenant,
		Reply: f.inbox + "." + strconv.FormatUint(id, 36), Data: body})
	if err != nil {
		f.mu.Lock()
		_, waiting := f.pending[id]
		delete(f.pending, id)
		f.mu.Unlock()
		if waiting {
			timer.Stop()
			cb(nil, api.Errorf(api.CodeUnavailable, "forwarding to node %s: %v", node, err))
		}
	}
}

// notSentError is a forward refused before it was sent (its owner is
// down, its topic not moved yet): nothing was taken.
type notSentError struct{ err error }

func (e notSentError) Error() string { return e.err.Error() }
func (e notSentError) Unwrap() error { return e.err }

func (f *forwarder) onReply(m *nats.Msg) {
	token := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
	id, err := strconv.ParseUint(token, 36, 64)
	if err != nil {
		return
	}
	f.mu.Lock()
	cb := f.pending[id]
	delete(f.pending, id)
	f.mu.Unlock()
	if cb != nil {
		cb(m)
	}
}

func (f *forwarder) close() {
	if f == nil {
		return
	}
	_ = f.sub.Unsubscribe()
	_ = f.inSub.Unsubscribe()
}

// adminTopicHandler serves an admin operation on one topic: here when
// this node owns it, else at its owner.
func (n *Frontend) adminTopicHandler(name string, op adminOp) micro.HandlerFunc {
	local := n.adminHandler(name, op)
	return func(req micro.Request) {
		if _, err := n.authorizeAdmin(req, name); err != nil {
			newReplier(n.nc, req).err(err) // refused here, not forwarded
			return
		}
		var named struct {
			Topic string `json:"topic"`
		}
		if json.Unmarshal(req.Data(), &named) == nil && named.Topic != "" && !isForwarded(req) {
			if name, err := routing.ParseTopic(named.Topic); err == nil {
				if owner, remote := n.member.RemoteOwner(name); remote {
					if err := n.forwardReq(req, owner); err != nil {
						newReplier(n.nc, req).err(err)
					}
					return
				}
			}
		}
		local.Handle(req) // errors (a bad body, no such topic) are answered there
	}
}
