package frontend

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/meta"
	"github.com/braidmq/braid/routing"
	"github.com/braidmq/braid/topology"
	"github.com/nats-io/nats.go/micro"
)

// adminTimeout bounds one admin operation.
const adminTimeout = 30 * time.Second

// adminOp is one admin endpoint: it decodes its body and returns the reply.
type adminOp func(ctx context.Context, body []byte) (any, error)

func (n *Frontend) adminOps() map[string]adminOp {
	return map[string]adminOp{
		api.AdminTenantCreate:    n.tenantCreate,
		api.AdminTenantList:      n.tenantList,
		api.AdminNamespaceCreate: n.namespaceCreate,
		api.AdminNamespaceList:   n.namespaceList,
		api.AdminTopicCreate:     n.topicCreate,
		api.AdminTopicDescribe:   n.topicDescribe,
		api.AdminTopicList:       n.topicList,
		api.AdminTopicSplit:      n.topicSplit,
		api.AdminTopicMerge:      n.topicMerge,
		api.AdminTopicRebucket:   n.topicRebucket,
		api.AdminTopicDelete:     n.topicDelete,
		api.AdminTopicStats:      n.topicStats,
		api.AdminTopicVerify:     n.topicVerify,
		api.AdminTopicCompact:    n.topicCompact,
		api.AdminTopicCompaction: n.topicCompaction,
		api.AdminTopicPartitions: n.topicPartitions,
		api.AdminTopicMigrate:    n.topicMigrate,
		// Elastic topics (elastic.go).
		api.AdminTopicPolicies:     n.topicPolicies,
		api.AdminNamespacePolicies: n.namespacePolicies,
		// Subscriptions (subscriptions.go).
		api.AdminSubscriptionList:   n.subscriptionList,
		api.AdminSubscriptionDelete: n.subscriptionDelete,
		api.AdminSubscriptionSeek:   n.subscriptionSeek,
		// Deletes of tenants and namespaces (deletes.go).
		api.AdminNamespaceDelete: n.namespaceDelete,
		api.AdminTenantDelete:    n.tenantDelete,
		// The cluster (membership.go).
		api.AdminNodeList:  n.member.NodeList,
		api.AdminNodeDrain: n.member.NodeDrain,
	}
}

// adminConcurrency bounds the admin requests served at once. They are
// served beside each other (a NATS subscription hands its messages over
// one at a time, and an admin request waits on the metadata store), so
// that creating many topics runs at the store's rate, not at one round
// trip's; what must be ordered is (the controllers, the store's
// compare-and-swap).
const adminConcurrency = 64

func (n *Frontend) adminHandler(name string, op adminOp) micro.HandlerFunc {
	return func(req micro.Request) {
		c, err := n.authorizeAdmin(req, name)
		if err != nil {
			newReplier(n.nc, req).err(err)
			return
		}
		n.adminSlots <- struct{}{}
		go func() {
			defer func() { <-n.adminSlots }()
			r := newReplier(n.nc, req)
			ctx, cancel := context.WithTimeout(context.WithValue(context.Background(), callerKey{}, c), adminTimeout)
			defer cancel()
			out, err := op(ctx, req.Data())
			if owner, ok := notOwner(err); ok {
				err = api.Errorf(api.CodeUnavailable, "the topic's owner is node %q, not this one (it moved?); retry", n.member.OwnerNode(owner))
			}
			if err != nil {
				r.err(err)
				return
			}
			r.json(out)
		}()
	}
}

func validName(what, name string) error {
	if err := routing.ValidateName(name); err != nil {
		return api.Errorf(api.CodeInvalidName, "%s: %v", what, err)
	}
	return nil
}

func (n *Frontend) tenantCreate(ctx context.Context, body []byte) (any, error) {
	var req api.TenantCreateRequest
	if err := decodeJSON(body, &req); err != nil {
		return nil, err
	}
	if err := validName("tenant", req.Tenant); err != nil {
		return nil, err
	}
	if err := n.meta.CreateTenant(ctx, req.Tenant); err != nil {
		return nil, meta.APIError(err, "tenant "+req.Tenant)
	}
	return api.OKReply{OK: true}, nil
}

func (n *Frontend) tenantList(ctx context.Context, _ []byte) (any, error) {
	names, err := n.meta.Tenants(ctx)
	if err != nil {
		return nil, meta.APIError(err, "tenants")
	}
	if own := n.ownTenant(ctx); own != "" {
		// A tenant's account sees its own tenant only.
		names = slices.DeleteFunc(names, func(t string) bool { return t != own })
	}
	return api.NameListReply{Names: nonNil(names)}, nil
}

func (n *Frontend) namespaceCreate(ctx context.Context, body []byte) (any, error) {
	var req api.NamespaceCreateRequest
	if err := decodeJSON(body, &req); err != nil {
		return nil, err
	}
	ns, err := routing.ParseNamespace(req.Namespace)
	if err != nil {
		return nil, api.Errorf(api.CodeInvalidName, "%v", err)
	}
	if err := req.Policies.Validate(); err != nil {
		return nil, err
	}
	if err := n.checkPayloadPolicy(req.Policies); err != nil {
		return nil, err
	}
	if _, err := n.topics.ResolvePolicies(nil, req.Policies); err != nil {
		return nil, err
	}
	if req.TopicBuckets < 0 || req.TopicBuckets > 1<<16 {
		return nil, api.Errorf(api.CodeInvalidArgument, "topic_buckets must be in [1, 65536], got %d", req.TopicBuckets)
	}
	err = n.meta.CreateNamespace(ctx, meta.NamespaceRecord{Tenant: ns.Tenant, Namespace: ns.Namespace,
		TopicBuckets: req.TopicBuckets, Policies: req.Policies})
	if errors.Is(err, meta.ErrNotFound) {
		return nil, api.Errorf(api.CodeTenantNotFound, "tenant %s does not exist", ns.Tenant)
	}
	if err != nil {
		return nil, meta.APIError(err, "namespace "+ns.String())
	}
	return api.OKReply{OK: true}, nil
}

func (n *Frontend) namespaceList(ctx context.Context, body []byte) (any, error) {
	var req api.NamespaceListRequest
	if err := decodeJSON(body, &req); err != nil {
		return nil, err
	}
	if err := validName("tenant", req.Tenant); err != nil {
		return nil, err
	}
	if _, err := n.meta.Tenant(ctx, req.Tenant); err != nil {
		return nil, api.Errorf(api.CodeTenantNotFound, "tenant %s does not exist", req.Tenant)
	}
	names, err := n.meta.Namespaces(ctx, req.Tenant)
	if err != nil {
		return nil, meta.APIError(err, "namespaces")
	}
	for i := range names {
		names[i] = req.Tenant + "/" + names[i]
	}
	return api.NameListReply{Names: nonNil(names)}, nil
}

func (n *Frontend) topicCreate(ctx context.Context, body []byte) (any, error) {
	var req api.TopicCreateRequest
	if err := decodeJSON(body, &req); err != nil {
		return nil, err
	}
	// 0 is the default when a count is left out; said outright, it is a
	// mistake (a topic has at least one segment, partition, bucket).
	var given struct{ Segments, Partitions, Buckets *int }
	_ = json.Unmarshal(body, &given)
	for name, v := range map[string]*int{"segments": given.Segments, "partitions": given.Partitions, "buckets": given.Buckets} {
		if v != nil && *v <= 0 {
			return nil, api.Errorf(api.CodeInvalidArgument, "%s %d: want 1 or more (or leave it out for the default)", name, *v)
		}
	}
	if err := n.checkPayloadPolicy(req.Policies); err != nil {
		return nil, err
	}
	return n.topics.CreateTopicOn(ctx, req, n.member.PlaceTopic(req.Topic))
}

func (n *Frontend) topicDescribe(_ context.Context, body []byte) (any, error) {
	var req api.TopicRequest
	if err := decodeJSON(body, &req); err != nil {
		return nil, err
	}
	t, err := n.topics.Topic(req.Topic)
	if err != nil {
		return nil, err
	}
	return t.Describe(), nil
}

func (n *Frontend) topicList(ctx context.Context, body []byte) (any, error) {
	var req api.TopicListRequest
	if err := decodeJSON(body, &req); err != nil {
		return nil, err
	}
	ns, err := routing.ParseNamespace(req.Namespace)
	if err != nil {
		return nil, api.Errorf(api.CodeInvalidName, "%v", err)
	}
	limit := req.Limit
	if limit == 0 {
		limit = api.TopicListDefaultLimit
	}
	if limit < 1 || limit > api.TopicListMaxLimit {
		return nil, api.Errorf(api.CodeInvalidArgument, "limit must be in [1, %d], got %d", api.TopicListMaxLimit, req.Limit)
	}
	if _, err := n.meta.Namespace(ctx, ns); err != nil {
		return nil, api.Errorf(api.CodeNamespaceMissing, "namespace %s does not exist", ns)
	}
	topics, next, err := n.meta.TopicsPage(ctx, ns, req.Cursor, limit)
	if errors.Is(err, meta.ErrBadPage) {
		return nil, api.Errorf(api.CodeInvalidArgument, "%v", err)
	}
	if err != nil {
		return nil, meta.APIError(err, "topics of "+ns.String())
	}
	count, err := n.meta.TopicCount(ctx, ns)
	if err != nil {
		return nil, meta.APIError(err, "topic count of "+ns.String())
	}
	return api.TopicListReply{Topics: nonNil(topics), Next: next, Count: count}, nil
}

func (n *Frontend) topicSplit(ctx context.Context, body []byte) (any, error) {
	var req api.SplitRequest
	if err := decodeJSON(body, &req); err != nil {
		return nil, err
	}
	if req.Segment == nil {
		return nil, api.Errorf(api.CodeBadRequest, "segment is required")
	}
	var at *uint64
	if req.At != "" {
		h, err := topology.ParseHash(req.At)
		if err != nil {
			return nil, api.Errorf(api.CodeInvalidArgument, "at: %v", err)
		}
		at = &h
	}
	seg := topology.SegmentID(*req.Segment)
	return n.topics.Change(ctx, req.Topic, topology.Split(seg, at))
}

func (n *Frontend) topicMerge(ctx context.Context, body []byte) (any, error) {
	var req api.MergeRequest
	if err := decodeJSON(body, &req); err != nil {
		return nil, err
	}
	if len(req.Segments) != 2 {
		return nil, api.Errorf(api.CodeInvalidArgument, "segments must name exactly two adjacent active segments, got %d", len(req.Segments))
	}
	a, b := topology.SegmentID(req.Segments[0]), topology.SegmentID(req.Segments[1])
	return n.topics.Change(ctx, req.Topic, topology.Merge(a, b))
}

func (n *Frontend) topicRebucket(ctx context.Context, body []byte) (any, error) {
	var req api.RebucketRequest
	if err := decodeJSON(body, &req); err != nil {
		return nil, err
	}
	if req.Segment == nil {
		return nil, api.Errorf(api.CodeBadRequest, "segment is required")
	}
	seg := topology.SegmentID(*req.Segment)
	return n.topics.Change(ctx, req.Topic, topology.Rebucket(seg, req.Buckets))
}

func (n *Frontend) topicPartitions(ctx context.Context, body []byte) (any, error) {
	var req api.PartitionsRequest
	if err := decodeJSON(body, &req); err != nil {
		return nil, err
	}
	if req.Partitions < 1 {
		return nil, api.Errorf(api.CodeInvalidArgument, "partitions must be at least 1, got %d", req.Partitions)
	}
	return n.topics.Change(ctx, req.Topic, topology.AddPartitions(req.Partitions))
}

func (n *Frontend) topicMigrate(ctx context.Context, body []byte) (any, error) {
	var req api.MigrateRequest
	if err := decodeJSON(body, &req); err != nil {
		return nil, err
	}
	if req.Buckets < 0 || req.Buckets > int(topology.MaxBuckets) {
		return nil, api.Errorf(api.CodeInvalidArgument, "buckets must be in [1, %d], got %d", topology.MaxBuckets, req.Buckets)
	}
	return n.topics.Migrate(ctx, req)
}

func (n *Frontend) topicDelete(ctx context.Context, body []byte) (any, error) {
	var req api.TopicRequest
	if err := decodeJSON(body, &req); err != nil {
		return nil, err
	}
	// A quarantined topic has no subscriptions running: its delete is
	// the manager's alone.
	if err := n.deleteSubscriptions(req.Topic); err != nil && !errors.Is(err, &api.Error{Code: api.CodeTopicQuarantined}) {
		return nil, err
	}
	if err := n.topics.DeleteTopic(ctx, req.Topic); err != nil {
		return nil, err
	}
	return api.OKReply{OK: true}, nil
}

func (n *Frontend) topicStats(_ context.Context, body []byte) (any, error) {
	var req api.TopicRequest
	if err := decodeJSON(body, &req); err != nil {
		return nil, err
	}
	t, err := n.topics.Topic(req.Topic)
	if err != nil {
		return nil, err
	}
	st := t.Stats()
	st.Subscriptions = n.subscriptionStats(t)
	return st, nil
}

// topicVerify compares a replicated topic's replicas; any node serves it
// (it asks each replica).
func (n *Frontend) topicVerify(ctx context.Context, body []byte) (any, error) {
	var req api.TopicRequest
	if err := decodeJSON(body, &req); err != nil {
		return nil, err
	}
	name, err := routing.ParseTopic(req.Topic)
	if err != nil {
		return nil, api.Errorf(api.CodeInvalidName, "%v", err)
	}
	return n.topics.VerifyReplicas(ctx, name)
}

func (n *Frontend) topicCompact(ctx context.Context, body []byte) (any, error) {
	var req api.TopicRequest
	if err := decodeJSON(body, &req); err != nil {
		return nil, err
	}
	if n.cfg.Compactions == nil {
		return nil, api.Errorf(api.CodeUnavailable, "no compactor on this node")
	}
	return n.cfg.Compactions.Compact(ctx, req.Topic)
}

func (n *Frontend) topicCompaction(ctx context.Context, body []byte) (any, error) {
	var req api.TopicRequest
	if err := decodeJSON(body, &req); err != nil {
		return nil, err
	}
	if n.cfg.Compactions == nil {
		return nil, api.Errorf(api.CodeUnavailable, "no compactor on this node")
	}
	return n.cfg.Compactions.CompactionStatus(ctx, req.Topic)
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
