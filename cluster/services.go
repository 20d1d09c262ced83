package cluster

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
// braid-consume, so `nats micro ls` lists them.
func (n *Node) addServices() error {
	if n.ns != nil && !n.cfg.MicroProduce && !n.auth.creds {
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

	admin, err := micro.AddService(n.nc, micro.Config{Name: "braid-admin", Version: api.ServiceVersion,
		Description: "Braid admin: tenants, namespaces, topics, split, merge, rebucket"})
	if err != nil {
		return err
	}
	n.services = append(n.services, admin)
	for op, fn := range n.adminOps() {
		if op == api.AdminNodeList || op == api.AdminNodeDrain {
			continue // every node serves them (addClusterService)
		}
		name := strings.ReplaceAll(op, ".", "-")
		var h micro.Handler = n.adminHandler(op, fn)
		if slices.Contains(topicAdminOps, op) {
			h = n.adminTopicHandler(op, fn)
		}
		if err := admin.AddEndpoint(name, h, micro.WithEndpointSubject(api.AdminSubject(op))); err != nil {
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

// addMicroProduce registers the produce endpoints as a nats.go micro
// service: the front-end with an external NATS server.
func (n *Node) addMicroProduce() error {
	produce, err := micro.AddService(n.nc, micro.Config{Name: "braid-produce", Version: api.ServiceVersion,
		Description: "Braid produce: one message or a batch to a scalable topic, or batches to many topics of a tenant"})
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
	if err := produce.AddEndpoint("produce", n.produceHandler(api.ProducePrefix, n.produceOne),
		micro.WithEndpointSubject(api.ProducePrefix+".*.*.*"), limits); err != nil {
		return err
	}
	if err := produce.AddEndpoint("produce-batch", n.produceHandler(api.ProduceBatchPrefix, n.produceBatch),
		micro.WithEndpointSubject(api.ProduceBatchPrefix+".*.*.*"), limits); err != nil {
		return err
	}
	if err := produce.AddEndpoint("produce-multi", micro.HandlerFunc(n.produceMultiHandler),
		micro.WithEndpointSubject(api.ProduceMultiPrefix+".*"), limits); err != nil {
		return err
	}

	return nil
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
		t, err := n.topicFor(req.Subject(), prefix, req.Headers())
		if owner, ok := notOwner(err); ok {
			if err = n.forwardReq(req, owner); err == nil {
				return
			}
		}
		if err != nil {
			r.err(err)
			return
		}
		serve(r, req, t)
	}
}

// topicFor is topicOf for a request whose caller is authorized first (its
// Nats-Request-Info header's account against the subject's tenant).
func (n *Node) topicFor(subject, prefix string, h micro.Headers) (*actors.Topic, error) {
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
func (n *Node) topicOf(subject string, prefix string) (*actors.Topic, error) {
	tenant, ns, name, ok := api.TopicTokens(subject, strings.Count(prefix, ".")+1)
	if !ok {
		return nil, api.Errorf(api.CodeBadRequest, "subject %q must be %s.<tenant>.<namespace>.<topic>", subject, prefix)
	}
	tn, err := routing.TopicFromSubjectTokens(tenant, ns, name)
	if err != nil {
		return nil, api.Errorf(api.CodeInvalidName, "%v", err)
	}
	return n.topicByName(tn)
}

// addClusterService serves what every node of a cluster answers, standby
// or not: node.list (so that the cluster can be looked at while the
// serving node is down).
func (n *Node) addClusterService() error {
	svc, err := micro.AddService(n.nc, micro.Config{Name: "braid-cluster", Version: api.ServiceVersion,
		Description: "Braid cluster: its nodes"})
	if err != nil {
		return err
	}
	n.clusterSvc = svc
	if err := svc.AddEndpoint(strings.ReplaceAll(api.AdminNodeList, ".", "-"), n.adminHandler(api.AdminNodeList, n.nodeList),
		micro.WithEndpointSubject(api.AdminSubject(api.AdminNodeList))); err != nil {
		return err
	}
	if err := svc.AddEndpoint(strings.ReplaceAll(api.AdminNodeDrain, ".", "-"), n.adminHandler(api.AdminNodeDrain, n.nodeDrain),
		micro.WithEndpointSubject(api.AdminSubject(api.AdminNodeDrain))); err != nil {
		return err
	}
	if err := n.startDrainService(); err != nil {
		return err
	}
	if err := n.startEvictService(); err != nil {
		return err
	}
	if err := n.startRebalancer(); err != nil {
		return err
	}
	return n.nc.Flush()
}
