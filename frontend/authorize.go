package frontend

import (
	"context"
	"errors"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/authz"
	"github.com/nats-io/nats.go/micro"
)

// caller returns the account a request came from (authz.CallerOf of its
// Nats-Request-Info).
func caller(h micro.Headers) (authz.Caller, error) {
	return authz.CallerOf([]byte(h.Get(authz.HeaderRequestInfo)))
}

// authorizeTenant authorizes a request whose Nats-Request-Info value is
// info on subject, of tenant. A refusal is counted and logged.
func (n *Frontend) authorizeTenant(info []byte, tenant, subject string) error {
	c, err := authz.CallerOf(info)
	if err == nil {
		err = n.policy.Data(c, tenant)
	}
	if err != nil {
		n.refused(c, subject, err)
	}
	return err
}

// authorizeAdmin authorizes admin operation op of request req, and
// returns its caller.
func (n *Frontend) authorizeAdmin(req micro.Request, op string) (authz.Caller, error) {
	c, err := caller(req.Headers())
	if err == nil {
		err = n.policy.Admin(c, op, req.Data())
	}
	if err != nil && forbiddenError(err) {
		n.refused(c, req.Subject(), err)
	}
	return c, err
}

// refused counts and logs a FORBIDDEN refusal.
func (n *Frontend) refused(c authz.Caller, subject string, err error) {
	n.forbidden.Inc()
	n.log.Warn("request refused: forbidden to its account", "account", string(c), "subject", subject, "err", err)
}

// callerKey keys the caller of an admin request in its context.
type callerKey struct{}

// ownTenant returns the tenant the caller of an admin request may see
// alone, or "" for every tenant.
func (n *Frontend) ownTenant(ctx context.Context) string {
	c, _ := ctx.Value(callerKey{}).(authz.Caller)
	return n.policy.Tenant(c)
}

// forbiddenError reports whether err is a FORBIDDEN refusal.
func forbiddenError(err error) bool {
	var e *api.Error
	return errors.As(err, &e) && e.Code == api.CodeForbidden
}
