package client

import (
	"context"

	"github.com/braidmq/braid/api"
)

// TopicPolicies returns the policies stored on a topic and what every
// policy resolves to (topic, then namespace, then broker default).
func (a *Admin) TopicPolicies(ctx context.Context, uri string) (api.PoliciesReply, error) {
	var r api.PoliciesReply
	err := a.call(ctx, api.AdminTopicPolicies, api.TopicPoliciesRequest{Topic: uri}, &r)
	return r, err
}

// SetTopicPolicies changes a topic's policies live: the keys set in set
// replace the stored ones, the keys named in unset (JSON names, e.g.
// "split_window") are removed and resolve from the namespace again. It
// returns api.ErrInvalidPolicy, changing nothing, for a value the server
// refuses.
func (a *Admin) SetTopicPolicies(ctx context.Context, uri string, set *api.Policies, unset ...string) (api.PoliciesReply, error) {
	var r api.PoliciesReply
	err := a.call(ctx, api.AdminTopicPolicies, api.TopicPoliciesRequest{Topic: uri, Policies: set, Unset: unset}, &r)
	return r, err
}

// NamespacePolicies returns the policies of namespace ns ("tenant/namespace")
// and what they resolve to over the broker defaults.
func (a *Admin) NamespacePolicies(ctx context.Context, ns string) (api.PoliciesReply, error) {
	var r api.PoliciesReply
	err := a.call(ctx, api.AdminNamespacePolicies, api.NamespacePoliciesRequest{Namespace: ns}, &r)
	return r, err
}

// SetNamespacePolicies changes a namespace's policies live for all its
// topics, like SetTopicPolicies; it is refused if a topic of the namespace
// would no longer resolve.
func (a *Admin) SetNamespacePolicies(ctx context.Context, ns string, set *api.Policies, unset ...string) (api.PoliciesReply, error) {
	var r api.PoliciesReply
	err := a.call(ctx, api.AdminNamespacePolicies, api.NamespacePoliciesRequest{Namespace: ns, Policies: set, Unset: unset}, &r)
	return r, err
}
