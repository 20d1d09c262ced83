package frontend

import (
	"slices"
	"strings"

	"github.com/braidmq/braid/actors"
	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/authz"
	"github.com/braidmq/braid/routing"
	"github.com/nats-io/nats.go/micro"
)

// produceQueueBytes bounds the produce requests a node holds unhandled.
const produceQueueBytes = 512 << 20

// addServices registers the micro services: braid-produce, braid-admin and
// braid-consume (services of microservice.go, whose stats count the errors
// answered), and braid-queue and braid-read, so `nats micro ls` lists them.
func (n *Frontend) addServices() error {
	if n.cfg.Server != nil && !n.cfg.MicroProduce && !n.cfg.Auth.Creds {
		// With the embedded server, the produce endpoints are served by
		// the lean front-end (fastproduce.go): made once, paused while
		// the node does not hold the entry role.
		if n.fast != nil {
			if err := n.fast.resume(); err != nil {
				return err
			}
		} else if err := n.startFastProduce(); err != nil {
			return err
		}
	} else if err := n.addMicroProduce(); err != nil {
		return err
	}

	admin, err := n.newService("braid-admin", "Braid admin: tenants, namespaces, topics, split, merge, rebucket")
	if err != nil {
		return err
	}
	n.services = append(n.services, admin)
	ops := n.adminOps()
	for op, fn := range ops {
		if op == api.AdminNodeList || op == api.AdminNodeDrain {
			continue // every node serves them (addClusterService)
		}
		if err := admin.endpoint(strings.ReplaceAll(op, ".", "-"), api.AdminSubject(op), n.adminEndpoint(op, fn)); err != nil {
			return err
		}
	}
	// Anything else under admin gets a clear NOT_FOUND instead of a
	// timeout. The catch-all gets every admin request, but serves (and
	// counts) only those of operations no endpoint serves.
	unknown := func(subject string) bool {
		_, known := ops[strings.TrimPrefix(subject, api.AdminPrefix+".")]
		return !known
	}
	if err := admin.endpoint("unknown", api.AdminPrefix+".>", micro.HandlerFunc(n.adminUnknown),
		withQueueGroup("braid-admin-unknown"), takingOnly(unknown)); err != nil {
		return err
	}

	consume, err := n.newService("braid-consume", "Braid consume: join, fetch, ack, leave for stream subscriptions")
	if err != nil {
		return err
	}
	n.services = append(n.services, consume)
	for _, verb := range []string{api.ConsumeJoin, api.ConsumeFetch, api.ConsumeAck, api.ConsumeLeave} {
		if err := consume.endpoint(verb, api.ConsumePrefix+"."+verb+".*.*.*", n.consumeHandler(verb)); err != nil {
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

// addMicroProduce registers the produce endpoints as a micro service
// (microservice.go): the front-end with an external NATS server.
func (n *Frontend) addMicroProduce() error {
	produce, err := n.newService("braid-produce",
		"Braid produce: one message or a batch to a scalable topic, or batches to many topics of a tenant")
	if err != nil {
		return err
	}
	n.services = append(n.services, produce)
	// Produce requests wait in their subscription while the handler hands
	// them to the buckets; past its pending limits NATS drops what comes
	// (the senders time out). The nats.go default of 64 MiB is 64 batches
	// of the Go producer's default size, which a few producers keep in
	// flight, so the produce endpoints may hold produceQueueBytes.
	limits := withPendingLimits(-1, produceQueueBytes)
	if err := produce.endpoint("produce", api.ProducePrefix+".*.*.*", n.produceHandler(api.ProducePrefix, n.produceOne), limits); err != nil {
		return err
	}
	if err := produce.endpoint("produce-batch", api.ProduceBatchPrefix+".*.*.*", n.produceHandler(api.ProduceBatchPrefix, n.produceBatch), limits); err != nil {
		return err
	}
	return produce.endpoint("produce-multi", api.ProduceMultiPrefix+".*", micro.HandlerFunc(n.produceMultiHandler), limits)
}

// adminEndpoint serves admin operation op: with adminTopicHandler for an
// operation on one topic, else with adminHandler (their replier counts
// the errors they answer in the endpoint's stats).
func (n *Frontend) adminEndpoint(op string, fn adminOp) micro.Handler {
	if slices.Contains(topicAdminOps, op) {
		return n.adminTopicHandler(op, fn)
	}
	return n.adminHandler(op, fn)
}

// adminUnknown answers an admin request of an unknown operation.
func (n *Frontend) adminUnknown(req micro.Request) {
	op := strings.TrimPrefix(req.Subject(), api.AdminPrefix+".")
	n.answerErr(req, api.Errorf(api.CodeNotFound, "unknown admin operation %q", op))
}

// topicHandler serves one per-topic endpoint, prefix.<tenant>.<namespace>.<topic>:
// it resolves the topic named by the subject, answering a malformed or
// unknown one with its error, and hands the request to serve.
func (n *Frontend) topicHandler(prefix string, serve func(r replier, req micro.Request, t *actors.Topic)) micro.HandlerFunc {
	return func(req micro.Request) {
		r := newReplier(n.nc, req)
		t, err := n.topicFor(req.Subject(), prefix, req.Headers())
		if owner, ok := notOwner(err); ok {
			if err = n.forwardReq(req, owner); err == nil {
				return
			}
		}
		if err != nil {
			n.answerErr(req, err)
			return
		}
		serve(r, req, t)
	}
}

// topicFor is topicOf for a request whose caller is authorized first (its
// Nats-Request-Info header's account against the subject's tenant).
func (n *Frontend) topicFor(subject, prefix string, h micro.Headers) (*actors.Topic, error) {
	if info := h.Get(authz.HeaderRequestInfo); info != "" {
		if tenant, _, _, ok := api.TopicTokens(subject, strings.Count(prefix, ".")+1); ok {
			if err := n.authorizeTenant([]byte(info), tenant, subject); err != nil {
				return nil, err
			}
		}
	}
	return n.topicOf(subject, prefix)
}

// topicOf resolves the topic named by the last three subject tokens.
func (n *Frontend) topicOf(subject string, prefix string) (*actors.Topic, error) {
	tenant, ns, name, ok := api.TopicTokens(subject, strings.Count(prefix, ".")+1)
	if !ok {
		return nil, api.Errorf(api.CodeBadRequest, "subject %q must be %s.<tenant>.<namespace>.<topic>", subject, prefix)
	}
	tn, err := routing.TopicFromSubjectTokens(tenant, ns, name)
	if err != nil {
		return nil, api.Errorf(api.CodeInvalidName, "%v", err)
	}
	return n.member.TopicByName(tn)
}

// AddClusterService serves what every node of a cluster answers, standby
// or not: node.list (so that the cluster can be looked at while the
// serving node is down).
func (n *Frontend) AddClusterService() error {
	svc, err := n.newService("braid-cluster", "Braid cluster: its nodes")
	if err != nil {
		return err
	}
	n.clusterSvc = svc
	for _, op := range []string{api.AdminNodeList, api.AdminNodeDrain} {
		if err := svc.endpoint(strings.ReplaceAll(op, ".", "-"), api.AdminSubject(op), n.adminEndpoint(op, n.adminOps()[op])); err != nil {
			return err
		}
	}
	if err := n.member.StartServices(); err != nil {
		return err
	}
	return n.nc.Flush()
}
