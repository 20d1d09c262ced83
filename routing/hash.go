package routing

import (
	"fmt"
	"math"

	"github.com/cespare/xxhash/v2"
)

// MaxHash is the largest key hash; the key space is [0, MaxHash].
const MaxHash uint64 = math.MaxUint64

// MaxBuckets is the largest bucket count [Bucket] accepts: the multiply-shift
// maps the 32 low bits of the hash, so more buckets than 2^32 cannot be used.
const MaxBuckets = 1 << 32

// KeyHash returns the key hash of a message key: xxhash64 with seed 0.
// It is the only hash used for routing; changing it would move every key.
func KeyHash(key []byte) uint64 {
	return xxhash.Sum64(key)
}

// KeyHashString is KeyHash for a key held in a string; it does not copy.
func KeyHashString(key string) uint64 {
	return xxhash.Sum64String(key)
}

// Bucket returns the entry bucket, in [0, n), of a key hash in a segment with
// n buckets: (uint32(h) * n) >> 32, using the low 32 bits of h only (see the
// package doc for why). It panics unless 1 <= n <= MaxBuckets: a segment
// always has at least one bucket, and NewTable rejects any other count.
func Bucket(h uint64, n int) int {
	if n < 1 || uint64(n) > MaxBuckets {
		panic(fmt.Sprintf("braid/routing: bucket count %d out of range [1, 2^32]", n))
	}
	return int((uint64(uint32(h)) * uint64(n)) >> 32)
}

// FixedPartition returns the partition, in [0, partitions), of a key hash in
// a fixed topic (persistent://...): h % partitions, the classic model that a
// fixed topic keeps until it is migrated into a scalable topic. It panics if
// partitions < 1.
func FixedPartition(h uint64, partitions int) int {
	if partitions < 1 {
		panic(fmt.Sprintf("braid/routing: partition count %d, want at least 1", partitions))
	}
	return int(h % uint64(partitions))
}

// TopicBucket returns the namespace topic bucket, in [0, n), under which the
// metadata of a topic is laid out in a namespace created with
// topic_buckets = n (DESIGN §4): xxhash64(name.Name) % n.
//
// Only the topic's local name within its namespace is hashed; tenant,
// namespace and scheme are not, because the bucket only has to locate the
// topic inside its own namespace. With n == 1 (the default) every topic is in
// bucket 0. It panics if n < 1.
func TopicBucket(name TopicName, n int) int {
	if n < 1 {
		panic(fmt.Sprintf("braid/routing: topic bucket count %d, want at least 1", n))
	}
	return int(xxhash.Sum64String(name.Name) % uint64(n))
}
