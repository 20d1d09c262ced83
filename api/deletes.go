package api

// Deleting tenants and namespaces: braid.v1.admin.namespace.delete
// ({"namespace":"t/ns"}, refused INVALID_ARGUMENT while it holds a topic)
// and braid.v1.admin.tenant.delete ({"tenant":"t"}, the operator's; refused
// while it holds a namespace). Both answer {"ok":true}.
const (
	AdminNamespaceDelete = "namespace.delete"
	AdminTenantDelete    = "tenant.delete"
)
