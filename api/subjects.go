package api

import "strings"

// Subject prefixes and verbs of the wire contract (see the package doc).
const (
	Prefix             = "braid.v1"
	ProducePrefix      = Prefix + ".produce"
	ProduceBatchPrefix = Prefix + ".produce-batch"
	// ProduceMultiPrefix is followed by one token, the tenant: a request
	// holds batches for any topics of that tenant (see AppendMultiPart).
	ProduceMultiPrefix = Prefix + ".produce-multi"
	AdminPrefix        = Prefix + ".admin"
	LayoutPrefix       = Prefix + ".layout"
	ConsumePrefix      = Prefix + ".consume"

	// Request headers of produce one.
	HeaderKey  = "Braid-Key"
	HeaderTime = "Braid-Time"
	// HeaderEpoch, optional on produce one and produce batch, is the layout
	// epoch the producer routed the request by. With it, a keyed record
	// that meets a seal, or whose key belongs in the server's layout to a
	// segment created after that epoch, is refused with SEGMENT_SEALED:
	// the producer's layout is stale for that key, and it refreshes it and
	// resends the records it holds for the key in order. Without it the
	// server absorbs layout changes itself (see the package doc).
	HeaderEpoch = "Braid-Epoch"
	// HeaderPartition, optional on produce one and produce batch of a
	// fixed topic (persistent://...), names the partition the records go
	// to whatever their keys; refused (INVALID_ARGUMENT) for a partition
	// the topic does not have and for a scalable or migrated topic.
	HeaderPartition = "Braid-Partition"

	// ServiceName is the micro-service name the endpoints register under.
	ServiceName    = "braid"
	ServiceVersion = "0.1.0"
)

// Consume verbs: braid.v1.consume.<verb>.<tenant>.<namespace>.<topic>.
const (
	ConsumeJoin  = "join"
	ConsumeFetch = "fetch"
	ConsumeAck   = "ack"
	ConsumeLeave = "leave"
)

// Admin objects and verbs: braid.v1.admin.<object>.<verb>.
const (
	AdminTenantCreate    = "tenant.create"
	AdminTenantList      = "tenant.list"
	AdminNamespaceCreate = "namespace.create"
	AdminNamespaceList   = "namespace.list"
	AdminTopicCreate     = "topic.create"
	AdminTopicDescribe   = "topic.describe"
	AdminTopicList       = "topic.list"
	AdminTopicSplit      = "topic.split"
	AdminTopicMerge      = "topic.merge"
	AdminTopicRebucket   = "topic.rebucket"
	AdminTopicDelete     = "topic.delete"
	AdminTopicStats      = "topic.stats"
	// AdminTopicVerify compares the replicas of a replicated topic's
	// bucket logs (TopicRequest -> TopicVerification).
	AdminTopicVerify = "topic.verify"
	// AdminTopicCompact starts a compaction (TopicRequest ->
	// CompactionStatus); AdminTopicCompaction reports it.
	AdminTopicCompact    = "topic.compact"
	AdminTopicCompaction = "topic.compaction"
	// AdminTopicPartitions grows a fixed topic's partitions
	// (PartitionsRequest -> TopicDescription); AdminTopicMigrate turns a
	// fixed topic into a scalable one in place (MigrateRequest ->
	// TopicDescription).
	AdminTopicPartitions = "topic.partitions"
	AdminTopicMigrate    = "topic.migrate"
	// Subscription management (subscriptions.go): list a topic's
	// subscriptions with their positions, delete one, move its cursors.
	AdminSubscriptionList   = "subscription.list"
	AdminSubscriptionDelete = "subscription.delete"
	AdminSubscriptionSeek   = "subscription.seek"
)

// AdminSubject is the subject of one admin operation, e.g. AdminSubject(AdminTopicSplit).
func AdminSubject(op string) string { return AdminPrefix + "." + op }

// TopicSubject joins a prefix with the three name tokens of a topic.
func TopicSubject(prefix, tenant, namespace, topic string) string {
	return strings.Join([]string{prefix, tenant, namespace, topic}, ".")
}

// ConsumeSubject is braid.v1.consume.<verb>.<tenant>.<namespace>.<topic>.
func ConsumeSubject(verb, tenant, namespace, topic string) string {
	return TopicSubject(ConsumePrefix+"."+verb, tenant, namespace, topic)
}

// TopicTokens returns the last three tokens of a per-topic subject
// (tenant, namespace, topic), or ok=false when the subject does not have
// exactly prefixTokens+3 tokens.
func TopicTokens(subject string, prefixTokens int) (tenant, namespace, topic string, ok bool) {
	parts := strings.Split(subject, ".")
	if len(parts) != prefixTokens+3 {
		return "", "", "", false
	}
	return parts[prefixTokens], parts[prefixTokens+1], parts[prefixTokens+2], true
}

// DirectPrefix starts the subjects that reach one node of a cluster:
// DirectSubject(node, subject) is subject served by node itself, for the
// topics whose layout names it the owner, without passing through the
// node that takes the clients' requests. A produce request there for a
// topic the node does not own (any more) is refused SEGMENT_SEALED with
// the layout epoch: refresh the layout and resend. The nodes forward
// requests to each other on the same subjects.
const DirectPrefix = "braid.fwd"

// DirectSubject is subject as node serves it itself (see DirectPrefix).
func DirectSubject(node, subject string) string { return DirectPrefix + "." + node + "." + subject }
