package frontend

import (
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/nats-io/nuid"
	"github.com/prometheus/client_golang/prometheus"
)

// service is a NATS micro service: it speaks the protocol of nats.go's
// micro package ($SRV.PING, INFO and STATS, with micro's documents), so
// `nats micro ls/info/stats` show it as any other, but its endpoint stats
// count the errors its handlers answer whenever they answer them. micro
// counts an error only when the handler answers it through
// micro.Request.Error before it returns; Braid's handlers answer most
// requests later, from other goroutines (replier), so none were counted.
//
// A request served here is a *svcRequest: its Error, and recordErr (which
// the handlers call where they answer an error through a replier), count
// the error in its endpoint's stats.
type service struct {
	nc          *nats.Conn
	latency     *prometheus.HistogramVec // braid_request_duration_seconds
	name, id    string
	description string

	mu        sync.Mutex
	started   time.Time
	endpoints []*svcEndpoint
	control   []*nats.Subscription
	stopped   bool
}

// svcEndpoint is one endpoint of a service.
type svcEndpoint struct {
	name, subject, queue string
	stats                endpointStats
	sub                  *nats.Subscription
	// takes, when set, picks the requests the endpoint serves: the others
	// are left alone, neither answered nor counted.
	takes func(subject string) bool
	// msgLimit and bytesLimit are the subscription's pending limits (0:
	// nats.go's defaults).
	msgLimit, bytesLimit int
	// latency observes the time from a request's receipt to its answer.
	latency prometheus.Observer
}

// endpointOpt configures an endpoint of a service.
type endpointOpt func(*svcEndpoint)

// withQueueGroup sets the endpoint's queue group (micro's default "q").
func withQueueGroup(q string) endpointOpt { return func(e *svcEndpoint) { e.queue = q } }

// withPendingLimits sets the pending limits of the endpoint's
// subscription (-1: unlimited).
func withPendingLimits(msgs, bytes int) endpointOpt {
	return func(e *svcEndpoint) { e.msgLimit, e.bytesLimit = msgs, bytes }
}

// takingOnly has the endpoint serve only the requests whose subject take
// reports true for (a catch-all beside other endpoints).
func takingOnly(take func(subject string) bool) endpointOpt {
	return func(e *svcEndpoint) { e.takes = take }
}

// newService starts a service on the node's connection: it answers the
// micro protocol from now on, and serves what endpoint adds.
func (n *Frontend) newService(name, description string) (*service, error) {
	s := &service{nc: n.nc, latency: n.requestLatency, name: name, id: nuid.Next(), description: description, started: time.Now().UTC()}
	for _, subject := range []string{micro.APIPrefix + ".*", micro.APIPrefix + ".*." + name, micro.APIPrefix + ".*." + name + "." + s.id} {
		sub, err := n.nc.Subscribe(subject, s.answerControl)
		if err != nil {
			_ = s.Stop()
			return nil, err
		}
		s.mu.Lock()
		s.control = append(s.control, sub)
		s.mu.Unlock()
	}
	return s, nil
}

// endpoint adds an endpoint that serves subject with h.
func (s *service) endpoint(name, subject string, h micro.Handler, opts ...endpointOpt) error {
	e := &svcEndpoint{name: name, subject: subject, queue: micro.DefaultQueueGroup}
	for _, o := range opts {
		o(e)
	}
	if s.latency != nil {
		e.latency = s.latency.WithLabelValues(s.name, name)
	}
	sub, err := s.nc.QueueSubscribe(subject, e.queue, func(m *nats.Msg) { s.serve(e, h, m) })
	if err != nil {
		return err
	}
	if e.msgLimit != 0 || e.bytesLimit != 0 {
		if err := sub.SetPendingLimits(e.msgLimit, e.bytesLimit); err != nil {
			_ = sub.Unsubscribe()
			return err
		}
	}
	e.sub = sub
	s.mu.Lock()
	s.endpoints = append(s.endpoints, e)
	s.mu.Unlock()
	return nil
}

func (s *service) serve(e *svcEndpoint, h micro.Handler, m *nats.Msg) {
	if e.takes != nil && !e.takes(m.Subject) {
		return
	}
	start := time.Now()
	e.stats.requests.Add(1)
	h.Handle(&svcRequest{msg: m, ep: e, start: start})
	e.stats.nanos.Add(int64(time.Since(start)))
}

// answerControl answers $SRV.<PING|INFO|STATS>[.<name>[.<id>]].
func (s *service) answerControl(m *nats.Msg) {
	if m.Reply == "" {
		return
	}
	verb, _, _ := strings.Cut(strings.TrimPrefix(m.Subject, micro.APIPrefix+"."), ".")
	var v any
	switch verb {
	case "PING":
		v = micro.Ping{ServiceIdentity: s.identity(), Type: micro.PingResponseType}
	case "INFO":
		v = s.Info()
	case "STATS":
		v = s.Stats()
	default:
		return
	}
	_ = m.Respond(marshalJSON(v))
}

func (s *service) identity() micro.ServiceIdentity {
	return micro.ServiceIdentity{Name: s.name, ID: s.id, Version: api.ServiceVersion, Metadata: map[string]string{}}
}

// Info is micro.Service's.
func (s *service) Info() micro.Info {
	s.mu.Lock()
	defer s.mu.Unlock()
	info := micro.Info{ServiceIdentity: s.identity(), Type: micro.InfoResponseType, Description: s.description,
		Endpoints: make([]micro.EndpointInfo, 0, len(s.endpoints))}
	for _, e := range s.endpoints {
		info.Endpoints = append(info.Endpoints, micro.EndpointInfo{Name: e.name, Subject: e.subject, QueueGroup: e.queue})
	}
	return info
}

// Stats is micro.Service's.
func (s *service) Stats() micro.Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := micro.Stats{ServiceIdentity: s.identity(), Type: micro.StatsResponseType, Started: s.started,
		Endpoints: make([]*micro.EndpointStats, 0, len(s.endpoints))}
	for _, e := range s.endpoints {
		st.Endpoints = append(st.Endpoints, e.stats.snapshot(e.name, e.subject, e.queue))
	}
	return st
}

// Reset is micro.Service's.
func (s *service) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.endpoints {
		e.stats.reset()
	}
	s.started = time.Now().UTC()
}

// Stop is micro.Service's: it drains the subscriptions.
func (s *service) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return nil
	}
	var errs []error
	for _, e := range s.endpoints {
		if err := e.sub.Drain(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
			errs = append(errs, err)
		}
	}
	for _, sub := range s.control {
		if err := sub.Drain(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
			errs = append(errs, err)
		}
	}
	s.stopped = true
	return errors.Join(errs...)
}

// Stopped is micro.Service's.
func (s *service) Stopped() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopped
}

// errMicroOptions refuses micro's endpoint options, which cannot be read
// outside its package: Braid adds endpoints with service.endpoint.
var errMicroOptions = errors.New("braid service: micro endpoint options are not supported; use service.endpoint")

// AddEndpoint is micro.Service's: an endpoint on subject name.
func (s *service) AddEndpoint(name string, h micro.Handler, opts ...micro.EndpointOpt) error {
	if len(opts) > 0 {
		return errMicroOptions
	}
	return s.endpoint(name, name, h)
}

// AddGroup is micro.Service's.
func (s *service) AddGroup(prefix string, _ ...micro.GroupOpt) micro.Group {
	return svcGroup{s: s, prefix: prefix}
}

// svcGroup is a micro.Group of a service: endpoints under a prefix.
type svcGroup struct {
	s      *service
	prefix string
}

func (g svcGroup) AddGroup(name string, _ ...micro.GroupOpt) micro.Group {
	return svcGroup{s: g.s, prefix: g.prefix + "." + name}
}

func (g svcGroup) AddEndpoint(name string, h micro.Handler, opts ...micro.EndpointOpt) error {
	if len(opts) > 0 {
		return errMicroOptions
	}
	return g.s.endpoint(name, g.prefix+"."+name, h)
}

// svcRequest is a request to an endpoint of a service.
type svcRequest struct {
	msg      *nats.Msg
	ep       *svcEndpoint
	start    time.Time
	answered atomic.Bool
}

// recordDone observes the request's latency, receipt to answer, once.
func (r *svcRequest) recordDone() {
	if r.ep.latency != nil && r.answered.CompareAndSwap(false, true) {
		r.ep.latency.Observe(time.Since(r.start).Seconds())
	}
}

func (r *svcRequest) Respond(b []byte, opts ...micro.RespondOpt) error {
	m := &nats.Msg{Data: b}
	for _, o := range opts {
		o(m)
	}
	r.recordDone()
	return r.msg.RespondMsg(m)
}

func (r *svcRequest) RespondJSON(v any, opts ...micro.RespondOpt) error {
	b, err := json.Marshal(v)
	if err != nil {
		return micro.ErrMarshalResponse
	}
	return r.Respond(b, opts...)
}

// Error answers the request with an error, counted in its endpoint's
// stats (also when it has no reply subject: it was refused all the same).
func (r *svcRequest) Error(code, description string, data []byte, opts ...micro.RespondOpt) error {
	if code == "" || description == "" {
		return micro.ErrArgRequired
	}
	r.ep.stats.failedWith(description)
	r.recordDone()
	m := &nats.Msg{Data: data, Header: nats.Header{micro.ErrorCodeHeader: {code}, micro.ErrorHeader: {description}}}
	for _, o := range opts {
		o(m)
	}
	return r.msg.RespondMsg(m)
}

func (r *svcRequest) Data() []byte           { return r.msg.Data }
func (r *svcRequest) Headers() micro.Headers { return micro.Headers(r.msg.Header) }
func (r *svcRequest) Subject() string        { return r.msg.Subject }
func (r *svcRequest) Reply() string          { return r.msg.Reply }

func (r *svcRequest) recordErr(e *api.Error) { r.ep.stats.failed(e) }

// errRecorder is a request whose error answers are counted in the stats
// of the endpoint that served it (a request of a service).
type errRecorder interface {
	recordErr(*api.Error)
	recordDone()
}

// recordErr counts err, answered to req (or refused without a reply
// subject), in the stats of the endpoint that served req; it does nothing
// for a request no service of this kind served (a forwarded one, one of a
// nats.go micro service). Handlers call it where they answer an error
// through a replier, which answers on the connection and not through req.
func recordErr(req micro.Request, err error) {
	if r, ok := req.(errRecorder); ok && err != nil {
		r.recordErr(api.AsError(err))
	}
}

// answerErr answers req with err through a replier, which counts it in
// the stats of the endpoint that served req.
func (n *Frontend) answerErr(req micro.Request, err error) {
	newReplier(n.nc, req).err(err)
}

// failedWith counts an error answered with text s.
func (e *endpointStats) failedWith(s string) {
	e.errors.Add(1)
	e.lastErr.Store(&s)
}

func (e *endpointStats) reset() {
	e.requests.Store(0)
	e.errors.Store(0)
	e.nanos.Store(0)
	e.lastErr.Store(nil)
}

// snapshot returns the micro stats of an endpoint.
func (e *endpointStats) snapshot(name, subject, queue string) *micro.EndpointStats {
	es := &micro.EndpointStats{Name: name, Subject: subject, QueueGroup: queue,
		NumRequests: int(e.requests.Load()), NumErrors: int(e.errors.Load()),
		ProcessingTime: time.Duration(e.nanos.Load())}
	if es.NumRequests > 0 {
		es.AverageProcessingTime = es.ProcessingTime / time.Duration(es.NumRequests)
	}
	if last := e.lastErr.Load(); last != nil {
		es.LastError = *last
	}
	return es
}
