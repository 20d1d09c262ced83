package actors

import (
	"context"
	"errors"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/meta"
	"github.com/braidmq/braid/routing"
	"github.com/braidmq/braid/scaling"
	"github.com/braidmq/braid/wal"
)

// ResolvePolicies resolves the scaling policy of a topic with its own
// policies over its namespace's over the broker defaults, and refuses with
// INVALID_POLICY what does not resolve (see scaling.Resolve).
func (m *Manager) ResolvePolicies(topic, ns *api.Policies) (scaling.Policy, error) {
	base := m.cfg.Defaults.Scaling
	if base == (scaling.Policy{}) {
		base = scaling.Default
	}
	if m.cfg.Defaults.EntryBucketBudget > 0 {
		base.EntryBucketBudget = m.cfg.Defaults.EntryBucketBudget
	}
	return scaling.Resolve(base, ns, topic)
}

// TopicPolicies reads or changes a topic's policies (topic.policies); a
// change applies at once, without a restart.
func (m *Manager) TopicPolicies(ctx context.Context, req api.TopicPoliciesRequest) (api.PoliciesReply, error) {
	t, err := m.Topic(req.Topic)
	if err != nil {
		return api.PoliciesReply{}, err
	}
	if err := req.Policies.ValidateTopic(); err != nil {
		return api.PoliciesReply{}, err
	}
	if err := m.checkReplication(req.Policies); err != nil {
		return api.PoliciesReply{}, err
	}
	if req.Policies != nil || len(req.Unset) > 0 {
		ns, err := m.namespace(ctx, t.name.NamespaceName())
		if err != nil {
			return api.PoliciesReply{}, err
		}
		if err := m.askController(ctx, t, &policiesReq{set: req.Policies, unset: req.Unset, ns: ns.Policies}); err != nil {
			return api.PoliciesReply{}, err
		}
	}
	reply := api.PoliciesReply{Effective: t.effectivePolicies()}
	if p := t.policies.Load(); p != nil {
		reply.Policies = *p
	}
	return reply, nil
}

// NamespacePolicies reads or changes a namespace's policies
// (namespace.policies). A change is refused if the namespace or any of its
// topics would no longer resolve; it applies at once to every topic of the
// namespace.
func (m *Manager) NamespacePolicies(ctx context.Context, req api.NamespacePoliciesRequest) (api.PoliciesReply, error) {
	name, err := routing.ParseNamespace(req.Namespace)
	if err != nil {
		return api.PoliciesReply{}, api.Errorf(api.CodeInvalidName, "%v", err)
	}
	if err := req.Policies.Validate(); err != nil {
		return api.PoliciesReply{}, err
	}
	if err := m.checkReplication(req.Policies); err != nil {
		return api.PoliciesReply{}, err
	}
	rec, rev, err := m.meta.NamespaceRevision(ctx, name)
	if errors.Is(err, meta.ErrNotFound) {
		return api.PoliciesReply{}, api.Errorf(api.CodeNamespaceMissing, "namespace %s does not exist", name)
	}
	if err != nil {
		return api.PoliciesReply{}, metaError(err)
	}
	policies := rec.Policies
	if req.Policies != nil || len(req.Unset) > 0 {
		if policies, err = rec.Policies.Update(req.Policies, req.Unset); err != nil {
			return api.PoliciesReply{}, err
		}
		if policies.Empty() {
			policies = nil
		}
		if _, err := m.ResolvePolicies(nil, policies); err != nil {
			return api.PoliciesReply{}, err
		}
		topics := m.loaded(name)
		for _, t := range topics {
			if _, err := m.ResolvePolicies(t.policies.Load(), policies); err != nil {
				return api.PoliciesReply{}, api.Errorf(api.CodeInvalidPolicy, "topic %s would not resolve: %v", t.uri, err)
			}
		}
		rec.Policies = policies
		if _, err := m.meta.UpdateNamespace(ctx, rec, rev); err != nil {
			if errors.Is(err, meta.ErrConflict) {
				return api.PoliciesReply{}, api.Errorf(api.CodeUnavailable, "namespace %s changed meanwhile; retry", name)
			}
			return api.PoliciesReply{}, metaError(err)
		}
		for _, t := range topics {
			if err := m.askController(ctx, t, &policiesReq{ns: policies}); err != nil {
				m.log.Warn("applying namespace policies", "topic", t.uri, "err", err)
			}
		}
		m.log.Info("namespace policies changed", "namespace", name.String(), "policies", policies)
	}
	eff, err := m.ResolvePolicies(nil, policies)
	if err != nil {
		return api.PoliciesReply{}, err
	}
	d := m.resolve(nil, policies)
	reply := api.PoliciesReply{Effective: eff.API()}
	durability, maxPayload := d.Durability.String(), d.MaxPayloadBytes
	reply.Effective.Durability, reply.Effective.MaxPayloadBytes = &durability, &maxPayload
	if policies != nil {
		reply.Policies = *policies
	}
	return reply, nil
}

// loaded returns the loaded topics of a namespace.
func (m *Manager) loaded(ns routing.NamespaceName) []*Topic {
	m.mu.RLock()
	defer m.mu.RUnlock()
	var out []*Topic
	for _, t := range m.topics {
		if t.name.NamespaceName() == ns {
			out = append(out, t)
		}
	}
	return out
}

// askController sends a policiesReq and waits for the answer.
func (m *Manager) askController(ctx context.Context, t *Topic, req *policiesReq) error {
	timeout := 30 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	res, err := m.system.Root.RequestFuture(t.pid, req, timeout).Result()
	if err != nil {
		return api.Errorf(api.CodeTimeout, "policies of %s: %v", t.uri, err)
	}
	if r, ok := res.(*policiesResp); ok {
		return r.err
	}
	return api.Errorf(api.CodeInternal, "policies of %s: the controller answered %T", t.uri, res)
}

// applyPolicies resolves and installs the topic's own policies over its
// namespace's: the scaling policy, the max payload and the log options of
// segments created from now on. It installs nothing when they do not
// resolve.
func (t *Topic) applyPolicies(own, ns *api.Policies) error {
	sp, err := t.mgr.ResolvePolicies(own, ns)
	if err != nil {
		return err
	}
	d := t.mgr.resolve(own, ns)
	t.policies.Store(own)
	t.nsPolicies.Store(ns)
	t.policy.Store(&sp)
	t.maxPayload.Store(int64(d.MaxPayloadBytes))
	opts := d.logOptions()
	opts.SegmentBytes = sp.RollBytes()
	t.opts.Store(&opts)
	if f := t.mgr.cfg.OnStorageTick; f != nil && sp.StorageTick > 0 {
		f(sp.StorageTick)
	}
	return nil
}

// logOptions are the bucket log options of resolved policies.
func (d Defaults) logOptions() wal.Options {
	return wal.Options{Durability: d.Durability, SyncInterval: d.SyncInterval, SegmentBytes: d.SegmentBytes}
}

// effectivePolicies is what every policy of the topic resolves to.
func (t *Topic) effectivePolicies() api.Policies {
	p := t.policy.Load().API()
	durability := t.opts.Load().Durability.String()
	maxPayload := int(t.maxPayload.Load())
	p.Durability, p.MaxPayloadBytes = &durability, &maxPayload
	rf := max(t.replicationFactor(), 1)
	p.ReplicationFactor = &rf
	return p
}

// ReapplyNamespace applies the stored policies of namespace ns to its
// active topics here: another node changed them (each node applies a
// change to its own active topics).
func (m *Manager) ReapplyNamespace(ctx context.Context, ns routing.NamespaceName) error {
	rec, err := m.meta.Namespace(ctx, ns)
	if err != nil {
		return metaError(err)
	}
	for _, t := range m.loaded(ns) {
		if err := m.askController(ctx, t, &policiesReq{ns: rec.Policies}); err != nil {
			m.log.Warn("applying namespace policies changed on another node", "topic", t.uri, "err", err)
		}
	}
	return nil
}
