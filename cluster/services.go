package cluster

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/braidmq/braid/actors"
	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/routing"
	"github.com/nats-io/nats.go/micro"
)

// produceQueueBytes bounds the produce requests a node holds unhandled.
const produceQueueBytes = 512 << 20

// addServices registers the micro services: braid-produce, braid-admin and
// braid-consume, so `nats micro ls` lists them.
func (n *Node) addServices() error {
	produce, err := micro.AddService(n.nc, micro.Config{Name: "braid-produce", Version: api.ServiceVersion,
		Description: "Braid produce: one message or a batch to a scalable topic"})
	if err != nil {
		return err
	}
	n.services = append(n.services, produce)
	// Produce requests wait in their subscription while the handler hands
	// them to the buckets; past its pending limits NATS drops what comes
	// (the senders time out). The nats.go default of 64 MiB is 64 batches
	// of the Go producer's default size, which a few producers keep in
	// flight, so the produce endpoints may hold produceQueueBytes.
	limits := micro.WithEndpointPendingLimits(-1, produceQueueBytes)
	if err := produce.AddEndpoint("produce", n.topicHandler(api.ProducePrefix, n.produceOne),
		micro.WithEndpointSubject(api.ProducePrefix+".*.*.*"), limits); err != nil {
		return err
	}
	if err := produce.AddEndpoint("produce-batch", n.topicHandler(api.ProduceBatchPrefix, n.produceBatch),
		micro.WithEndpointSubject(api.ProduceBatchPrefix+".*.*.*"), limits); err != nil {
		return err
	}

	admin, err := micro.AddService(n.nc, micro.Config{Name: "braid-admin", Version: api.ServiceVersion,
		Description: "Braid admin: tenants, namespaces, topics, split, merge, rebucket"})
	if err != nil {
		return err
	}
	n.services = append(n.services, admin)
	for op, fn := range n.adminOps() {
		name := strings.ReplaceAll(op, ".", "-")
		if err := admin.AddEndpoint(name, n.adminHandler(fn), micro.WithEndpointSubject(api.AdminSubject(op))); err != nil {
			return err
		}
	}
	// Anything else under admin gets a clear NOT_FOUND instead of a timeout.
	if err := admin.AddEndpoint("unknown", micro.HandlerFunc(n.adminUnknown),
		micro.WithEndpointSubject(api.AdminPrefix+".>"), micro.WithEndpointQueueGroup("braid-admin-unknown")); err != nil {
		return err
	}

	consume, err := micro.AddService(n.nc, micro.Config{Name: "braid-consume", Version: api.ServiceVersion,
		Description: "Braid consume: join, fetch, ack, leave for stream subscriptions"})
	if err != nil {
		return err
	}
	n.services = append(n.services, consume)
	for _, verb := range []string{api.ConsumeJoin, api.ConsumeFetch, api.ConsumeAck, api.ConsumeLeave} {
		if err := consume.AddEndpoint(verb, n.consumeHandler(verb),
			micro.WithEndpointSubject(api.ConsumePrefix+"."+verb+".*.*.*")); err != nil {
			return err
		}
	}
	if err := n.addQueueServices(); err != nil {
		return err
	}
	// The subscriptions must be known to the server before Start returns,
	// or a client's first request could find no responder.
	return n.nc.Flush()
}

func (n *Node) adminUnknown(req micro.Request) {
	known := n.adminOps()
	op := strings.TrimPrefix(req.Subject(), api.AdminPrefix+".")
	if _, ok := known[op]; ok {
		return // served by its own endpoint
	}
	newReplier(n.nc, req).err(api.Errorf(api.CodeNotFound, "unknown admin operation %q", op))
}

// topicHandler serves one per-topic endpoint, prefix.<tenant>.<namespace>.<topic>:
// it resolves the topic named by the subject, answering a malformed or
// unknown one with its error, and hands the request to serve.
func (n *Node) topicHandler(prefix string, serve func(r replier, req micro.Request, t *actors.Topic)) micro.HandlerFunc {
	return func(req micro.Request) {
		r := newReplier(n.nc, req)
		t, err := n.topicOf(req.Subject(), prefix)
		if err != nil {
			r.err(err)
			return
		}
		serve(r, req, t)
	}
}

// topicOf resolves the topic named by the last three subject tokens.
func (n *Node) topicOf(subject string, prefix string) (*actors.Topic, error) {
	tenant, ns, name, ok := api.TopicTokens(subject, strings.Count(prefix, ".")+1)
	if !ok {
		return nil, api.Errorf(api.CodeBadRequest, "subject %q must be %s.<tenant>.<namespace>.<topic>", subject, prefix)
	}
	tn, err := routing.TopicFromSubjectTokens(tenant, ns, name)
	if err != nil {
		return nil, api.Errorf(api.CodeInvalidName, "%v", err)
	}
	return n.topics.TopicByName(tn)
}

// produceOne serves braid.v1.produce.<t>.<ns>.<topic>: the body is the
// payload; Braid-Key and Braid-Time headers are optional.
func (n *Node) produceOne(r replier, req micro.Request, t *actors.Topic) {
	rec := api.Record{Payload: req.Data()}
	h := req.Headers()
	if k := h.Get(api.HeaderKey); k != "" {
		rec.Key = []byte(k)
	}
	if ts := h.Get(api.HeaderTime); ts != "" {
		v, err := strconv.ParseInt(ts, 10, 64)
		if err != nil || v <= 0 {
			r.err(api.Errorf(api.CodeBadRequest, "%s must be unix milliseconds, got %q", api.HeaderTime, ts))
			return
		}
		rec.Time = v
	}
	epoch, err := routedEpoch(h)
	if err != nil {
		r.err(err)
		return
	}
	t.ProduceAt([]api.Record{rec}, epoch, func(res []api.Result) {
		if err := res[0].Err(); err != nil {
			r.err(err)
			return
		}
		b, _ := json.Marshal(api.ProduceReply{Segment: res[0].Segment, Bucket: res[0].Bucket, Offset: res[0].Offset})
		r.data(b, nil)
	})
}

// produceBatch serves braid.v1.produce-batch.<t>.<ns>.<topic>.
func (n *Node) produceBatch(r replier, req micro.Request, t *actors.Topic) {
	recs, err := api.DecodeRecords(req.Data())
	if err != nil {
		r.err(api.Errorf(api.CodeBadRequest, "%v", err))
		return
	}
	if err := t.Validate(recs); err != nil {
		r.err(err)
		return
	}
	epoch, err := routedEpoch(req.Headers())
	if err != nil {
		r.err(err)
		return
	}
	t.ProduceAt(recs, epoch, func(res []api.Result) {
		r.data(api.AppendResults(make([]byte, 0, 8+len(res)*8), res), nil)
	})
}

// routedEpoch reads the optional Braid-Epoch header (0 when absent).
func routedEpoch(h micro.Headers) (uint64, error) {
	v := h.Get(api.HeaderEpoch)
	if v == "" {
		return 0, nil
	}
	epoch, err := strconv.ParseUint(v, 10, 64)
	if err != nil || epoch == 0 {
		return 0, api.Errorf(api.CodeBadRequest, "%s must be a layout epoch (a positive integer), got %q", api.HeaderEpoch, v)
	}
	return epoch, nil
}
