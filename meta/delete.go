package meta

import (
	"context"
	"errors"
	"fmt"

	"github.com/braidmq/braid/routing"
)

// ErrNotEmpty is returned by DeleteNamespace of a namespace that holds
// topics and by DeleteTenant of a tenant that holds namespaces.
var ErrNotEmpty = errors.New("braid/meta: not empty")

// DeleteNamespace deletes an empty namespace's record and its topic
// count; ErrNotFound if absent, ErrNotEmpty while it holds a topic. A
// topic created in it at the same moment may outlive it (its record reads
// the namespace first); it then shows in no listing but by its URI.
func (s *Store) DeleteNamespace(ctx context.Context, ns routing.NamespaceName) error {
	if _, err := s.Namespace(ctx, ns); err != nil {
		return err
	}
	uris, _, err := s.TopicsPage(ctx, ns, "", 1)
	if err != nil {
		return err
	}
	if len(uris) > 0 {
		n, _ := s.TopicCount(ctx, ns)
		return fmt.Errorf("%w: namespace %s holds topics (%d counted), %s among them: delete them first", ErrNotEmpty, ns, n, uris[0])
	}
	if err := s.purgeTopic(ctx, namespaceKey(ns.Tenant, ns.Namespace)); err != nil {
		return err
	}
	keys, err := s.keys(ctx, "count."+ns.Tenant+"."+ns.Namespace+".*")
	if err != nil {
		return nil // the namespace is gone; its count shards are only numbers
	}
	for _, k := range keys {
		_ = s.kv.Purge(ctx, k)
	}
	return nil
}

// DeleteTenant deletes an empty tenant; ErrNotFound if absent, ErrNotEmpty
// while it holds a namespace.
func (s *Store) DeleteTenant(ctx context.Context, tenant string) error {
	if _, err := s.Tenant(ctx, tenant); err != nil {
		return err
	}
	nss, err := s.Namespaces(ctx, tenant)
	if err != nil {
		return err
	}
	if len(nss) > 0 {
		return fmt.Errorf("%w: tenant %s holds namespaces %v: delete them first", ErrNotEmpty, tenant, nss)
	}
	return s.purgeTopic(ctx, tenantKey(tenant))
}
