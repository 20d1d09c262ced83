package api

// Admin request and reply bodies (JSON). Topics are named by URI
// ("topic://tenant/namespace/name"), namespaces as "tenant/namespace".

// TenantCreateRequest is the body of tenant.create.
type TenantCreateRequest struct {
	Tenant string `json:"tenant"`
}

// NamespaceCreateRequest is the body of namespace.create.
type NamespaceCreateRequest struct {
	Namespace string    `json:"namespace"`
	Policies  *Policies `json:"policies,omitempty"`
	// TopicBuckets spreads the namespace's topic metadata over N key-value
	// buckets (DESIGN.md §4). Default 1; immutable after creation.
	TopicBuckets int `json:"topic_buckets,omitempty"`
}

// NamespaceListRequest is the body of namespace.list.
type NamespaceListRequest struct {
	Tenant string `json:"tenant"`
}

// TopicCreateRequest is the body of topic.create.
type TopicCreateRequest struct {
	Topic string `json:"topic"`
	// Segments is the initial number of segments (default 1).
	Segments int `json:"segments,omitempty"`
	// Buckets is the entry-bucket budget spread over the initial segments,
	// at least one per segment (default: the policy's entry_bucket_budget, 4).
	Buckets int `json:"buckets,omitempty"`
	// Partitions is the partition count of a fixed topic
	// (persistent://...; default 1, a non-partitioned topic); scalable
	// topics take segments and buckets instead.
	Partitions int       `json:"partitions,omitempty"`
	Policies   *Policies `json:"policies,omitempty"`
}

// TopicRequest names one topic: topic.describe, topic.delete, topic.stats.
type TopicRequest struct {
	Topic string `json:"topic"`
}

// Page sizes of topic.list.
const (
	TopicListDefaultLimit = 1000
	TopicListMaxLimit     = 10000
)

// TopicListRequest is the body of topic.list: one page of the topics of a
// namespace, in a stable order (by the namespace's topic bucket, then by
// name), each topic once.
type TopicListRequest struct {
	Namespace string `json:"namespace"`
	// Limit is the most topics in the reply, in [1, TopicListMaxLimit];
	// 0 is TopicListDefaultLimit.
	Limit int `json:"limit,omitempty"`
	// Cursor is the Next of the previous page (empty: the first page).
	// It is opaque.
	Cursor string `json:"cursor,omitempty"`
}

// TopicListReply is one page of topic URIs (see TopicListRequest).
type TopicListReply struct {
	Topics []string `json:"topics"`
	// Next is the cursor of the next page; empty when this is the last.
	Next string `json:"next,omitempty"`
	// Count is the number of topics of the whole namespace, kept apart
	// from the records: it can be off by a few after crashes of the
	// server in a topic create or delete, and does not count topics
	// created before counts were kept.
	Count int64 `json:"count"`
}

// NameListReply lists tenant or namespace names, sorted.
type NameListReply struct {
	Names []string `json:"names"`
}

// SplitRequest is the body of topic.split. At, when set, is the first key
// hash of the upper child ("0x..." hex or decimal); the default is the
// midpoint of the segment's range.
type SplitRequest struct {
	Topic   string  `json:"topic"`
	Segment *uint64 `json:"segment"`
	At      string  `json:"at,omitempty"`
}

// PartitionsRequest is the body of topic.partitions: a fixed topic's new
// partition count, above the one it has (partitions are never removed).
// Keys remap (hash % the new count): a key's order across the change is
// not kept.
type PartitionsRequest struct {
	Topic      string `json:"topic"`
	Partitions int    `json:"partitions"`
}

// MigrateRequest is the body of topic.migrate: a fixed topic
// (persistent://t/ns/name) becomes the scalable topic://t/ns/name in place,
// irreversibly. Its N partitions become sealed parent segments that keep
// their logs where they are, and N active children of equal ranges
// (Buckets each, default 1) take the appends; subscriptions keep their
// positions. Force migrates even while clients address partitions
// explicitly (producers naming Braid-Partition, readers of one partition).
type MigrateRequest struct {
	Topic   string `json:"topic"`
	Buckets int    `json:"buckets,omitempty"`
	Force   bool   `json:"force,omitempty"`
}

// MergeRequest is the body of topic.merge: two adjacent active segments.
type MergeRequest struct {
	Topic    string   `json:"topic"`
	Segments []uint64 `json:"segments"`
}

// RebucketRequest is the body of topic.rebucket.
type RebucketRequest struct {
	Topic   string  `json:"topic"`
	Segment *uint64 `json:"segment"`
	Buckets int     `json:"buckets"`
}

// OKReply is the reply of operations that return nothing else.
type OKReply struct {
	OK bool `json:"ok"`
}

// SegmentInfo is one segment of a TopicDescription.
type SegmentInfo struct {
	ID           uint64    `json:"id"`
	State        string    `json:"state"`
	Range        [2]string `json:"range"`
	Parents      []uint64  `json:"parents"`
	Children     []uint64  `json:"children"`
	Buckets      int       `json:"buckets"`
	CreatedEpoch uint64    `json:"created_epoch"`
	SealedEpoch  uint64    `json:"sealed_epoch,omitempty"`
	Partition    *int      `json:"partition,omitempty"`
	// Owner is the id of the node that holds and serves the segment
	// (absent for segments of layouts written before nodes had ids).
	Owner string `json:"owner,omitempty"`
	// Replicas are the nodes that hold a copy of each of its bucket logs,
	// the owner (their raft groups' leader while it lives) first; absent
	// for a segment of one copy.
	Replicas []ReplicaInfo `json:"replicas,omitempty"`
}

// ReplicaInfo is one copy of a replicated segment: a node and its data
// directory's incarnation (the same node back with another directory
// holds no copy).
type ReplicaInfo struct {
	Node        string `json:"node"`
	Incarnation string `json:"incarnation"`
}

// TopicDescription is the reply of topic.create, topic.describe, split,
// merge and rebucket, and the body of the layout push: the topic's DAG.
type TopicDescription struct {
	Topic    string        `json:"topic"`
	Epoch    uint64        `json:"epoch"`
	NextID   uint64        `json:"next_id"`
	Segments []SegmentInfo `json:"segments"`
	Policies *Policies     `json:"policies,omitempty"`
	// EffectivePolicies is what every policy resolves to (topic, then
	// namespace, then broker default); set by topic.describe.
	EffectivePolicies *Policies `json:"effective_policies,omitempty"`
}

// BucketStats is the state of one entry bucket in topic.stats.
type BucketStats struct {
	Segment     uint64 `json:"segment"`
	Bucket      int    `json:"bucket"`
	State       string `json:"state"`
	FirstOffset uint64 `json:"first_offset"`
	NextOffset  uint64 `json:"next_offset"`
	Bytes       int64  `json:"bytes"`
	// Owner is the node that holds the bucket's log when it is not the
	// node that answered (a sealed segment of a node that was lost or
	// drained); Unavailable says that node did not answer (the offsets
	// and bytes are then unknown).
	Owner       string `json:"owner,omitempty"`
	Unavailable bool   `json:"unavailable,omitempty"`
	// TierBytes and TierFiles are what the remote tier holds of the
	// bucket (offloaded files; FirstOffset counts them). LocalFirstOffset
	// is the first offset on local disk when the tier holds older ones.
	TierBytes        int64  `json:"tier_bytes,omitempty"`
	TierFiles        int    `json:"tier_files,omitempty"`
	LocalFirstOffset uint64 `json:"local_first_offset,omitempty"`
}

// SubscriptionStats is one subscription in topic.stats.
type SubscriptionStats struct {
	Name      string   `json:"name"`
	Kind      string   `json:"kind,omitempty"` // "queue" for a queue subscription; absent for a stream one
	Consumers []string `json:"consumers"`
	Backlog   uint64   `json:"backlog"`
	Drained   []uint64 `json:"drained"`
	// ReadCompacted: a stream subscription reading the compacted view.
	ReadCompacted bool `json:"read_compacted,omitempty"`
}

// TopicStats is the reply of topic.stats.
type TopicStats struct {
	Topic         string              `json:"topic"`
	Epoch         uint64              `json:"epoch"`
	Messages      uint64              `json:"messages"`
	Bytes         int64               `json:"bytes"`
	TierBytes     int64               `json:"tier_bytes,omitempty"`
	Storage       *StorageStats       `json:"storage,omitempty"`
	Buckets       []BucketStats       `json:"buckets"`
	Subscriptions []SubscriptionStats `json:"subscriptions"`
	// Load is each active segment's load as the topic's scaler last
	// measured it (about every evaluation interval; absent before the
	// first evaluation and while the topic is quiet and settled).
	Load []SegmentLoad `json:"load,omitempty"`
}

// SegmentLoad is the load of one active segment: short moving averages of
// messages and key and payload bytes appended (in) and read by
// subscribers (out) per second, and its heaviest key with the share of
// the appends it carries.
type SegmentLoad struct {
	Segment     uint64  `json:"segment"`
	MsgInRate   float64 `json:"msg_in_rate"`
	MsgOutRate  float64 `json:"msg_out_rate"`
	ByteInRate  float64 `json:"byte_in_rate"`
	ByteOutRate float64 `json:"byte_out_rate"`
	// HotKey is the heaviest key (its first 64 bytes; "0x" and hex when it
	// is not printable UTF-8), HotKeyHash its routing hash, HotKeyShare
	// the share (0-1) of the segment's appends it carries; absent when no
	// keyed append was seen.
	HotKey      string  `json:"hot_key,omitempty"`
	HotKeyHash  string  `json:"hot_key_hash,omitempty"`
	HotKeyShare float64 `json:"hot_key_share,omitempty"`
}

// HotKeyLabel names the heaviest key: the key, else its hash ("" when
// none was seen).
func (l SegmentLoad) HotKeyLabel() string {
	if l.HotKey != "" {
		return l.HotKey
	}
	return l.HotKeyHash
}

// StorageStats is what the storage worker did to a topic's logs on the
// node that answered, since the topic became active there.
type StorageStats struct {
	FilesRolled      uint64 `json:"files_rolled"`
	FilesRemoved     uint64 `json:"files_removed"`
	BytesRemoved     uint64 `json:"bytes_removed"`
	HeadTrims        uint64 `json:"head_trims"`
	FilesOffloaded   uint64 `json:"files_offloaded"`
	BytesOffloaded   uint64 `json:"bytes_offloaded"`
	TierFilesRemoved uint64 `json:"tier_files_removed"`
	Errors           uint64 `json:"errors"`
	// LastPass is when the worker last visited the topic (RFC 3339).
	LastPass string `json:"last_pass,omitempty"`
}

// CompactionStatus is the reply of topic.compact and topic.compaction: the
// compaction running on the topic's node, and the last one recorded.
type CompactionStatus struct {
	Topic     string `json:"topic"`
	Running   bool   `json:"running"`
	Phase     string `json:"phase,omitempty"` // queued, deciding, writing, done, failed
	Started   string `json:"started,omitempty"`
	UnitsDone int    `json:"units_done,omitempty"`
	Units     int    `json:"units,omitempty"`
	Error     string `json:"error,omitempty"`
	// The last compaction recorded: its generation (0: none yet), when it
	// finished, the keys it found, the records it read below the horizons
	// and kept, the bytes of the units' logs and of their compacted logs,
	// its duration, its passes over the records, and each unit's horizon.
	Generation  uint64           `json:"generation"`
	Finished    string           `json:"finished,omitempty"`
	Keys        int              `json:"keys"`
	Read        uint64           `json:"read"`
	Kept        uint64           `json:"kept"`
	BytesBefore int64            `json:"bytes_before"`
	BytesAfter  int64            `json:"bytes_after"`
	DurationMs  int64            `json:"duration_ms"`
	Passes      int              `json:"passes"`
	Horizons    []CompactionUnit `json:"horizons,omitempty"`
}

// CompactionUnit is a unit's compaction horizon: its offsets below it are
// read compacted.
type CompactionUnit struct {
	Segment uint64 `json:"segment"`
	Bucket  int    `json:"bucket"`
	Horizon uint64 `json:"horizon"`
	Kept    uint64 `json:"kept"`
}

// ProduceReply is the reply of produce one.
type ProduceReply struct {
	Segment uint64 `json:"segment"`
	Bucket  int    `json:"bucket"`
	Offset  uint64 `json:"offset"`
}
