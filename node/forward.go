package node

import (
	"context"
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
	"github.com/braidmq/braid/meta"
	"github.com/braidmq/braid/placement"
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
	nsSub   *nats.Subscription // namespace policy changes
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

// owns says whether this node owns a topic whose layout names owner: its
// own id, or none (a layout written before nodes had ids) on the node that
// serves such topics.
func (n *Node) owns(owner string) bool {
	return owner == n.nodeID || (owner == "" && n.serving.Load())
}

// ownerNode resolves a layout's owner to a node id ("": the serving node).
func (n *Node) ownerNode(owner string) string {
	if owner == "" {
		return n.servingNode
	}
	return owner
}

// startForwarding subscribes to the requests other nodes forward here.
func (n *Node) startForwarding() error {
	f := &forwarder{pending: map[uint64]func(*nats.Msg){}}
	f.routes = n.forwardRoutes()
	var err error
	if f.sub, err = n.nc.Subscribe(fwdPrefix+"."+n.nodeID+".>", n.onForwarded); err != nil {
		return fmt.Errorf("subscribing to forwarded requests: %w", err)
	}
	// Forwarded produce requests may be many and large, as direct ones.
	_ = f.sub.SetPendingLimits(-1, produceQueueBytes)
	// A namespace's policies changed on another node: apply them to the
	// namespace's active topics here.
	if f.nsSub, err = n.nc.Subscribe(nsPoliciesSubject, n.onNamespacePolicies); err != nil {
		return fmt.Errorf("subscribing to namespace policy changes: %w", err)
	}
	f.inbox = n.nc.NewInbox()
	if f.inSub, err = n.nc.Subscribe(f.inbox+".*", f.onReply); err != nil {
		return fmt.Errorf("subscribing to forwarded replies: %w", err)
	}
	n.fwd = f
	n.takeoverTotal = prometheus.NewCounter(prometheus.CounterOpts{Name: "braid_topic_takeovers_total",
		Help: "Topics whose owner's lease ran out that this node moved: their lost node's active segments sealed in metadata, successors placed on a live node."})
	n.takeoverSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "braid_topic_takeover_seconds",
		Help: "Time to move one topic off a lost node (read its record, compare-and-swap the new layout).", Buckets: prometheus.ExponentialBuckets(0.001, 4, 8)})
	n.groupMovesTotal = prometheus.NewCounter(prometheus.CounterOpts{Name: "braid_consumer_group_moves_total",
		Help: "Consumer groups whose state this node took over from their former home (their topic moved here)."})
	n.rebalanced = prometheus.NewCounter(prometheus.CounterOpts{Name: "braid_rebalanced_topics_total",
		Help: "Topics this node, as the entry node, had moved from the most to the least loaded node."})
	n.registry.MustRegister(n.takeoverTotal, n.takeoverSeconds, n.groupMovesTotal, n.rebalanced,
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
func (n *Node) forwardRoutes() []fwdRoute {
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
func (n *Node) onForwarded(m *nats.Msg) {
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
	var e *actors.NotOwnerError
	if errors.As(err, &e) {
		return e.Owner, true
	}
	return "", false
}

// forward republishes a request to the node that owns its topic; the
// owner answers the client. It fails (for the caller to answer) when the
// owner is not a live member or this request was forwarded already.
func (n *Node) forward(owner, subject, reply string, hdr nats.Header, data []byte, forwarded bool) error {
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
// forwarded to, or why it cannot be.
func (n *Node) forwardTarget(owner string, forwarded bool) (string, error) {
	node := n.ownerNode(owner)
	switch {
	case forwarded || node == "" || node == n.nodeID:
		// A forward that meets a node that does not own the topic (the
		// owner changed since) is not sent on: no loops.
		n.fwd.refused.Add(1)
		return "", api.Errorf(api.CodeUnavailable, "the topic's owner changed while the request was forwarded; retry")
	case !n.members.isLive(node) || n.members.expired(node):
		// Not forwarded into the void: a request to a node that is gone
		// goes unanswered, and its client cannot tell whether it was
		// taken; refused, it is resent once the topic has moved.
		n.fwd.refused.Add(1)
		return "", api.Errorf(api.CodeUnavailable, "the topic is owned by node %s, which is down (its lease lapsed), and its key ranges could not be moved to a live node yet; retry", node)
	}
	n.fwd.forwarded.Add(1)
	return node, nil
}

// forwardReq forwards a micro request whose topic another node owns;
// false when it could not be (the caller answers err).
func (n *Node) forwardReq(req micro.Request, owner string) error {
	return n.forward(owner, req.Subject(), req.Reply(), nats.Header(req.Headers()), req.Data(), isForwarded(req))
}

// requestOwner sends a produce-multi of some parts to their owner and calls cb
// with its reply. The publish happens before request returns, so requests
// reach each owner in the order they were made.
func (n *Node) requestOwner(owner, tenant string, body []byte, cb func(*nats.Msg, error)) {
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
	_ = f.nsSub.Unsubscribe()
}

// nsPoliciesSubject carries the name of a namespace whose policies a node
// changed, to the other nodes.
const nsPoliciesSubject = "braid.cluster.namespace-policies"

func (n *Node) onNamespacePolicies(m *nats.Msg) {
	if string(m.Header.Get("Braid-Node")) == n.nodeID {
		return // applied here already
	}
	ns, err := routing.ParseNamespace(string(m.Data))
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	if err := n.topics.ReapplyNamespace(ctx, ns); err != nil {
		n.log.Error("applying namespace policies changed on another node", "namespace", ns.String(), "err", err)
	}
}

// announceNamespacePolicies tells the other nodes that ns's policies changed.
func (n *Node) announceNamespacePolicies(ns string) {
	_ = n.nc.PublishMsg(&nats.Msg{Subject: nsPoliciesSubject, Header: nats.Header{"Braid-Node": []string{n.nodeID}}, Data: []byte(ns)})
}

// adminTopicHandler serves an admin operation on one topic: here when
// this node owns it, else at its owner.
func (n *Node) adminTopicHandler(name string, op adminOp) micro.HandlerFunc {
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
				if owner, remote := n.remoteOwner(name); remote {
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

// placementViewAge is how old the view of the nodes' leases placement
// uses may be.
const placementViewAge = 250 * time.Millisecond

// placeTopic chooses the node a new topic's segments go to
// (placement.Choose over the live nodes' leases).
func (n *Node) placeTopic(uri string) string { return n.place(uri, "") }

// place is placeTopic for key, passing over node avoid among equals.
func (n *Node) place(key, avoid string) string {
	return placement.Choose(placementNodes(n.members.liveNodes(placementViewAge)), key, avoid, n.nodeID, n.draining.Load())
}

// placementNodes is what placement knows of the nodes of recs.
func placementNodes(recs []meta.NodeRecord) []placement.Node {
	out := make([]placement.Node, len(recs))
	for i, r := range recs {
		out[i] = placement.Node{ID: r.ID, BytesPerSec: r.BytesPerSec, Segments: r.Segments, Draining: r.Draining}
	}
	return out
}

// ownerCacheTTL is how long a node remembers that another node owns a
// topic (so that requests it forwards do not each read the topic's
// record); owners change only when a topic is deleted and made again.
const ownerCacheTTL = 10 * time.Second

// ownerCacheMax bounds the remembered owners (the cache is emptied past it).
const ownerCacheMax = 100_000

type ownerEntry struct {
	owner string
	epoch uint64
	until time.Time
}

// topicByName returns the active topic name, activating it, or a
// NotOwnerError when another node owns it (remembered for a while). A
// topic whose owner is gone is moved to a live node first (takeOver).
func (n *Node) topicByName(name routing.TopicName) (*actors.Topic, error) {
	uri := name.String()
	if e, ok := n.cachedOwner(uri); ok {
		if !n.ownerGone(e.owner) {
			return nil, &actors.NotOwnerError{Topic: uri, Owner: e.owner, Epoch: e.epoch}
		}
		n.forgetOwner(uri)
	}
	t, err := n.topics.TopicByName(name)
	var other *actors.NotOwnerError
	if errors.As(err, &other) {
		if n.ownerGone(other.Owner) && n.takeOver(name, n.ownerNode(other.Owner)) {
			t, err = n.topics.TopicByName(name)
		}
		if errors.As(err, &other) {
			n.rememberOwner(uri, other.Owner, other.Epoch)
		}
	}
	return t, err
}

// forgetOwner forgets which node owns topic uri.
func (n *Node) forgetOwner(uri string) {
	n.ownersMu.Lock()
	delete(n.owners, uri)
	n.ownersMu.Unlock()
}

// cachedOwner returns the node that owns topic uri (and the layout epoch
// it learned that at) if this node remembers that another one does.
func (n *Node) cachedOwner(uri string) (ownerEntry, bool) {
	n.ownersMu.Lock()
	defer n.ownersMu.Unlock()
	e, ok := n.owners[uri]
	if !ok || !time.Now().Before(e.until) {
		return ownerEntry{}, false
	}
	return e, true
}

// rememberOwner notes that owner, another node, owns topic uri (as of
// layout epoch).
func (n *Node) rememberOwner(uri, owner string, epoch uint64) {
	n.ownersMu.Lock()
	defer n.ownersMu.Unlock()
	if len(n.owners) >= ownerCacheMax || n.owners == nil {
		n.owners = map[string]ownerEntry{}
	}
	n.owners[uri] = ownerEntry{owner: owner, epoch: epoch, until: time.Now().Add(ownerCacheTTL)}
}

// remoteOwner returns the node that owns topic name when it is another
// one: without a metadata read when the topic is active here or its owner
// is remembered. A topic whose owner is gone is moved first.
func (n *Node) remoteOwner(name routing.TopicName) (string, bool) {
	name.Scheme = routing.SchemeScalable // a topic is known by its path whatever the scheme (actors.Manager.Topic)
	uri := name.String()
	if _, active := n.topics.Active(uri); active {
		return "", false
	}
	if e, ok := n.cachedOwner(uri); ok && !n.ownerGone(e.owner) {
		return e.owner, true
	}
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	rec, _, err := n.meta.Topic(ctx, name)
	owner := actors.LayoutOwner(rec.Layout)
	if err == nil && !n.owns(owner) && n.ownerGone(owner) && n.takeOver(name, n.ownerNode(owner)) {
		rec, _, err = n.meta.Topic(ctx, name)
		owner = actors.LayoutOwner(rec.Layout)
	}
	if err == nil && !n.owns(owner) {
		n.rememberOwner(uri, owner, rec.Layout.Epoch)
		return owner, true
	}
	return "", false // here, or not found: the operation answers
}
