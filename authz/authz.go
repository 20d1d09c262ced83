// Package authz decides what the caller of a request may do, from the NATS
// account the request came from. Braid uses NATS's own security model
// (docs/security.md): its services live in one account (Braid's), tenants
// are accounts that import Braid's exports, and NATS stamps every request
// that crosses a service import with a Nats-Request-Info header naming the
// account it came from ("acc"). A request without it was published in
// Braid's own account (its nodes, its administrators), or on a server
// without accounts.
//
// Roles: Braid's account and the operator account may do anything; a
// tenant account — named as its tenant — may address its own tenant only,
// and may not create tenants or drain nodes. A refusal is FORBIDDEN and
// changes nothing.
//
// The package is pure: it parses a header value and a request body and
// returns an error; it has no NATS or actor code.
package authz

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/routing"
)

// HeaderRequestInfo is the header NATS sets on requests that cross a
// service import (nats-server's ClientInfoHdr).
const HeaderRequestInfo = "Nats-Request-Info"

// Policy is who may do what.
type Policy struct {
	// BraidAccount is the account Braid's services live in; requests from
	// it (with the header naming it, or without the header) may do
	// anything.
	BraidAccount string
	// OperatorAccount, when set, may do anything too (create tenants,
	// drain nodes, address every tenant).
	OperatorAccount string
	// Tenants maps accounts to the tenants they are, for accounts not
	// named as their tenants: with JWTs an account's name on the wire is
	// its public key. Other accounts are the tenant of their name.
	Tenants map[string]string
}

// Caller is the account a request came from: "" when it carried no
// Nats-Request-Info (published in Braid's own account).
type Caller string

// CallerOf returns the account named by a Nats-Request-Info value ("" for
// an empty value). A value that does not parse is refused FORBIDDEN: it
// was stamped by a NATS server, so it cannot be trusted to mean anything
// else.
func CallerOf(requestInfo []byte) (Caller, error) {
	if len(requestInfo) == 0 {
		return "", nil
	}
	if acc, ok := scanAccount(requestInfo); ok {
		return Caller(acc), nil
	}
	var ci struct {
		Account string `json:"acc"`
	}
	if err := json.Unmarshal(requestInfo, &ci); err != nil || ci.Account == "" {
		return "", api.Errorf(api.CodeForbidden, "the request's %s does not name an account", HeaderRequestInfo)
	}
	return Caller(ci.Account), nil
}

// scanAccount finds the "acc" member of a JSON object without decoding it
// (every request through an import carries one: this is on the produce
// path). It trusts only the plain shape NATS writes: no backslash anywhere
// (so no escaped quote or key), the key once whatever its case (Go's
// decoder matches keys case-insensitively, the last one winning), preceded
// by '{' or ',', a valid UTF-8 value without control characters. Otherwise
// it reports false and the caller decodes the JSON.
func scanAccount(b []byte) (string, bool) {
	const key = `"acc":"`
	if bytes.IndexByte(b, '\\') >= 0 || countFold(b, `"acc"`) != 1 {
		return "", false
	}
	i := bytes.Index(b, []byte(key))
	if i < 1 || (b[i-1] != '{' && b[i-1] != ',') {
		return "", false
	}
	v := b[i+len(key):]
	end := bytes.IndexByte(v, '"')
	if end <= 0 || !utf8.Valid(v[:end]) || bytes.ContainsFunc(v[:end], func(r rune) bool { return r < 0x20 }) {
		return "", false
	}
	return string(v[:end]), true
}

// countFold counts the ASCII-case-insensitive occurrences of s in b.
func countFold(b []byte, s string) int {
	n := 0
	for i := 0; i+len(s) <= len(b); i++ {
		if b[i] == s[0] && bytes.EqualFold(b[i:i+len(s)], []byte(s)) {
			n++
		}
	}
	return n
}

// privileged reports whether c may do anything.
func (p Policy) privileged(c Caller) bool {
	return c == "" || string(c) == p.BraidAccount || (p.OperatorAccount != "" && string(c) == p.OperatorAccount)
}

// Tenant returns the tenant c may address alone, or "" when c may address
// every tenant.
func (p Policy) Tenant(c Caller) string {
	if p.privileged(c) {
		return ""
	}
	if t, ok := p.Tenants[string(c)]; ok {
		return t
	}
	return string(c)
}

// Data authorizes a request on a per-topic or per-tenant subject (produce,
// consume, queue, read, layout) whose tenant token is tenant.
func (p Policy) Data(c Caller, tenant string) error {
	if own := p.Tenant(c); own != "" && own != tenant {
		return api.Errorf(api.CodeForbidden, "account %s may address tenant %s only, not %s", c, own, tenant)
	}
	return nil
}

// operatorOps are the admin operations of the operator alone.
var operatorOps = map[string]bool{
	api.AdminTenantCreate: true,
	api.AdminTenantDelete: true,
	api.AdminNodeDrain:    true,
	api.AdminNodeList:     true,
}

// Admin authorizes admin operation op (e.g. "topic.create") with request
// body body. A tenant may run every operation but the operator's on
// names of its own tenant: the body's "topic" (a URI), "namespace"
// (tenant/namespace) and "tenant" must all be of its tenant, and name at
// least one. tenant.list is allowed (the caller filters it: Tenant).
func (p Policy) Admin(c Caller, op string, body []byte) error {
	own := p.Tenant(c)
	if own == "" {
		return nil
	}
	if operatorOps[op] {
		return api.Errorf(api.CodeForbidden, "%s is the operator account's to do, not tenant %s's (account %s)", op, own, c)
	}
	if op == api.AdminTenantList {
		return nil
	}
	tenants, err := namedTenants(body)
	if err != nil {
		return err
	}
	if len(tenants) == 0 {
		return api.Errorf(api.CodeForbidden, "%s names no topic, namespace or tenant of tenant %s (account %s)", op, own, c)
	}
	for _, t := range tenants {
		if t != own {
			return api.Errorf(api.CodeForbidden, "account %s may manage tenant %s only, not %s", c, own, t)
		}
	}
	return nil
}

// namedTenants returns the tenants an admin body names in its "topic",
// "namespace" and "tenant" fields. Names that do not parse are refused
// here (BAD_REQUEST / INVALID_NAME) as the operation itself would.
func namedTenants(body []byte) ([]string, error) {
	var named struct {
		Topic     *string `json:"topic"`
		Namespace *string `json:"namespace"`
		Tenant    *string `json:"tenant"`
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, nil
	}
	if err := json.Unmarshal(body, &named); err != nil {
		return nil, api.Errorf(api.CodeBadRequest, "the request body is not a JSON object: %v", err)
	}
	var out []string
	if named.Topic != nil {
		t, err := routing.ParseTopic(*named.Topic)
		if err != nil {
			return nil, api.Errorf(api.CodeInvalidName, "topic: %v", err)
		}
		out = append(out, t.Tenant)
	}
	if named.Namespace != nil {
		ns, err := routing.ParseNamespace(*named.Namespace)
		if err != nil {
			return nil, api.Errorf(api.CodeInvalidName, "namespace: %v", err)
		}
		out = append(out, ns.Tenant)
	}
	if named.Tenant != nil {
		out = append(out, *named.Tenant)
	}
	return out, nil
}
