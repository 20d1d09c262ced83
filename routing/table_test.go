package routing

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/quick"
)

const half = uint64(1) << 63

func TestNewTableRejects(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		spans   []Span
		wantErr error
		wantMsg string
	}{
		{"no spans", nil, ErrNotTiled, "no spans"},
		{"gap at start", []Span{{Lo: 1, Hi: MaxHash, Segment: 1, Buckets: 1}}, ErrNotTiled, "gap [0x0000000000000000, 0x0000000000000000] before segment 1"},
		{"gap at end", []Span{{Lo: 0, Hi: half - 1, Segment: 1, Buckets: 1}}, ErrNotTiled, "gap [0x8000000000000000, 0xffffffffffffffff] after segment 1"},
		{"gap in middle", []Span{
			{Lo: 0, Hi: 99, Segment: 1, Buckets: 1},
			{Lo: 101, Hi: MaxHash, Segment: 2, Buckets: 1},
		}, ErrNotTiled, "gap [0x0000000000000064, 0x0000000000000064] between segment 1"},
		{"overlap", []Span{
			{Lo: 0, Hi: half, Segment: 1, Buckets: 1},
			{Lo: half, Hi: MaxHash, Segment: 2, Buckets: 1},
		}, ErrNotTiled, "overlap between segment 1"},
		{"same Lo", []Span{
			{Lo: 0, Hi: MaxHash, Segment: 1, Buckets: 1},
			{Lo: 0, Hi: 5, Segment: 2, Buckets: 1},
		}, ErrNotTiled, "overlap"},
		{"span after the end", []Span{
			{Lo: 0, Hi: MaxHash, Segment: 1, Buckets: 1},
			{Lo: MaxHash, Hi: MaxHash, Segment: 2, Buckets: 1},
		}, ErrNotTiled, "overlap"},
		{"empty span", []Span{
			{Lo: 0, Hi: 9, Segment: 1, Buckets: 1},
			{Lo: 10, Hi: 9, Segment: 2, Buckets: 1},
			{Lo: 10, Hi: MaxHash, Segment: 3, Buckets: 1},
		}, ErrNotTiled, "empty span, Lo > Hi: segment 2"},
		{"zero buckets", []Span{{Lo: 0, Hi: MaxHash, Segment: 4, Buckets: 0}}, ErrBadBuckets, "0, want 1 to 2^32: segment 4"},
		{"negative buckets", []Span{{Lo: 0, Hi: MaxHash, Segment: 4, Buckets: -2}}, ErrBadBuckets, "-2"},
		{"too many buckets", []Span{{Lo: 0, Hi: MaxHash, Segment: 4, Buckets: MaxBuckets + 1}}, ErrBadBuckets, "4294967297"},
		{"duplicate segment", []Span{
			{Lo: 0, Hi: half - 1, Segment: 7, Buckets: 1},
			{Lo: half, Hi: MaxHash, Segment: 7, Buckets: 1},
		}, ErrDuplicateSegment, "segment 7 appears twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			table, err := NewTable(tc.spans)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("NewTable = %v, %v; want an error wrapping %v", table, err, tc.wantErr)
			}
			if !strings.Contains(err.Error(), tc.wantMsg) {
				t.Errorf("error %q does not contain %q", err, tc.wantMsg)
			}
		})
	}
}

func TestNewTableSortsAndCopies(t *testing.T) {
	t.Parallel()
	in := []Span{
		{Lo: half, Hi: MaxHash, Segment: 3, Buckets: 2},
		{Lo: 0, Hi: 9, Segment: 1, Buckets: 1},
		{Lo: 10, Hi: half - 1, Segment: 2, Buckets: 4},
	}
	orig := slices.Clone(in)
	table, err := NewTable(in)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(in, orig) {
		t.Errorf("NewTable modified its input: %v", in)
	}
	want := []Span{orig[1], orig[2], orig[0]}
	if got := table.Spans(); !slices.Equal(got, want) {
		t.Errorf("Spans() = %v, want %v", got, want)
	}
	if table.Len() != 3 || table.Units() != 7 {
		t.Errorf("Len, Units = %d, %d; want 3, 7", table.Len(), table.Units())
	}
	in[0].Segment = 99
	table.Spans()[0].Segment = 99
	if got := table.Spans(); !slices.Equal(got, want) {
		t.Errorf("table shares memory with its input or with Spans(): %v", got)
	}
	for _, tc := range []struct {
		h    uint64
		want uint64
	}{{0, 1}, {9, 1}, {10, 2}, {half - 1, 2}, {half, 3}, {MaxHash, 3}} {
		if got := table.Lookup(tc.h).Segment; got != tc.want {
			t.Errorf("Lookup(%#x) = segment %d, want %d", tc.h, got, tc.want)
		}
	}
}

// randomTiling cuts the key space at n-1 distinct random points, some of them
// adjacent so one-hash spans occur, gives each span 1 to 8 buckets, and
// returns the spans shuffled.
func randomTiling(rng *rand.Rand, n int) []Span {
	cuts := map[uint64]bool{}
	for len(cuts) < n-1 {
		c := rng.Uint64()
		switch {
		case rng.IntN(50) == 0:
			c = 1 // a span holding only hash 0
		case rng.IntN(8) == 0 && len(cuts) > 0:
			for k := range cuts { // right after another cut: a one-hash span
				c = k + 1
				break
			}
		}
		if c != 0 {
			cuts[c] = true
		}
	}
	los := []uint64{0}
	for c := range cuts {
		los = append(los, c)
	}
	slices.Sort(los)
	spans := make([]Span, n)
	for i, lo := range los {
		hi := MaxHash
		if i+1 < n {
			hi = los[i+1] - 1
		}
		spans[i] = Span{Lo: lo, Hi: hi, Segment: uint64(1000 + i), Buckets: 1 + rng.IntN(8)}
	}
	rng.Shuffle(n, func(i, j int) { spans[i], spans[j] = spans[j], spans[i] })
	return spans
}

// linearLookup is the deliberately dumb reference for Table.Lookup.
func linearLookup(spans []Span, h uint64) (Span, int) {
	found, count := Span{}, 0
	for _, s := range spans {
		if s.Lo <= h && h <= s.Hi {
			found, count = s, count+1
		}
	}
	return found, count
}

// TestLookupMatchesLinearScan checks Lookup against a linear scan over random
// tilings, at random hashes and at every span boundary.
func TestLookupMatchesLinearScan(t *testing.T) {
	t.Parallel()
	property := func(seed uint64, size uint16) bool {
		rng := rand.New(rand.NewPCG(seed, 42))
		n := 1 + int(size%300)
		spans := randomTiling(rng, n)
		table, err := NewTable(spans)
		if err != nil {
			t.Logf("NewTable on a valid tiling: %v", err)
			return false
		}
		probes := []uint64{0, MaxHash}
		for _, s := range spans {
			probes = append(probes, s.Lo, s.Hi, s.Lo-1, s.Hi+1)
		}
		for range 200 {
			probes = append(probes, rng.Uint64())
		}
		for _, h := range probes {
			want, count := linearLookup(spans, h)
			if count != 1 {
				t.Logf("hash %#x is in %d spans of a tiling", h, count)
				return false
			}
			if got := table.Lookup(h); got != want {
				t.Logf("n=%d Lookup(%#x) = %v, want %v", n, h, got, want)
				return false
			}
		}
		return true
	}
	if err := quick.Check(property, &quick.Config{MaxCount: 300}); err != nil {
		t.Error(err)
	}
}

func TestRoute(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(7, 7))
	table, err := NewTable(randomTiling(rng, 37))
	if err != nil {
		t.Fatal(err)
	}
	key := make([]byte, 16)
	for range 2000 {
		for i := range key {
			key[i] = byte(rng.Uint32())
		}
		segment, bucket, h := table.Route(key)
		if h != KeyHash(key) {
			t.Fatalf("Route(%x) hash = %#x, want KeyHash %#x", key, h, KeyHash(key))
		}
		s := table.Lookup(h)
		if segment != s.Segment || bucket != Bucket(h, s.Buckets) {
			t.Fatalf("Route(%x) = segment %d bucket %d, want %d, %d", key, segment, bucket, s.Segment, Bucket(h, s.Buckets))
		}
	}
}

type unit struct {
	segment uint64
	bucket  int
}

func allUnits(table *Table) []unit {
	var units []unit
	for _, s := range table.Spans() {
		for b := range s.Buckets {
			units = append(units, unit{s.Segment, b})
		}
	}
	return units
}

func TestRoundRobinCyclesAllUnits(t *testing.T) {
	t.Parallel()
	table, err := NewTable([]Span{
		{Lo: half, Hi: MaxHash, Segment: 9, Buckets: 3},
		{Lo: 0, Hi: half - 1, Segment: 4, Buckets: 1},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []unit{{4, 0}, {9, 0}, {9, 1}, {9, 2}}
	var rr RoundRobin
	for cycle := range 3 {
		for i, w := range want {
			if s, b := rr.Next(table); (unit{s, b}) != w {
				t.Fatalf("cycle %d call %d = (%d, %d), want %v", cycle, i, s, b, w)
			}
		}
	}

	// A random table: each full cycle visits every unit exactly once.
	rng := rand.New(rand.NewPCG(3, 3))
	table, err = NewTable(randomTiling(rng, 50))
	if err != nil {
		t.Fatal(err)
	}
	units := allUnits(table)
	if uint64(len(units)) != table.Units() {
		t.Fatalf("Units() = %d, want %d", table.Units(), len(units))
	}
	rr = RoundRobin{}
	for range 2 {
		var got []unit
		for range units {
			s, b := rr.Next(table)
			got = append(got, unit{s, b})
		}
		if !slices.Equal(got, units) {
			t.Fatalf("one cycle = %v, want %v", got, units)
		}
	}
}

// TestRoundRobinConcurrent checks that concurrent callers share one cycle:
// G*M calls over U units (U divides G*M) hit every unit exactly G*M/U times.
func TestRoundRobinConcurrent(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	table, err := NewTable(randomTiling(rng, 20))
	if err != nil {
		t.Fatal(err)
	}
	units := allUnits(table)
	const goroutines = 8
	perGoroutine := len(units) * 50
	var (
		rr     RoundRobin
		wg     sync.WaitGroup
		mu     sync.Mutex // guards counts
		counts = map[unit]int{}
	)
	for range goroutines {
		wg.Go(func() {
			local := map[unit]int{}
			for range perGoroutine {
				s, b := rr.Next(table)
				local[unit{s, b}]++
			}
			mu.Lock()
			defer mu.Unlock()
			for u, c := range local {
				counts[u] += c
			}
		})
	}
	wg.Wait()
	want := goroutines * perGoroutine / len(units)
	if len(counts) != len(units) {
		t.Errorf("visited %d distinct units, want %d", len(counts), len(units))
	}
	for _, u := range units {
		if counts[u] != want {
			t.Errorf("unit %v visited %d times, want %d", u, counts[u], want)
		}
	}
}

func TestRoundRobinSurvivesTableChange(t *testing.T) {
	t.Parallel()
	one, _ := NewTable([]Span{{Lo: 0, Hi: MaxHash, Segment: 1, Buckets: 5}})
	two, _ := NewTable([]Span{
		{Lo: 0, Hi: half - 1, Segment: 2, Buckets: 1},
		{Lo: half, Hi: MaxHash, Segment: 3, Buckets: 1},
	})
	var rr RoundRobin
	for range 3 {
		rr.Next(one)
	}
	seen := map[uint64]bool{}
	for range 2 {
		s, b := rr.Next(two)
		if b != 0 {
			t.Fatalf("bucket %d in a one-bucket segment", b)
		}
		seen[s] = true
	}
	if !seen[2] || !seen[3] {
		t.Errorf("after a table change two calls visited %v, want segments 2 and 3", seen)
	}
}

func TestFixedTable(t *testing.T) {
	t.Parallel()
	parts := []Span{{Segment: 0, Buckets: 1}, {Segment: 1, Buckets: 1}, {Segment: 7, Buckets: 2}}
	tb, err := NewFixedTable(parts)
	if err != nil {
		t.Fatal(err)
	}
	if !tb.Fixed() || tb.Units() != 4 {
		t.Fatalf("fixed %v units %d", tb.Fixed(), tb.Units())
	}
	for _, h := range []uint64{0, 1, 2, 3, 4, 5, 1 << 40, MaxHash} {
		if got := tb.Lookup(h).Segment; got != parts[h%3].Segment {
			t.Fatalf("hash %d goes to segment %d, want partition %d's, %d", h, got, h%3, parts[h%3].Segment)
		}
	}
	// Round robin covers every unit of every partition.
	var rr RoundRobin
	seen := map[[2]uint64]int{}
	for range 8 {
		s, b := rr.Next(tb)
		seen[[2]uint64{s, uint64(b)}]++
	}
	if len(seen) != 4 {
		t.Fatalf("round robin over %v", seen)
	}
	if _, err := NewFixedTable([]Span{{Segment: 1, Buckets: 1}, {Segment: 1, Buckets: 1}}); !errors.Is(err, ErrDuplicateSegment) {
		t.Fatalf("duplicate: %v", err)
	}
	if _, err := NewFixedTable(nil); err == nil {
		t.Fatal("no partitions accepted")
	}
}
