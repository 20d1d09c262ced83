package client

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/topology"
)

// Admin calls the admin endpoints (braid.v1.admin.<object>.<verb>). Every
// method is one request; a refusal by the server is returned as an
// *api.Error, so errors.Is(err, api.ErrTopicNotFound) and the like work.
// Admin is safe for concurrent use and holds no resources.
type Admin struct {
	nc  *nats.Conn
	cfg adminConfig
}

// NewAdmin returns an Admin that sends its requests over nc. The only option
// is WithRequestTimeout, applied to calls whose context has no deadline.
// NewAdmin panics on an invalid option value: that is a programming error.
func NewAdmin(nc *nats.Conn, opts ...AdminOption) *Admin {
	cfg := adminConfig{requestTimeout: DefaultRequestTimeout}
	for _, o := range opts {
		o.applyAdmin(&cfg)
	}
	if err := cfg.validate(); err != nil {
		panic(err)
	}
	return &Admin{nc: nc, cfg: cfg}
}

func (a *Admin) call(ctx context.Context, op string, req, reply any) error {
	return requestJSON(ctx, a.nc, a.cfg.requestTimeout, api.AdminSubject(op), req, reply)
}

// CreateTenant creates a tenant. It returns api.ErrAlreadyExists if it
// exists and api.ErrInvalidName if the name breaks the name rule.
func (a *Admin) CreateTenant(ctx context.Context, tenant string) error {
	return a.call(ctx, api.AdminTenantCreate, api.TenantCreateRequest{Tenant: tenant}, nil)
}

// ListTenants returns the tenant names, sorted.
func (a *Admin) ListTenants(ctx context.Context) ([]string, error) {
	var reply api.NameListReply
	err := a.call(ctx, api.AdminTenantList, struct{}{}, &reply)
	return reply.Names, err
}

// CreateNamespace creates the namespace ns ("tenant/namespace") with its
// policies (nil: broker defaults) and topicBuckets key-value buckets for its
// topics' metadata (0: the default, 1; immutable afterwards).
func (a *Admin) CreateNamespace(ctx context.Context, ns string, policies *api.Policies, topicBuckets int) error {
	return a.call(ctx, api.AdminNamespaceCreate,
		api.NamespaceCreateRequest{Namespace: ns, Policies: policies, TopicBuckets: topicBuckets}, nil)
}

// ListNamespaces returns the namespaces of a tenant as "tenant/namespace", sorted.
func (a *Admin) ListNamespaces(ctx context.Context, tenant string) ([]string, error) {
	var reply api.NameListReply
	err := a.call(ctx, api.AdminNamespaceList, api.NamespaceListRequest{Tenant: tenant}, &reply)
	return reply.Names, err
}

// CreateTopic creates the scalable topic uri ("topic://tenant/ns/name") with
// segments initial segments (0: the default, 1) and returns its layout.
func (a *Admin) CreateTopic(ctx context.Context, uri string, segments int, opts ...TopicOption) (api.TopicDescription, error) {
	req := api.TopicCreateRequest{Topic: uri, Segments: segments}
	for _, o := range opts {
		o(&req)
	}
	var d api.TopicDescription
	err := a.call(ctx, api.AdminTopicCreate, req, &d)
	return d, err
}

// CreateFixedTopic creates a fixed topic (persistent://t/ns/name) of the
// given partitions (keys go to partition hash % N).
func (a *Admin) CreateFixedTopic(ctx context.Context, uri string, partitions int, opts ...TopicOption) (api.TopicDescription, error) {
	req := api.TopicCreateRequest{Topic: uri, Partitions: partitions}
	for _, o := range opts {
		o(&req)
	}
	var d api.TopicDescription
	err := a.call(ctx, api.AdminTopicCreate, req, &d)
	return d, err
}

// AddPartitions grows a fixed topic to partitions (more than it has). Keys
// remap: a key's order across the change is not kept.
func (a *Admin) AddPartitions(ctx context.Context, uri string, partitions int) (api.TopicDescription, error) {
	var d api.TopicDescription
	err := a.call(ctx, api.AdminTopicPartitions, api.PartitionsRequest{Topic: uri, Partitions: partitions}, &d)
	return d, err
}

// Migrate turns the fixed topic uri (persistent://t/ns/name) into the
// scalable topic://t/ns/name in place, irreversibly (api.MigrateRequest).
func (a *Admin) Migrate(ctx context.Context, req api.MigrateRequest) (api.TopicDescription, error) {
	var d api.TopicDescription
	err := a.call(ctx, api.AdminTopicMigrate, req, &d)
	return d, err
}

// DescribeTopic returns the topic's layout: its epoch and every segment.
func (a *Admin) DescribeTopic(ctx context.Context, uri string) (api.TopicDescription, error) {
	var d api.TopicDescription
	err := a.call(ctx, api.AdminTopicDescribe, api.TopicRequest{Topic: uri}, &d)
	return d, err
}

// ListTopics returns the topic URIs of namespace ns ("tenant/namespace"), in
// the order topic.list pages them (by topic bucket, then by name).
func (a *Admin) ListTopics(ctx context.Context, ns string) ([]string, error) {
	var all []string
	err := a.ListTopicPages(ctx, ns, 0, func(page []string, _ int64) error {
		all = append(all, page...)
		return nil
	})
	return all, err
}

// ListTopicPages lists the topics of a namespace a page of up to limit at
// a time (0: the server's default), calling each with the page and the
// namespace's topic count, until the last page or an error from each.
func (a *Admin) ListTopicPages(ctx context.Context, ns string, limit int, each func(page []string, count int64) error) error {
	req := api.TopicListRequest{Namespace: ns, Limit: limit}
	for {
		var reply api.TopicListReply
		if err := a.call(ctx, api.AdminTopicList, req, &reply); err != nil {
			return err
		}
		if err := each(reply.Topics, reply.Count); err != nil {
			return err
		}
		if reply.Next == "" {
			return nil
		}
		req.Cursor = reply.Next
	}
}

// Split seals an active segment and creates two children that tile its
// range, split at the midpoint, or so that the upper child starts at *at.
// It returns the new layout, or api.ErrLayoutRefused (sealed segment, bad
// split point) or an api error naming what is missing.
func (a *Admin) Split(ctx context.Context, uri string, segment uint64, at *uint64) (api.TopicDescription, error) {
	req := api.SplitRequest{Topic: uri, Segment: &segment}
	if at != nil {
		req.At = topology.FormatHash(*at)
	}
	var d api.TopicDescription
	err := a.call(ctx, api.AdminTopicSplit, req, &d)
	return d, err
}

// Merge seals two adjacent active segments and creates one child over their
// union. It returns the new layout.
func (a *Admin) Merge(ctx context.Context, uri string, segA, segB uint64) (api.TopicDescription, error) {
	var d api.TopicDescription
	err := a.call(ctx, api.AdminTopicMerge, api.MergeRequest{Topic: uri, Segments: []uint64{segA, segB}}, &d)
	return d, err
}

// Rebucket seals an active segment and creates a successor over the same
// range with the given number of entry buckets. It returns the new layout.
func (a *Admin) Rebucket(ctx context.Context, uri string, segment uint64, buckets int) (api.TopicDescription, error) {
	var d api.TopicDescription
	err := a.call(ctx, api.AdminTopicRebucket, api.RebucketRequest{Topic: uri, Segment: &segment, Buckets: buckets}, &d)
	return d, err
}

// DeleteTopic deletes a topic and its data.
func (a *Admin) DeleteTopic(ctx context.Context, uri string) error {
	return a.call(ctx, api.AdminTopicDelete, api.TopicRequest{Topic: uri}, nil)
}

// Stats returns per-bucket offsets and sizes and per-subscription backlogs.
func (a *Admin) Stats(ctx context.Context, uri string) (api.TopicStats, error) {
	var s api.TopicStats
	err := a.call(ctx, api.AdminTopicStats, api.TopicRequest{Topic: uri}, &s)
	return s, err
}

// VerifyReplicas compares the replicas of every bucket log of a
// replicated topic: whether each holds the same committed records.
func (a *Admin) VerifyReplicas(ctx context.Context, uri string) (api.TopicVerification, error) {
	var v api.TopicVerification
	err := a.call(ctx, api.AdminTopicVerify, api.TopicRequest{Topic: uri}, &v)
	return v, err
}

// Compact starts a compaction of the topic (one already running is not
// started again) and returns its status.
func (a *Admin) Compact(ctx context.Context, uri string) (api.CompactionStatus, error) {
	var s api.CompactionStatus
	err := a.call(ctx, api.AdminTopicCompact, api.TopicRequest{Topic: uri}, &s)
	return s, err
}

// Compaction returns the topic's compaction status: the one running, and
// the last one recorded.
func (a *Admin) Compaction(ctx context.Context, uri string) (api.CompactionStatus, error) {
	var s api.CompactionStatus
	err := a.call(ctx, api.AdminTopicCompaction, api.TopicRequest{Topic: uri}, &s)
	return s, err
}

// describe is the producer's layout refresh.
func describe(ctx context.Context, nc *nats.Conn, timeout time.Duration, uri string) (api.TopicDescription, error) {
	var d api.TopicDescription
	err := requestJSON(ctx, nc, timeout, api.AdminSubject(api.AdminTopicDescribe), api.TopicRequest{Topic: uri}, &d)
	if err != nil {
		return d, fmt.Errorf("describe %s: %w", uri, err)
	}
	return d, nil
}

// ListNodes returns the cluster's nodes (live or lapsed, by id) and the
// id of the node that serves the topics.
func (a *Admin) ListNodes(ctx context.Context) (api.NodeListReply, error) {
	var reply api.NodeListReply
	err := a.call(ctx, api.AdminNodeList, struct{}{}, &reply)
	return reply, err
}

// DrainNode moves every active segment node owns to other nodes, and its
// consumer groups, so that it can stop (see api.AdminNodeDrain). It waits
// until the drain is done or ctx ends (not the admin's request timeout:
// a drain of many topics takes a while).
func (a *Admin) DrainNode(ctx context.Context, node string) (api.NodeDrainReply, error) {
	var reply api.NodeDrainReply
	timeout := 10 * time.Minute
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	err := requestJSON(ctx, a.nc, timeout, api.AdminSubject(api.AdminNodeDrain), api.NodeDrainRequest{Node: node}, &reply)
	return reply, err
}

// DeleteNamespace deletes an empty namespace: api.ErrInvalidArgument while
// it holds a topic, NOT_FOUND when there is none.
func (a *Admin) DeleteNamespace(ctx context.Context, ns string) error {
	return a.call(ctx, api.AdminNamespaceDelete, map[string]string{"namespace": ns}, nil)
}

// DeleteTenant deletes a tenant without namespaces (the operator's to do
// on a secured server).
func (a *Admin) DeleteTenant(ctx context.Context, tenant string) error {
	return a.call(ctx, api.AdminTenantDelete, api.TenantCreateRequest{Tenant: tenant}, nil)
}
