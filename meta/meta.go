// Package meta is Braid's metadata store: tenants, namespaces, topics (their
// layout and policies) and the subscription registry, kept in one NATS
// JetStream key-value bucket.
//
// It owns the key scheme and compare-and-swap on KV revisions, which is what
// fences a stale topic controller: a layout change is written with the
// revision the controller last read, so a controller that missed a change
// fails with ErrConflict instead of overwriting it. It does not own the
// layout rules (topology) or when changes happen (actors).
//
// Keys (every name is one [A-Za-z0-9_-] token, so keys are valid KV keys):
//
//	tenant.<tenant>                                   TenantRecord
//	ns.<tenant>.<namespace>                           NamespaceRecord
//	topic.<tenant>.<namespace>.<bucket>.<topic>       TopicRecord; bucket = routing.TopicBucket(name, topic_buckets)
//	sub.<tenant>.<namespace>.<topic>.<subscription>   SubscriptionRecord
//	count.<tenant>.<namespace>.<shard>                countRecord: one shard of the namespace's topic count; shard = routing.TopicBucket(name, countShards)
//
// The topic count of a namespace is the sum of its count shards (missing
// ones are 0): CreateTopic adds one and DeleteTopic takes one away, by
// compare and swap, so that topic.list can answer the count without
// listing (list.go). Sharding spreads concurrent creates over countShards
// records instead of racing on one.
//
// This package sits between routing and actors in DESIGN.md §6's list: it
// imports api, topology and routing and NATS, and is imported by actors,
// consumers' callers and cluster. (DESIGN.md puts "KV metadata" under
// cluster; it is its own package so actors can persist layouts without
// importing cluster.)
package meta

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/routing"
	"github.com/braidmq/braid/topology"
	"github.com/nats-io/nats.go/jetstream"
)

// Sentinel errors.
var (
	// ErrNotFound is returned when a record does not exist.
	ErrNotFound = errors.New("braid/meta: not found")
	// ErrExists is returned by a create of a record that exists.
	ErrExists = errors.New("braid/meta: already exists")
	// ErrConflict is returned by a compare-and-swap whose revision is stale:
	// someone else changed the record since it was read.
	ErrConflict = errors.New("braid/meta: revision conflict")
	// ErrCorrupt is returned (wrapped, with the key) when a stored record
	// does not decode or does not validate; and by a write of a record
	// that does not validate, which is then not written.
	ErrCorrupt = errors.New("braid/meta: invalid record")
	// ErrTimeout is returned (wrapped) when the store does not answer a
	// read or a listing within OpTimeout.
	ErrTimeout = errors.New("braid/meta: the metadata store did not answer in time")
)

// OpTimeout bounds every operation on the store whose context has no
// deadline of its own: a damaged store must fail a read, not hang it.
const OpTimeout = 10 * time.Second

// opTimeout is OpTimeout, but for tests.
var opTimeout = OpTimeout

func withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, opTimeout)
}

// timedOut marks err as ErrTimeout when ctx ran out.
func timedOut(ctx context.Context, err error) error {
	if ctx.Err() != nil && !errors.Is(err, ErrTimeout) {
		return fmt.Errorf("%w: %w", ErrTimeout, err)
	}
	return err
}

// DefaultBucket is the KV bucket name.
const DefaultBucket = "braid-meta"

// TenantRecord is a tenant.
type TenantRecord struct {
	Tenant  string    `json:"tenant"`
	Created time.Time `json:"created"`
}

// NamespaceRecord is a namespace and its policies.
type NamespaceRecord struct {
	Tenant       string        `json:"tenant"`
	Namespace    string        `json:"namespace"`
	TopicBuckets int           `json:"topic_buckets"`
	Policies     *api.Policies `json:"policies,omitempty"`
	Created      time.Time     `json:"created"`
}

// TopicRecord is a topic: its layout and policies.
type TopicRecord struct {
	Topic    string          `json:"topic"`
	Layout   topology.Layout `json:"layout"`
	Policies *api.Policies   `json:"policies,omitempty"`
	Created  time.Time       `json:"created"`
	// EpochTimes holds when each layout epoch was committed (unix ms), for
	// the epochs that segments not yet deleted were created or sealed in:
	// cooldowns run from a segment's creation, retention from its seal.
	EpochTimes map[uint64]int64 `json:"epoch_times,omitempty"`
	// Incarnation tells this topic from an earlier one of the same name:
	// its logs live in a directory of that name (empty for topics created
	// before incarnations, whose logs sit in the topic's directory).
	Incarnation string `json:"incarnation,omitempty"`
}

// Validate checks a topic record as stored under name: the name it
// carries, its layout (already checked by decoding) and its policies.
func (r TopicRecord) Validate(name routing.TopicName) error {
	if r.Topic != "" && r.Topic != name.String() {
		return fmt.Errorf("record of %s names topic %q", name, r.Topic)
	}
	if len(r.Layout.Segments) == 0 {
		return fmt.Errorf("record of %s has no segments", name)
	}
	if err := r.Layout.Validate(); err != nil {
		return fmt.Errorf("record of %s: %w", name, err)
	}
	if err := r.Policies.Validate(); err != nil {
		return fmt.Errorf("record of %s: %w", name, err)
	}
	if r.Incarnation != "" && !validIncarnation(r.Incarnation) {
		return fmt.Errorf("record of %s: incarnation %q is not a token of letters and digits", name, r.Incarnation)
	}
	return nil
}

func validIncarnation(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// SubscriptionRecord registers a subscription of a topic.
type SubscriptionRecord struct {
	Topic        string    `json:"topic"`
	Subscription string    `json:"subscription"`
	Kind         string    `json:"kind"`
	Created      time.Time `json:"created"`
	// Home is the node whose disk holds the group's log, in a cluster
	// (see GroupHome); with Replicas, the node that leads it.
	Home string `json:"home,omitempty"`
	// GroupGeneration, when its Generation is above 0, names the raft
	// group that replicates the group's log on Replicas (package
	// cluster); 0 is a log on Home's disk alone.
	GroupGeneration
	// Next, while set, is the generation being made: its replicas take
	// its raft messages before it is the record's.
	Next *GroupGeneration `json:"next,omitempty"`
}

// GroupGeneration is one raft group of a consumer group's state log: a
// new one, with the state as its first records, replaces the last at
// each compaction, and when its replicas should change.
type GroupGeneration struct {
	Generation uint64             `json:"generation,omitempty"`
	Replicas   []topology.Replica `json:"replicas,omitempty"`
}

// Store is the metadata store. It is safe for concurrent use.
type Store struct {
	kv jetstream.KeyValue
	// js and stream name the bucket's stream, for Leader.
	js     jetstream.JetStream
	stream string
	// buckets caches the topic_buckets of every namespace read: it is set
	// at the namespace's creation and never changes (its topics' keys
	// depend on it), and namespaces are not deleted, so the topic
	// operations need not read the namespace record each time.
	buckets sync.Map // routing.NamespaceName -> int
}

// topicBuckets is the topic_buckets of ns (ErrNotFound if ns does not
// exist), from the cache or its record.
func (s *Store) topicBuckets(ctx context.Context, ns routing.NamespaceName) (int, error) {
	if b, ok := s.buckets.Load(ns); ok {
		return b.(int), nil
	}
	rec, err := s.Namespace(ctx, ns)
	if err != nil {
		return 0, err
	}
	s.buckets.Store(ns, rec.TopicBuckets)
	return rec.TopicBuckets, nil
}

// Open creates or binds the KV bucket. replicas is the JetStream replica
// count (1 on a single node); an existing bucket is brought to it.
func Open(ctx context.Context, js jetstream.JetStream, bucket string, replicas int) (*Store, error) {
	if bucket == "" {
		bucket = DefaultBucket
	}
	if replicas < 1 {
		replicas = 1
	}
	_, err := js.KeyValue(ctx, bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		_, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket:      bucket,
			Description: "Braid metadata: tenants, namespaces, topic layouts, subscriptions",
			History:     1,
			Storage:     jetstream.FileStorage,
			Replicas:    replicas,
		})
		if errors.Is(err, jetstream.ErrBucketExists) {
			err = nil // another node created it meanwhile
		}
	}
	if err != nil {
		return nil, fmt.Errorf("braid/meta: open bucket %s: %w", bucket, err)
	}
	kv, err := settle(ctx, js, bucket, replicas)
	if err != nil {
		return nil, fmt.Errorf("braid/meta: open bucket %s: %w", bucket, err)
	}
	return &Store{kv: kv, js: js, stream: "KV_" + bucket}, nil
}

// Leader names the NATS server that leads the bucket's stream (in a
// cluster of embedded servers, a node id): while that server is away,
// JetStream elects another before any write lands. "" when JetStream
// does not say (a single server).
func (s *Store) Leader(ctx context.Context) (string, error) {
	if s.js == nil {
		return "", nil
	}
	stream, err := s.js.Stream(ctx, s.stream)
	if err != nil {
		return "", err
	}
	info, err := stream.Info(ctx)
	if err != nil || info.Cluster == nil {
		return "", err
	}
	return info.Cluster.Leader, nil
}

// settle brings the bucket's stream to replicas and, when replicated, to
// reads from its leader only, then binds it. A KV bucket allows direct
// reads, which any replica answers, and a follower may not have applied a
// write yet: a node that reads what another just wrote (a tenant it
// names, a layout it must route by) would find nothing, or an older
// revision.
func settle(ctx context.Context, js jetstream.JetStream, bucket string, replicas int) (jetstream.KeyValue, error) {
	stream, err := js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		return nil, err
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return nil, err
	}
	cfg := info.Config
	if cfg.Replicas != replicas || (replicas > 1 && cfg.AllowDirect) {
		cfg.Replicas = replicas
		if replicas > 1 {
			cfg.AllowDirect = false
		}
		if _, err := js.UpdateStream(ctx, cfg); err != nil {
			return nil, fmt.Errorf("setting %d replicas, direct reads %v: %w", replicas, cfg.AllowDirect, err)
		}
	}
	// Bound after: a bucket's handle picks direct or leader reads when made.
	return js.KeyValue(ctx, bucket)
}

func tenantKey(t string) string        { return "tenant." + t }
func namespaceKey(t, ns string) string { return "ns." + t + "." + ns }
func subKey(t routing.TopicName, sub string) string {
	return "sub." + t.Tenant + "." + t.Namespace + "." + t.Name + "." + sub
}

func topicKey(t routing.TopicName, buckets int) string {
	return fmt.Sprintf("topic.%s.%s.%d.%s", t.Tenant, t.Namespace, routing.TopicBucket(t, buckets), t.Name)
}

// countKey is the key of one shard of a namespace's topic count.
func countKey(ns routing.NamespaceName, shard int) string {
	return fmt.Sprintf("count.%s.%s.%d", ns.Tenant, ns.Namespace, shard)
}

func (s *Store) get(ctx context.Context, key string, v any) (uint64, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	e, err := s.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return 0, fmt.Errorf("%w: %s", ErrNotFound, key)
	}
	if err != nil {
		return 0, timedOut(ctx, fmt.Errorf("braid/meta: get %s: %w", key, err))
	}
	if err := json.Unmarshal(e.Value(), v); err != nil {
		return 0, fmt.Errorf("%w: %s: %v", ErrCorrupt, key, err)
	}
	return e.Revision(), nil
}

func (s *Store) create(ctx context.Context, key string, v any) (uint64, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return 0, err
	}
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	rev, err := s.kv.Create(ctx, key, b)
	if errors.Is(err, jetstream.ErrKeyExists) {
		return 0, fmt.Errorf("%w: %s", ErrExists, key)
	}
	if err != nil {
		return 0, timedOut(ctx, fmt.Errorf("braid/meta: create %s: %w", key, err))
	}
	return rev, nil
}

func (s *Store) update(ctx context.Context, key string, v any, rev uint64) (uint64, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return 0, err
	}
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	next, err := s.kv.Update(ctx, key, b, rev)
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return 0, fmt.Errorf("%w: %s at revision %d", ErrConflict, key, rev)
	}
	if err != nil {
		return 0, timedOut(ctx, fmt.Errorf("braid/meta: update %s: %w", key, err))
	}
	return next, nil
}

// keys lists the keys matching filter, within OpTimeout (a damaged store
// can leave a listing waiting for ever).
func (s *Store) keys(ctx context.Context, filter string) ([]string, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	lister, err := s.kv.ListKeysFiltered(ctx, filter)
	if err != nil {
		return nil, timedOut(ctx, fmt.Errorf("braid/meta: list %s: %w", filter, err))
	}
	defer lister.Stop()
	var keys []string
	ch := lister.Keys()
	for {
		select {
		case k, ok := <-ch:
			if !ok {
				// The lister also ends its channel when ctx ends: that
				// is a cut listing, not the whole of it.
				if ctx.Err() != nil {
					return nil, fmt.Errorf("%w: listing %s stopped after %d keys: %v", ErrTimeout, filter, len(keys), ctx.Err())
				}
				sort.Strings(keys)
				return keys, nil
			}
			keys = append(keys, k)
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: listing %s stopped after %d keys: %v", ErrTimeout, filter, len(keys), ctx.Err())
		}
	}
}

// CreateTenant creates a tenant; ErrExists if it exists.
func (s *Store) CreateTenant(ctx context.Context, tenant string) error {
	_, err := s.create(ctx, tenantKey(tenant), TenantRecord{Tenant: tenant, Created: time.Now().UTC()})
	return err
}

// Tenant reads a tenant; ErrNotFound if absent.
func (s *Store) Tenant(ctx context.Context, tenant string) (TenantRecord, error) {
	var r TenantRecord
	_, err := s.get(ctx, tenantKey(tenant), &r)
	return r, err
}

// Tenants lists tenant names, sorted.
func (s *Store) Tenants(ctx context.Context) ([]string, error) {
	keys, err := s.keys(ctx, "tenant.*")
	return lastTokens(keys, 1), err
}

// CreateNamespace creates a namespace of an existing tenant.
func (s *Store) CreateNamespace(ctx context.Context, r NamespaceRecord) error {
	if _, err := s.Tenant(ctx, r.Tenant); err != nil {
		return err
	}
	if r.TopicBuckets < 1 {
		r.TopicBuckets = 1
	}
	r.Created = time.Now().UTC()
	_, err := s.create(ctx, namespaceKey(r.Tenant, r.Namespace), r)
	return err
}

// Namespace reads a namespace; ErrNotFound if absent.
func (s *Store) Namespace(ctx context.Context, ns routing.NamespaceName) (NamespaceRecord, error) {
	var r NamespaceRecord
	_, err := s.get(ctx, namespaceKey(ns.Tenant, ns.Namespace), &r)
	return r, err
}

// NamespaceRevision reads a namespace and its revision; ErrNotFound if
// absent.
func (s *Store) NamespaceRevision(ctx context.Context, ns routing.NamespaceName) (NamespaceRecord, uint64, error) {
	var r NamespaceRecord
	rev, err := s.get(ctx, namespaceKey(ns.Tenant, ns.Namespace), &r)
	return r, rev, err
}

// UpdateNamespace writes r if the stored revision is still rev (compare and
// swap) and returns the new revision; ErrConflict otherwise.
func (s *Store) UpdateNamespace(ctx context.Context, r NamespaceRecord, rev uint64) (uint64, error) {
	return s.update(ctx, namespaceKey(r.Tenant, r.Namespace), r, rev)
}

// Namespaces lists the namespace names of a tenant, sorted.
func (s *Store) Namespaces(ctx context.Context, tenant string) ([]string, error) {
	keys, err := s.keys(ctx, "ns."+tenant+".*")
	return lastTokens(keys, 1), err
}

// CreateTopic creates a topic in an existing namespace and returns the
// record's revision. It then adds the topic to the namespace's count.
//
// The record and the count are two writes: a crash (or a store that stops
// answering) between them leaves the topic created and not counted, so
// TopicCount is one short for each such crash, for good. That is accepted:
// the count is for display and sizing, the listing is the truth. A failed
// count update does not fail the create, whose record is written.
func (s *Store) CreateTopic(ctx context.Context, name routing.TopicName, r TopicRecord) (uint64, error) {
	buckets, err := s.topicBuckets(ctx, name.NamespaceName())
	if err != nil {
		return 0, err
	}
	r.Topic = name.String()
	r.Created = time.Now().UTC()
	if err := r.Validate(name); err != nil {
		return 0, fmt.Errorf("%w: not written: %v", ErrCorrupt, err)
	}
	rev, err := s.create(ctx, topicKey(name, buckets), r)
	if err != nil {
		return 0, err
	}
	_ = s.addCount(ctx, name, 1) // on failure the count is one short, as after a crash here
	return rev, nil
}

// Topic reads a topic and its revision; ErrNotFound if absent.
func (s *Store) Topic(ctx context.Context, name routing.TopicName) (TopicRecord, uint64, error) {
	buckets, err := s.topicBuckets(ctx, name.NamespaceName())
	if err != nil {
		return TopicRecord{}, 0, err
	}
	var r TopicRecord
	key := topicKey(name, buckets)
	rev, err := s.get(ctx, key, &r)
	if err == nil {
		if verr := r.Validate(name); verr != nil {
			return r, rev, fmt.Errorf("%w: %s: %v", ErrCorrupt, key, verr)
		}
	}
	return r, rev, err
}

// UpdateTopic writes r if the stored revision is still rev (compare and
// swap) and returns the new revision; ErrConflict otherwise.
func (s *Store) UpdateTopic(ctx context.Context, name routing.TopicName, r TopicRecord, rev uint64) (uint64, error) {
	buckets, err := s.topicBuckets(ctx, name.NamespaceName())
	if err != nil {
		return 0, err
	}
	if err := r.Validate(name); err != nil {
		return 0, fmt.Errorf("%w: not written: %v", ErrCorrupt, err)
	}
	return s.update(ctx, topicKey(name, buckets), r, rev)
}

// DeleteTopic removes a topic and its subscription records; a topic that
// is not there is not an error. It then takes the topic off the
// namespace's count.
//
// The record is purged at the revision just read (a layout update in
// between is read again and the delete retried), so of two deletes of the
// same topic only the one that removed the record takes it off the count,
// and deleting a deleted topic changes nothing. A crash (or a store that
// stops answering) between the purge and the count update leaves the
// count one too high for good, as a crash in CreateTopic leaves it one
// short: see there.
func (s *Store) DeleteTopic(ctx context.Context, name routing.TopicName) error {
	buckets, err := s.topicBuckets(ctx, name.NamespaceName())
	if err != nil {
		return err
	}
	subs, err := s.Subscriptions(ctx, name)
	if err != nil {
		return err
	}
	for _, sub := range subs {
		if err := s.kv.Purge(ctx, subKey(name, sub)); err != nil {
			return fmt.Errorf("braid/meta: delete subscription %s: %w", sub, err)
		}
	}
	if err := s.DeleteCompaction(ctx, name); err != nil {
		return fmt.Errorf("braid/meta: delete the compaction record of %s: %w", name, err)
	}
	if err := s.purgeTopic(ctx, topicKey(name, buckets)); err != nil {
		if errors.Is(err, ErrNotFound) {
			return nil
		}
		return fmt.Errorf("braid/meta: delete %s: %w", name, err)
	}
	_ = s.addCount(ctx, name, -1) // on failure the count is one too high, as after a crash here
	return nil
}

// Topics lists the topic URIs of a namespace, sorted.
func (s *Store) Topics(ctx context.Context, ns routing.NamespaceName) ([]string, error) {
	keys, err := s.keys(ctx, "topic."+ns.Tenant+"."+ns.Namespace+".*.*")
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(keys))
	for _, name := range lastTokens(keys, 1) {
		out = append(out, routing.TopicName{Scheme: routing.SchemeScalable, Tenant: ns.Tenant, Namespace: ns.Namespace, Name: name}.String())
	}
	sort.Strings(out)
	return out, nil
}

// AllTopics lists every topic URI of every namespace (for recovery at start).
func (s *Store) AllTopics(ctx context.Context) ([]string, error) {
	keys, err := s.keys(ctx, "topic.>")
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		p := strings.Split(k, ".")
		if len(p) != 5 {
			continue
		}
		out = append(out, routing.TopicName{Scheme: routing.SchemeScalable, Tenant: p[1], Namespace: p[2], Name: p[4]}.String())
	}
	sort.Strings(out)
	return out, nil
}

// RegisterSubscription records a subscription; registering it again is a no-op.
func (s *Store) RegisterSubscription(ctx context.Context, name routing.TopicName, sub, kind string) error {
	_, err := s.create(ctx, subKey(name, sub), SubscriptionRecord{Topic: name.String(), Subscription: sub, Kind: kind, Created: time.Now().UTC()})
	if errors.Is(err, ErrExists) {
		return nil
	}
	return err
}

// Subscriptions lists the subscription names of a topic, sorted.
func (s *Store) Subscriptions(ctx context.Context, name routing.TopicName) ([]string, error) {
	keys, err := s.keys(ctx, "sub."+name.Tenant+"."+name.Namespace+"."+name.Name+".*")
	return lastTokens(keys, 1), err
}

func lastTokens(keys []string, n int) []string {
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		p := strings.Split(k, ".")
		out = append(out, strings.Join(p[len(p)-n:], "."))
	}
	return out
}
