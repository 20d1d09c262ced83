package node

import (
	"strings"
	"testing"

	"github.com/braidmq/braid/api"
)

// A missing topic is BAD_REQUEST; a bad name is INVALID_NAME; neither
// names a Go package or type.
func TestAdminErrorsSpeakToUsers(t *testing.T) {
	n, nc := startNode(t, t.TempDir())
	defer stopNode(t, n, nc)
	for _, op := range []string{api.AdminTopicDescribe, api.AdminTopicDelete, api.AdminTopicStats, api.AdminTopicCreate} {
		body := map[string]any{}
		if op == api.AdminTopicCreate {
			body["segments"] = 2
		}
		e := admin(t, nc, op, body, nil)
		if e == nil || e.Code != api.CodeBadRequest || !strings.Contains(e.Message, `missing "topic"`) {
			t.Errorf("%s without a topic: %v, want BAD_REQUEST", op, e)
		}
	}
	e := admin(t, nc, api.AdminTopicCreate, map[string]any{"topic": "topic://public/default/bad name"}, nil)
	if e == nil || e.Code != api.CodeInvalidName || strings.Contains(e.Message, "braid/") {
		t.Errorf("bad name: %v", e)
	}
	e = admin(t, nc, api.AdminTopicPolicies, map[string]any{"topic": "topic://public/default/x", "policies": map[string]any{"auto_scale": "yes"}}, nil)
	if e == nil || e.Code != api.CodeBadRequest || !strings.Contains(e.Message, "a boolean") || strings.Contains(e.Message, "Go struct") {
		t.Errorf("policy of the wrong type: %v", e)
	}
	e = admin(t, nc, api.AdminTopicDescribe, map[string]any{"topic": "topic://public/default/x", "extra": 1}, nil)
	if e == nil || e.Code != api.CodeBadRequest || strings.Contains(e.Message, "json:") {
		t.Errorf("an unknown field: %v", e)
	}
}

// Deleting a tenant or a namespace that does not exist answers the codes
// every other operation answers for them; one that is not empty is
// refused and stays.
func TestDeletesOfMissingTenantsAndNamespaces(t *testing.T) {
	n, nc := startNode(t, t.TempDir())
	defer stopNode(t, n, nc)
	for _, c := range []struct {
		op   string
		body map[string]any
		want api.Code
	}{
		{api.AdminTenantDelete, map[string]any{"tenant": "nope"}, api.CodeTenantNotFound},
		{api.AdminNamespaceDelete, map[string]any{"namespace": "public/nope"}, api.CodeNamespaceMissing},
		{api.AdminNamespaceDelete, map[string]any{"namespace": "nope/nope"}, api.CodeNamespaceMissing},
		{api.AdminTenantDelete, map[string]any{"tenant": "public"}, api.CodeInvalidArgument},
	} {
		if e := admin(t, nc, c.op, c.body, nil); e == nil || e.Code != c.want {
			t.Errorf("%s %v: %v, want %s", c.op, c.body, e, c.want.Symbol)
		}
	}
	var names api.NameListReply
	mustAdmin(t, nc, api.AdminTenantList, map[string]any{}, &names)
	if len(names.Names) != 1 || names.Names[0] != "public" {
		t.Fatalf("tenants after the refusals: %v", names.Names)
	}
}
