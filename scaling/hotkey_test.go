package scaling

import (
	"math/rand/v2"
	"testing"
)

func TestHeavyHittersFindsOneHotKey(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	var s HeavyHitters
	const hot = 0xfeedface
	feed := func(n int) {
		for i := range n {
			if i%10 < 6 { // 60 % of the appends
				s.Add(hot)
			} else {
				s.Add(rng.Uint64())
			}
		}
	}
	feed(1000)
	if _, _, ok := s.Take(); ok {
		t.Fatal("nothing was watched in the first period")
	}
	feed(1000)
	h, hits, ok := s.Take()
	if !ok || h != hot || hits != 600 {
		t.Fatalf("Take = %x, %d, %v; want %x, 600 exact hits", h, hits, ok, hot)
	}
	// Once the key cools off, its exact count falls with it.
	for range 1000 {
		s.Add(rng.Uint64())
	}
	if h, hits, _ := s.Take(); h != hot || hits != 0 {
		t.Fatalf("after cooling: %x, %d", h, hits)
	}
}

func TestHeavyHittersUniformKeysHaveNoHotKey(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	var s HeavyHitters
	keys := make([]uint64, 5000)
	for i := range keys {
		keys[i] = rng.Uint64()
	}
	for range 5 {
		for range 10_000 {
			s.Add(keys[rng.IntN(len(keys))])
		}
		if _, hits, ok := s.Take(); ok && hits > 100 {
			t.Fatalf("a uniform key got %d of 10000 appends", hits)
		}
	}
}

func TestHeavyHittersZeroValue(t *testing.T) {
	t.Parallel()
	var s HeavyHitters
	if _, _, ok := s.Take(); ok {
		t.Error("empty summary watched something")
	}
	if _, _, ok := s.Take(); ok {
		t.Error("an empty period must not start a watch")
	}
}

func BenchmarkHeavyHittersAdd(b *testing.B) {
	rng := rand.New(rand.NewPCG(5, 6))
	keys := make([]uint64, 1024)
	for i := range keys {
		keys[i] = rng.Uint64()
	}
	var s HeavyHitters
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s.Add(keys[i&1023])
	}
}
