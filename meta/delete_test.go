package meta

import (
	"context"
	"errors"
	"testing"

	"github.com/braidmq/braid/routing"
	"github.com/braidmq/braid/topology"
)

// A namespace is deleted only when empty, a tenant only without
// namespaces; what is refused stays.
func TestDeleteNamespaceAndTenant(t *testing.T) {
	s := openStore(t)
	ctx := context.Background()
	if err := s.CreateTenant(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	ns := routing.NamespaceName{Tenant: "acme", Namespace: "orders"}
	if err := s.CreateNamespace(ctx, NamespaceRecord{Tenant: "acme", Namespace: "orders"}); err != nil {
		t.Fatal(err)
	}
	name := routing.TopicName{Scheme: routing.SchemeScalable, Tenant: "acme", Namespace: "orders", Name: "t"}
	l, err := topology.New(1, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateTopic(ctx, name, TopicRecord{Layout: l}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteTenant(ctx, "acme"); !errors.Is(err, ErrNotEmpty) {
		t.Fatalf("delete of a tenant with a namespace: %v", err)
	}
	if err := s.DeleteNamespace(ctx, ns); !errors.Is(err, ErrNotEmpty) {
		t.Fatalf("delete of a namespace with a topic: %v", err)
	}
	if _, err := s.Namespace(ctx, ns); err != nil {
		t.Fatalf("the refused delete changed the namespace: %v", err)
	}
	if err := s.DeleteTopic(ctx, name); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteNamespace(ctx, ns); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a second delete: %v", err)
	}
	if err := s.DeleteTenant(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	if names, _ := s.Tenants(ctx); len(names) != 0 {
		t.Fatalf("tenants after the delete: %v", names)
	}
	// Created again from scratch, with a count of zero.
	if err := s.CreateTenant(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateNamespace(ctx, NamespaceRecord{Tenant: "acme", Namespace: "orders"}); err != nil {
		t.Fatal(err)
	}
	if n, err := s.TopicCount(ctx, ns); err != nil || n != 0 {
		t.Fatalf("count of the new namespace: %d, %v", n, err)
	}
}
