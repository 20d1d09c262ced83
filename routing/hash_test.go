package routing

import (
	"fmt"
	"math"
	"strconv"
	"testing"
)

// The goldens pin the routing hash: changing it would move every key of every
// topic. Values checked against an independent XXH64 implementation.
func TestKeyHashGolden(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		key  string
		want uint64
	}{
		{"", 0xef46db3751d8e999},
		{"a", 0xd24ec4f1a98c6e5b},
		{"abc", 0x44bc2cf5ad770999},
		{"asdf", 0x415872f599cea71e},
		{"payments", 0x65839f69392c29b8},
		{"0123456789abcdef", 0x5c5b90c34e376d0b},
		{"The quick brown fox jumps over the lazy dog", 0x0b242d361fda71bc},
		{"Call me Ishmael. Some years ago--never mind how long precisely-", 0x02a2e85470d6fd96},
	} {
		if got := KeyHash([]byte(tc.key)); got != tc.want {
			t.Errorf("KeyHash(%q) = %#016x, want %#016x", tc.key, got, tc.want)
		}
		if got := KeyHashString(tc.key); got != tc.want {
			t.Errorf("KeyHashString(%q) = %#016x, want %#016x", tc.key, got, tc.want)
		}
	}
	if got := KeyHash(nil); got != 0xef46db3751d8e999 {
		t.Errorf("KeyHash(nil) = %#016x, want the hash of the empty key", got)
	}
}

func TestBucketFormula(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		h    uint64
		n    int
		want int
	}{
		{0, 1, 0},
		{MaxHash, 1, 0},
		{0, 4, 0},
		{0xffffffff, 4, 3},
		{0x3fffffff, 4, 0},
		{0x40000000, 4, 1},
		{0x80000000, 4, 2},
		{0xc0000000, 4, 3},
		{0xffffffff_00000000, 4, 0}, // high bits never matter
		{0x12345678_80000000, 4, 2},
		{0x80000000, 3, 1},
		{0xffffffff, MaxBuckets, 0xffffffff},
		{7, MaxBuckets, 7},
	} {
		if got := Bucket(tc.h, tc.n); got != tc.want {
			t.Errorf("Bucket(%#x, %d) = %d, want %d", tc.h, tc.n, got, tc.want)
		}
	}
}

func TestBucketPanicsOnBadCount(t *testing.T) {
	t.Parallel()
	for _, n := range []int{0, -1, math.MinInt, MaxBuckets + 1} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Bucket(h, %d) did not panic", n)
				}
			}()
			Bucket(1, n)
		}()
	}
}

// TestBucketDistribution hashes many keys and checks that every bucket count
// gets a near-equal share. The keys are fixed, so the test is deterministic.
func TestBucketDistribution(t *testing.T) {
	t.Parallel()
	const keys = 200_000
	hashes := make([]uint64, keys)
	for i := range hashes {
		hashes[i] = KeyHashString(fmt.Sprintf("key-%d", i))
	}
	for _, n := range []int{1, 2, 3, 4, 7, 8, 16, 100} {
		counts := make([]int, n)
		for _, h := range hashes {
			b := Bucket(h, n)
			if b < 0 || b >= n {
				t.Fatalf("Bucket(%#x, %d) = %d, out of [0, %d)", h, n, b, n)
			}
			counts[b]++
		}
		checkUniform(t, fmt.Sprintf("n=%d", n), counts, keys)
	}
}

// TestBucketIndependentOfSegment checks why the bucket uses the low bits:
// keys confined to a narrow segment (top 6 bits fixed, as after six splits)
// still spread evenly over its buckets.
func TestBucketIndependentOfSegment(t *testing.T) {
	t.Parallel()
	const n, want = 8, 8_000
	counts := make([]int, n)
	total := 0
	key := []byte("order-")
	for i := 0; total < want; i++ {
		h := KeyHash(strconv.AppendInt(key[:6], int64(i), 10))
		if h>>58 != 0x2a {
			continue
		}
		counts[Bucket(h, n)]++
		total++
	}
	checkUniform(t, "segment 0x2a<<58", counts, total)
}

// checkUniform fails if any count strays more than 5% plus 5 standard
// deviations from its share: loose enough never to flake on fixed inputs,
// tight enough to catch a skewed or truncated mapping.
func checkUniform(t *testing.T, name string, counts []int, total int) {
	t.Helper()
	expected := float64(total) / float64(len(counts))
	tolerance := 0.05*expected + 5*math.Sqrt(expected)
	for b, c := range counts {
		if math.Abs(float64(c)-expected) > tolerance {
			t.Errorf("%s: bucket %d got %d of %d, want %.0f ± %.0f", name, b, c, total, expected, tolerance)
		}
	}
}

func TestFixedPartition(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		h    uint64
		n    int
		want int
	}{
		{0, 1, 0},
		{MaxHash, 1, 0},
		{10, 3, 1},
		{MaxHash, 10, 5}, // 18446744073709551615 % 10
		{MaxHash, 16, 15},
		{0x0b242d361fda71bc, 7, int(uint64(0x0b242d361fda71bc) % 7)},
	} {
		if got := FixedPartition(tc.h, tc.n); got != tc.want {
			t.Errorf("FixedPartition(%#x, %d) = %d, want %d", tc.h, tc.n, got, tc.want)
		}
	}
	for _, n := range []int{0, -3} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("FixedPartition(h, %d) did not panic", n)
				}
			}()
			FixedPartition(1, n)
		}()
	}
}

func TestTopicBucket(t *testing.T) {
	t.Parallel()
	payments := TopicName{Scheme: SchemeScalable, Tenant: "acme", Namespace: "orders", Name: "payments"}
	if got := TopicBucket(payments, 1); got != 0 {
		t.Errorf("TopicBucket(_, 1) = %d, want 0", got)
	}
	// xxhash64("payments") = 0x65839f69392c29b8.
	if got, want := TopicBucket(payments, 1000), int(uint64(0x65839f69392c29b8)%1000); got != want {
		t.Errorf("TopicBucket(payments, 1000) = %d, want %d", got, want)
	}
	// Only the local name counts: the bucket locates a topic in its namespace.
	elsewhere := TopicName{Scheme: SchemePersistent, Tenant: "other", Namespace: "ns", Name: "payments"}
	if TopicBucket(payments, 97) != TopicBucket(elsewhere, 97) {
		t.Errorf("TopicBucket depends on more than the topic's local name")
	}
	const n = 16
	counts := make([]int, n)
	for i := range 50_000 {
		b := TopicBucket(TopicName{Name: fmt.Sprintf("topic-%d", i)}, n)
		if b < 0 || b >= n {
			t.Fatalf("TopicBucket(_, %d) = %d, out of range", n, b)
		}
		counts[b]++
	}
	checkUniform(t, "topic buckets", counts, 50_000)
	defer func() {
		if recover() == nil {
			t.Errorf("TopicBucket(_, 0) did not panic")
		}
	}()
	TopicBucket(payments, 0)
}
