package frontend

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/braidmq/braid/cluster"
	"github.com/nats-io/nats.go"

	"github.com/braidmq/braid/actors"
	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/authz"
	"github.com/nats-io/nats.go/micro"
	"github.com/prometheus/client_golang/prometheus"
)

// produceMetrics are the series of the produce endpoints.
type produceMetrics struct {
	// noReply counts produce requests without a reply subject (`nats pub`):
	// appended like any other, answered to no one.
	noReply prometheus.Counter
	// dropped counts such requests that were refused: with nobody to tell,
	// they are counted by code and logged.
	dropped *prometheus.CounterVec
	// droppedLog rate-limits the log lines of dropped requests.
	droppedLog logLimiter
	// errors counts the refusals of the produce endpoints by code: a
	// request refused whole once, and each refused record of a batch (or
	// of a produce-multi part) answered record by record once. The node
	// that decides a refusal counts it (not one that forwarded the request).
	errors *prometheus.CounterVec
}

func newProduceMetrics(reg prometheus.Registerer) *produceMetrics {
	m := &produceMetrics{
		noReply: prometheus.NewCounter(prometheus.CounterOpts{Name: "braid_produce_no_reply_total",
			Help: "Produce requests without a reply subject (fire and forget), appended and answered to no one."}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "braid_produce_dropped_total",
			Help: "Produce requests without a reply subject that were refused, by error code: nobody could be told, so they are counted here and logged."},
			[]string{"code"}),
		// Every refusal is counted once, where a front-end answers it: a
		// request or a produce-multi part refused whole once, each refused
		// record of a batch once.
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "braid_produce_errors_total",
			Help: "Produce refusals by code: a request (or a produce-multi part) refused whole counts once, each refused record of a batch once."}, []string{"code"}),
	}
	reg.MustRegister(m.noReply, m.dropped, m.errors)
	return m
}

// refused counts a refusal: a request refused whole, or one record.
func (m *produceMetrics) refused(err error) {
	m.errors.WithLabelValues(api.AsError(err).Code.Symbol).Inc()
}

// refusedRecords counts the refused records of a batch answered record by
// record.
func (m *produceMetrics) refusedRecords(res []api.Result) {
	for i := range res {
		if err := res[i].Err(); err != nil {
			m.refused(err)
		}
	}
}

// logLimiter lets through one log line per interval and counts the rest.
type logLimiter struct {
	mu         sync.Mutex
	last       time.Time
	suppressed int
}

// allow reports whether a line may be logged now, and how many were
// suppressed since the last one that was.
func (l *logLimiter) allow(now time.Time) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.last) < time.Second {
		l.suppressed++
		return false, 0
	}
	n := l.suppressed
	l.last, l.suppressed = now, 0
	return true, n
}

// produceReplier answers one produce request, or, for a request without a
// reply subject, counts and logs its refusal.
type produceReplier struct {
	n   *Frontend
	r   replier
	req micro.Request
}

func (n *Frontend) produceReplier(r replier, req micro.Request) produceReplier {
	return produceReplier{n: n, r: r, req: req}
}

// err refuses the request (or one record of it) with err: it counts the
// refusal (braid_produce_errors_total) and answers it.
func (p produceReplier) err(err error) {
	p.n.produceM.refused(err)
	p.answer(err)
}

// answer answers a refusal counted already (produceMulti counts those of
// its parts), counting it as an error of the endpoint that served the
// request.
func (p produceReplier) answer(err error) {
	p.r.err(err) // counted in the endpoint's stats there
	if p.r.reply != "" {
		return
	}
	e := api.AsError(err)
	p.n.produceM.dropped.WithLabelValues(e.Code.Symbol).Inc()
	if ok, suppressed := p.n.produceM.droppedLog.allow(time.Now()); ok {
		p.n.log.Error("produce request without a reply subject refused; nobody can be told", "subject", p.req.Subject(),
			"code", e.Code.Symbol, "err", e.Message, "suppressed_since_last", suppressed)
	}
}

// produceHandler serves a produce endpoint, prefix.<tenant>.<namespace>.<topic>,
// as topicHandler does, but a request without a reply subject that names a
// bad or unknown topic is counted and logged rather than dropped unseen.
func (n *Frontend) produceHandler(prefix string, serve func(r replier, req micro.Request, t *actors.Topic)) micro.HandlerFunc {
	return func(req micro.Request) {
		r := newReplier(n.nc, req)
		n.produceInflight.add(1)
		t, err := n.topicFor(req.Subject(), prefix, req.Headers())
		if !isForwarded(req) {
			if fenced := n.member.FenceEntry(); fenced != nil {
				err = fenced
			}
		}
		var moved *actors.NotOwnerError
		switch {
		case errors.As(err, &moved) && isForwarded(req) && moved.Epoch > 0:
			// Forwarded here by a node that thought this one owned the
			// topic: it moved (a drain, a lost lease). The producer
			// refreshes the layout and resends; nothing was stored.
			err = api.SealedError(0, moved.Epoch)
		case errors.As(err, &moved):
			if err = n.forwardReq(req, moved.Owner); err == nil {
				n.produceInflight.done(1)
				return
			}
		}
		if err == nil {
			err = n.member.Fence()
		}
		if err != nil {
			if r.reply == "" {
				n.produceM.noReply.Inc()
			}
			n.produceReplier(r, req).err(err)
			n.produceInflight.done(1)
			return
		}
		serve(r, req, t)
	}
}

// produceOne serves braid.v1.produce.<t>.<ns>.<topic>: the body is the
// payload; Braid-Key, Braid-Time and Braid-Epoch headers are optional, and
// any other header but NATS's own is stored with the message. Without a
// reply subject the message is appended all the same (fire and forget).
func (n *Frontend) produceOne(r replier, req micro.Request, t *actors.Topic) {
	pr := n.produceReplier(r, req)
	if r.reply == "" {
		n.produceM.noReply.Inc()
	}
	rec, epoch, err := recordFromHeaders(req.Headers(), req.Data())
	partition := -1
	if err == nil {
		partition, err = headerPartition(req.Headers())
	}
	if err != nil {
		pr.err(err)
		n.produceInflight.done(1)
		return
	}
	t.ProduceFrom([]api.Record{rec}, epoch, partition, r.reply, func(res []api.Result) {
		defer n.produceInflight.done(1)
		if err := res[0].Err(); err != nil {
			pr.err(err)
			return
		}
		r.data(appendProduceReply(nil, res[0], t.PartitionOf(res[0].Segment)), nil)
	})
}

// appendProduceReply appends the JSON reply of produce one,
// {"segment":S,"bucket":B,"offset":O}, with "partition":P after them when
// partition is not -1 (a fixed topic's).
func appendProduceReply(dst []byte, res api.Result, partition int) []byte {
	dst = append(dst, `{"segment":`...)
	dst = strconv.AppendUint(dst, res.Segment, 10)
	dst = append(dst, `,"bucket":`...)
	dst = strconv.AppendInt(dst, int64(res.Bucket), 10)
	dst = append(dst, `,"offset":`...)
	dst = strconv.AppendUint(dst, res.Offset, 10)
	if partition >= 0 {
		dst = append(dst, `,"partition":`...)
		dst = strconv.AppendInt(dst, int64(partition), 10)
	}
	return append(dst, '}')
}

// recordFromHeaders builds the record of a produce-one request from its
// headers and body (see produceOne), and returns the Braid-Epoch it names
// (0 when absent).
func recordFromHeaders(h micro.Headers, payload []byte) (api.Record, uint64, error) {
	rec := api.Record{Payload: payload}
	if k := h.Get(api.HeaderKey); k != "" {
		rec.Key = []byte(k)
	}
	if ts := h.Get(api.HeaderTime); ts != "" {
		v, err := parseProduceTime(ts)
		if err != nil {
			return rec, 0, err
		}
		rec.Time = v
	}
	epoch, err := parseEpochHeader(h.Get(api.HeaderEpoch))
	if err != nil {
		return rec, 0, err
	}
	names := make([]string, 0, len(h))
	for name := range h {
		if isApplicationHeader(name) {
			names = append(names, name)
		}
	}
	slices.Sort(names) // a header map has no order; stored ones have one
	for _, name := range names {
		for _, v := range h[name] {
			rec.Headers = append(rec.Headers, api.Header{Name: name, Value: []byte(v)})
		}
	}
	return rec, epoch, nil
}

// isApplicationHeader reports whether a produce request header is the
// application's, to store with the message: not Braid's own request
// headers and not NATS's (Nats-...).
func isApplicationHeader(name string) bool {
	switch name {
	case api.HeaderKey, api.HeaderTime, api.HeaderEpoch, api.HeaderPartition, "":
		return false
	}
	return !(len(name) >= 5 && strings.EqualFold(name[:5], "Nats-"))
}

// parseProduceTime reads Braid-Time: unix milliseconds, 0 for the
// server's time (the rule of the produce-batch body too); negative or not
// a number is refused.
func parseProduceTime(s string) (int64, error) {
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 0 {
		return 0, api.Errorf(api.CodeBadRequest, "%s must be unix milliseconds (0: the server's time), got %q", api.HeaderTime, s)
	}
	return v, nil
}

// parsePartitionHeader reads Braid-Partition: a partition number.
func parsePartitionHeader(v string) (int, error) {
	p, err := strconv.Atoi(v)
	if err != nil || p < 0 {
		return 0, api.Errorf(api.CodeBadRequest, "%s must be a partition number (0 or more), got %q", api.HeaderPartition, v)
	}
	return p, nil
}

// headerPartition reads the optional Braid-Partition of a request's
// headers (-1 when absent).
func headerPartition(h micro.Headers) (int, error) {
	if v := h.Get(api.HeaderPartition); v != "" {
		return parsePartitionHeader(v)
	}
	return -1, nil
}

// parseEpochHeader reads the optional Braid-Epoch header (0 when absent).
func parseEpochHeader(v string) (uint64, error) {
	if v == "" {
		return 0, nil
	}
	epoch, err := strconv.ParseUint(v, 10, 64)
	if err != nil || epoch == 0 {
		return 0, api.Errorf(api.CodeBadRequest, "%s must be a layout epoch (a positive integer), got %q", api.HeaderEpoch, v)
	}
	return epoch, nil
}

// produceBatch serves braid.v1.produce-batch.<t>.<ns>.<topic>.
func (n *Frontend) produceBatch(r replier, req micro.Request, t *actors.Topic) {
	pr := n.produceReplier(r, req)
	if r.reply == "" {
		n.produceM.noReply.Inc()
	}
	recs, err := api.DecodeRecords(req.Data())
	if err == nil {
		err = t.Validate(recs)
	} else {
		err = api.Errorf(api.CodeBadRequest, "%v", err)
	}
	var epoch uint64
	partition := -1
	if err == nil {
		epoch, err = parseEpochHeader(req.Headers().Get(api.HeaderEpoch))
	}
	if err == nil {
		partition, err = headerPartition(req.Headers())
	}
	if err != nil {
		pr.err(err)
		n.produceInflight.done(1)
		return
	}
	t.ProduceFrom(recs, epoch, partition, r.reply, func(res []api.Result) {
		defer n.produceInflight.done(1)
		if r.reply == "" {
			for i := range res {
				if err := res[i].Err(); err != nil {
					pr.err(err)
				}
			}
			return
		}
		n.produceM.refusedRecords(res)
		r.data(api.AppendResults(make([]byte, 0, 8+len(res)*8), res), nil)
	})
}

// produceMultiHandler serves braid.v1.produce-multi.<tenant> (see
// api.MultiPart) on the micro front-end.
func (n *Frontend) produceMultiHandler(req micro.Request) {
	r := newReplier(n.nc, req)
	pr := n.produceReplier(r, req)
	n.produceInflight.add(1)
	if r.reply == "" {
		n.produceM.noReply.Inc()
	}
	tenant, err := multiTenant(req.Subject())
	if info := req.Headers().Get(authz.HeaderRequestInfo); err == nil && info != "" {
		err = n.authorizeTenant([]byte(info), tenant, req.Subject())
	}
	if err == nil && !isForwarded(req) {
		err = n.member.FenceEntry()
	}
	if err == nil {
		err = n.member.Fence()
	}
	if r.reply != "" && cluster.IsFenced(err) {
		// Fenced: nothing taken; the no-responders status has the Go
		// producer send the request again a moment later.
		n.produceM.refused(err)
		recordErr(req, err)
		_ = n.nc.PublishMsg(notTakenReply(r.reply, err))
		n.produceInflight.done(1)
		return
	}
	if err == nil {
		var remote *Frontend
		if !isForwarded(req) {
			remote = n
		}
		err = produceMulti(tenant, req.Data(), n.member.TopicByName, remote, n.produceM, func(replies []api.MultiReply) {
			defer n.produceInflight.done(1)
			if r.reply == "" {
				for _, err := range multiFailures(replies) {
					pr.answer(err)
				}
				return
			}
			if noneTook(replies) {
				recordErr(req, errNoneTook)
				_ = n.nc.PublishMsg(notTakenReply(r.reply, errNoneTook))
				return
			}
			r.data(encodeMultiReplies(replies), nil)
		})
	}
	if err != nil {
		pr.err(err)
		n.produceInflight.done(1)
	}
}

// notTakenReply is the reply to a produce-multi that nothing of was taken,
// as nats.go can send it: a Status 503 header and no body, which the Go
// producer takes for NATS's no-responders status and sends again, with
// the micro-service error headers that tell any other client why.
func notTakenReply(reply string, err error) *nats.Msg {
	code, desc := api.AsError(err).HeaderValues()
	return &nats.Msg{Subject: reply, Header: nats.Header{"Status": []string{"503"},
		micro.ErrorCodeHeader: []string{code}, micro.ErrorHeader: []string{desc}}}
}
