package frontend

import (
	"context"

	"github.com/braidmq/braid/api"
)

func (n *Frontend) topicPolicies(ctx context.Context, body []byte) (any, error) {
	var req api.TopicPoliciesRequest
	if err := decodeJSON(body, &req); err != nil {
		return nil, err
	}
	if err := n.checkPayloadPolicy(req.Policies); err != nil {
		return nil, err
	}
	return n.topics.TopicPolicies(ctx, req)
}

func (n *Frontend) namespacePolicies(ctx context.Context, body []byte) (any, error) {
	var req api.NamespacePoliciesRequest
	if err := decodeJSON(body, &req); err != nil {
		return nil, err
	}
	if err := n.checkPayloadPolicy(req.Policies); err != nil {
		return nil, err
	}
	if req.Policies != nil || len(req.Unset) > 0 {
		defer n.member.AnnounceNamespacePolicies(req.Namespace)
	}
	return n.topics.NamespacePolicies(ctx, req)
}
