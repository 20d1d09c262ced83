package authz

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/routing"
)

var policy = Policy{BraidAccount: "BRAID", OperatorAccount: "OPS"}

func TestCallerOf(t *testing.T) {
	t.Parallel()
	c, err := CallerOf([]byte(`{"acc":"acme","rtt":1234}`))
	if err != nil || c != "acme" {
		t.Fatalf("CallerOf = %q, %v", c, err)
	}
	if c, err := CallerOf(nil); err != nil || c != "" {
		t.Fatalf("no header: %q, %v", c, err)
	}
	// The scan and the decoder agree, tricky members included.
	for in, want := range map[string]Caller{
		`{"acc":"acme","rtt":1}`:                    "acme",
		`{"start":"x","acc":"globex"}`:              "globex",
		`{"x\"acc":"evil","acc":"acme"}`:            "acme",
		`{"acc":"a\u0062c"}`:                        "abc",
		`{"acc":"first","acc":"second"}`:            "second",
		`{"name":"\",\"acc\":\"evil","acc":"acme"}`: "acme",
	} {
		if c, err := CallerOf([]byte(in)); err != nil || c != want {
			t.Errorf("CallerOf(%s) = %q, %v; want %q", in, c, err, want)
		}
	}
	for _, bad := range []string{`{}`, `not json`, `{"acc":""}`, `{"acc":5}`} {
		if _, err := CallerOf([]byte(bad)); !errors.Is(err, api.ErrForbidden) {
			t.Errorf("CallerOf(%s) = %v, want FORBIDDEN", bad, err)
		}
	}
}

func TestAdmin(t *testing.T) {
	t.Parallel()
	cases := []struct {
		caller Caller
		op     string
		body   string
		ok     bool
	}{
		{"", api.AdminTenantCreate, `{"tenant":"x"}`, true},
		{"BRAID", api.AdminNodeDrain, `{"node":"n1"}`, true},
		{"OPS", api.AdminTopicDelete, `{"topic":"topic://globex/ns/t"}`, true},
		{"acme", api.AdminTopicCreate, `{"topic":"topic://acme/ns/t","segments":2}`, true},
		{"acme", api.AdminTopicCreate, `{"topic":"persistent://acme/ns/t","partitions":2}`, true},
		{"acme", api.AdminTopicDelete, `{"topic":"topic://globex/ns/t"}`, false},
		{"acme", api.AdminTopicDelete, `{"topic":"topic://acme/ns/t","namespace":"globex/ns"}`, false},
		{"acme", api.AdminNamespaceCreate, `{"namespace":"acme/orders"}`, true},
		{"acme", api.AdminNamespaceCreate, `{"namespace":"globex/orders"}`, false},
		{"acme", api.AdminNamespaceList, `{"tenant":"acme"}`, true},
		{"acme", api.AdminNamespaceList, `{"tenant":"globex"}`, false},
		{"acme", api.AdminTenantCreate, `{"tenant":"acme"}`, false},
		{"acme", api.AdminTenantDelete, `{"tenant":"acme"}`, false},
		{"acme", api.AdminNamespaceDelete, `{"namespace":"acme/orders"}`, true},
		{"acme", api.AdminNamespaceDelete, `{"namespace":"globex/orders"}`, false},
		{"acme", api.AdminNodeDrain, `{"node":"n1"}`, false},
		{"acme", api.AdminNodeList, ``, false},
		{"acme", api.AdminTenantList, ``, true},
		{"acme", api.AdminTopicStats, `{}`, false},
		{"acme", api.AdminTopicStats, ``, false},
		{"acme", api.AdminTopicStats, `{"topic":"topic://globex/ns/t","TOPIC":"topic://acme/ns/t"}`, true}, // the last wins, as in the operation
		{"acme", api.AdminNamespacePolicies, `{"namespace":"acme/ns","policies":{}}`, true},
		{"OPS2", api.AdminTopicDescribe, `{"topic":"topic://OPS/ns/t"}`, false},
	}
	for _, c := range cases {
		err := policy.Admin(c.caller, c.op, []byte(c.body))
		if c.ok && err != nil || !c.ok && !errors.Is(err, api.ErrForbidden) {
			t.Errorf("%q %s %s: %v, want allowed %v", c.caller, c.op, c.body, err, c.ok)
		}
	}
	// A body that is no JSON object is a bad request, whoever asks.
	if err := policy.Admin("acme", api.AdminTopicDelete, []byte(`[1]`)); !errors.Is(err, api.ErrBadRequest) {
		t.Errorf("array body: %v", err)
	}
}

func TestData(t *testing.T) {
	t.Parallel()
	if err := policy.Data("acme", "acme"); err != nil {
		t.Fatal(err)
	}
	if err := policy.Data("acme", "globex"); !errors.Is(err, api.ErrForbidden) {
		t.Fatalf("acme on globex: %v", err)
	}
	for _, c := range []Caller{"", "BRAID", "OPS"} {
		if err := policy.Data(c, "globex"); err != nil {
			t.Fatalf("%q: %v", c, err)
		}
	}
	// An account mapped to its tenant (JWTs: accounts are public keys).
	mapped := Policy{BraidAccount: "BRAID", Tenants: map[string]string{"AKEY": "acme"}}
	if err := mapped.Data("AKEY", "acme"); err != nil {
		t.Fatal(err)
	}
	if err := mapped.Data("AKEY", "AKEY"); !errors.Is(err, api.ErrForbidden) {
		t.Fatalf("a mapped account on its key's name: %v", err)
	}
	// Without an operator account, an account named "" is not the
	// operator.
	if err := (Policy{BraidAccount: "BRAID"}).Data("x", "y"); !errors.Is(err, api.ErrForbidden) {
		t.Fatalf("no operator account: %v", err)
	}
}

// FuzzAdmin checks, for any caller and body, that an admin request a
// tenant account is allowed names only its own tenant as the operations
// read their bodies (api's request types), and never is an operation of
// the operator.
func FuzzAdmin(f *testing.F) {
	f.Add("acme", api.AdminTopicCreate, `{"topic":"topic://acme/ns/t"}`)
	f.Add("acme", api.AdminTopicDelete, `{"topic":"topic://globex/ns/t","Topic":"topic://acme/ns/t"}`)
	f.Add("globex", api.AdminNamespaceCreate, `{"namespace":"acme/x","tenant":"globex"}`)
	f.Add("acme", api.AdminTenantCreate, `{"tenant":"acme"}`)
	f.Add("OPS", api.AdminNodeDrain, `{}`)
	f.Add("acme", api.AdminTopicPolicies, `{"topic":"topic://acme/ns/t","namespace":null}`)
	f.Fuzz(func(t *testing.T, caller, op, body string) {
		err := policy.Admin(Caller(caller), op, []byte(body))
		if err != nil {
			var ae *api.Error
			if !errors.As(err, &ae) {
				t.Fatalf("error without a code: %v", err)
			}
			return
		}
		own := policy.Tenant(Caller(caller))
		if own == "" {
			return
		}
		if operatorOps[op] {
			t.Fatalf("tenant %s allowed operator operation %s", own, op)
		}
		if op == api.AdminTenantList {
			return
		}
		// What the operations decode.
		var topic api.TopicRequest
		var ns api.NamespaceCreateRequest
		var tenant api.NamespaceListRequest
		_ = json.Unmarshal([]byte(body), &topic)
		_ = json.Unmarshal([]byte(body), &ns)
		_ = json.Unmarshal([]byte(body), &tenant)
		named := 0
		if topic.Topic != "" {
			if tn, err := routing.ParseTopic(topic.Topic); err == nil {
				named++
				if tn.Tenant != own {
					t.Fatalf("tenant %s allowed %s on topic %s: %s", own, op, topic.Topic, body)
				}
			}
		}
		if ns.Namespace != "" {
			if n, err := routing.ParseNamespace(ns.Namespace); err == nil {
				named++
				if n.Tenant != own {
					t.Fatalf("tenant %s allowed %s on namespace %s: %s", own, op, ns.Namespace, body)
				}
			}
		}
		if tenant.Tenant != "" {
			named++
			if tenant.Tenant != own {
				t.Fatalf("tenant %s allowed %s on tenant %s: %s", own, op, tenant.Tenant, body)
			}
		}
		if named == 0 {
			t.Fatalf("tenant %s allowed %s naming no name of its own: %s", own, op, body)
		}
	})
}

// FuzzCallerOf checks that the scan never disagrees with the JSON decoder.
func FuzzCallerOf(f *testing.F) {
	for _, s := range []string{`{"acc":"acme"}`, `{"x\"acc":"evil","acc":"acme"}`, `{"acc":"a","acc":"b"}`, `{"acc":"\""}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		acc, ok := scanAccount([]byte(in))
		if !ok {
			return
		}
		var ci struct {
			Account string `json:"acc"`
		}
		if err := json.Unmarshal([]byte(in), &ci); err != nil {
			return // not JSON: the server never sends it; the scan's answer is moot
		}
		if ci.Account != acc {
			t.Fatalf("scan %q, decoder %q of %s", acc, ci.Account, in)
		}
	})
}
