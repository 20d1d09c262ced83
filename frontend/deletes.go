package frontend

import (
	"context"
	"errors"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/meta"
	"github.com/braidmq/braid/routing"
)

// namespaceDelete deletes an empty namespace.
func (n *Frontend) namespaceDelete(ctx context.Context, body []byte) (any, error) {
	var named struct {
		Namespace string `json:"namespace"`
	}
	if err := decodeJSON(body, &named); err != nil {
		return nil, err
	}
	ns, err := routing.ParseNamespace(named.Namespace)
	if err != nil {
		return nil, api.Errorf(api.CodeInvalidName, "namespace: %v", err)
	}
	if err := n.meta.DeleteNamespace(ctx, ns); err != nil {
		return nil, deleteError(err, api.CodeNamespaceMissing, "namespace "+ns.String())
	}
	n.log.Info("namespace deleted", "namespace", ns.String())
	return api.OKReply{OK: true}, nil
}

// tenantDelete deletes a tenant without namespaces.
func (n *Frontend) tenantDelete(ctx context.Context, body []byte) (any, error) {
	var req api.TenantCreateRequest
	if err := decodeJSON(body, &req); err != nil {
		return nil, err
	}
	if err := validName("tenant", req.Tenant); err != nil {
		return nil, err
	}
	if err := n.meta.DeleteTenant(ctx, req.Tenant); err != nil {
		return nil, deleteError(err, api.CodeTenantNotFound, "tenant "+req.Tenant)
	}
	n.log.Info("tenant deleted", "tenant", req.Tenant)
	return api.OKReply{OK: true}, nil
}

// deleteError is the wire error of a failed delete; missing is the code
// of a tenant or namespace that does not exist, as every operation
// answers it.
func deleteError(err error, missing api.Code, what string) error {
	switch {
	case errors.Is(err, meta.ErrNotFound):
		return api.Errorf(missing, "%s does not exist", what)
	case errors.Is(err, meta.ErrNotEmpty):
		return api.Errorf(api.CodeInvalidArgument, "%v", err)
	default:
		return api.Errorf(api.CodeUnavailable, "deleting %s: %v", what, err)
	}
}
