package consumers

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"testing/quick"

	"github.com/braidmq/braid/topology"
)

func units(spec ...int) []topology.Unit {
	// spec is pairs of segment, bucket count: units(0, 2, 1, 1) = 0/0 0/1 1/0.
	var out []topology.Unit
	for i := 0; i+1 < len(spec); i += 2 {
		for b := range spec[i+1] {
			out = append(out, topology.Unit{Segment: topology.SegmentID(spec[i]), Bucket: b})
		}
	}
	return out
}

func u(seg, bucket int) topology.Unit {
	return topology.Unit{Segment: topology.SegmentID(seg), Bucket: bucket}
}

func TestAssignTable(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		units     []topology.Unit
		consumers []string
		current   map[topology.Unit]string
		want      map[topology.Unit]string
	}{
		{
			name:  "no consumers",
			units: units(0, 2),
			want:  map[topology.Unit]string{},
		},
		{
			name:      "no units",
			consumers: []string{"a"},
			want:      map[topology.Unit]string{},
		},
		{
			name:      "one consumer takes all",
			units:     units(0, 2, 1, 1),
			consumers: []string{"a"},
			want:      map[topology.Unit]string{u(0, 0): "a", u(0, 1): "a", u(1, 0): "a"},
		},
		{
			name:      "fresh round robin in unit order",
			units:     units(0, 2, 1, 2),
			consumers: []string{"b", "a"},
			want:      map[topology.Unit]string{u(0, 0): "a", u(0, 1): "b", u(1, 0): "a", u(1, 1): "b"},
		},
		{
			name:      "a joiner takes only what balance needs",
			units:     units(0, 4),
			consumers: []string{"a", "b"},
			current:   map[topology.Unit]string{u(0, 0): "a", u(0, 1): "a", u(0, 2): "a", u(0, 3): "a"},
			want:      map[topology.Unit]string{u(0, 0): "a", u(0, 1): "a", u(0, 2): "b", u(0, 3): "b"},
		},
		{
			name:      "the extra unit stays with whoever holds it",
			units:     units(0, 3),
			consumers: []string{"a", "b"},
			current:   map[topology.Unit]string{u(0, 0): "b", u(0, 1): "b", u(0, 2): "a"},
			want:      map[topology.Unit]string{u(0, 0): "b", u(0, 1): "b", u(0, 2): "a"},
		},
		{
			name:      "units of a departed consumer are spread",
			units:     units(0, 4),
			consumers: []string{"a", "c"},
			current:   map[topology.Unit]string{u(0, 0): "a", u(0, 1): "b", u(0, 2): "c", u(0, 3): "b"},
			want:      map[topology.Unit]string{u(0, 0): "a", u(0, 1): "a", u(0, 2): "c", u(0, 3): "c"},
		},
		{
			name:      "more consumers than units leaves some idle",
			units:     units(0, 1),
			consumers: []string{"a", "b", "c"},
			current:   map[topology.Unit]string{u(0, 0): "c"},
			want:      map[topology.Unit]string{u(0, 0): "c"},
		},
		{
			name:      "stale entries are ignored",
			units:     units(2, 1),
			consumers: []string{"a"},
			current:   map[topology.Unit]string{u(0, 0): "a", u(1, 0): "a", u(2, 0): "zz"},
			want:      map[topology.Unit]string{u(2, 0): "a"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Assign(tt.units, tt.consumers, tt.current)
			if !maps.Equal(got, tt.want) {
				t.Fatalf("Assign = %v, want %v", got, tt.want)
			}
		})
	}
}

// assignInput is a random Assign input for testing/quick.
type assignInput struct {
	Units     []topology.Unit
	Consumers []string
	Current   map[topology.Unit]string
}

func (assignInput) Generate(r *rand.Rand, size int) assignInput {
	var in assignInput
	segments := r.IntN(6)
	for s := range segments {
		for b := range 1 + r.IntN(4) {
			in.Units = append(in.Units, u(s, b))
		}
	}
	for range r.IntN(7) {
		in.Consumers = append(in.Consumers, fmt.Sprintf("c%d", r.IntN(9)))
	}
	in.Current = make(map[topology.Unit]string)
	for _, unit := range in.Units {
		if r.IntN(3) > 0 {
			in.Current[unit] = fmt.Sprintf("c%d", r.IntN(9)) // may be gone
		}
	}
	if r.IntN(4) == 0 {
		in.Current[u(99, 0)] = "c1" // not a unit any more
	}
	return in
}

// optimalKept is a dumb reference for stickiness: the most units a
// balanced assignment can leave with their current consumer. Each consumer
// may keep up to base units, and extra of them one more; a consumer gains
// from the extra slot only if it holds more than base.
func optimalKept(in assignInput) int {
	consumers := sortedUnique(in.Consumers)
	us := sortedUniqueUnits(in.Units)
	if len(consumers) == 0 {
		return 0
	}
	held := make(map[string]int)
	for _, unit := range us {
		if c, ok := in.Current[unit]; ok && slices.Contains(consumers, c) {
			held[c]++
		}
	}
	base, extra := len(us)/len(consumers), len(us)%len(consumers)
	kept, above := 0, 0
	for _, c := range consumers {
		kept += min(held[c], base)
		if held[c] > base {
			above++
		}
	}
	return kept + min(above, extra)
}

func TestAssignProperties(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 3000 {
		in := assignInput{}.Generate(r, 0)
		got := Assign(in.Units, in.Consumers, in.Current)
		consumers := sortedUnique(in.Consumers)
		us := sortedUniqueUnits(in.Units)

		// Complete.
		if len(consumers) == 0 {
			if len(got) != 0 {
				t.Fatalf("case %d: %v without consumers", i, got)
			}
			continue
		}
		if len(got) != len(us) {
			t.Fatalf("case %d: %d units assigned, want %d", i, len(got), len(us))
		}
		counts := make(map[string]int)
		for _, unit := range us {
			c, ok := got[unit]
			if !ok || !slices.Contains(consumers, c) {
				t.Fatalf("case %d: unit %v assigned to %q", i, unit, c)
			}
			counts[c]++
		}
		// Balanced.
		lo, hi := len(us), 0
		for _, c := range consumers {
			lo, hi = min(lo, counts[c]), max(hi, counts[c])
		}
		if hi-lo > 1 {
			t.Fatalf("case %d: counts %v are not balanced", i, counts)
		}
		// Sticky, as much as balance allows.
		kept := 0
		for _, unit := range us {
			if c, ok := in.Current[unit]; ok && got[unit] == c {
				kept++
			}
		}
		if want := optimalKept(in); kept != want {
			t.Fatalf("case %d: kept %d units in place, the optimum is %d\ninput %+v\ngot %v", i, kept, want, in, got)
		}
		// Deterministic: order and duplicates of the inputs do not matter.
		shuffled := assignInput{
			Units:     append(slices.Clone(in.Units), in.Units...),
			Consumers: append(slices.Clone(in.Consumers), in.Consumers...),
		}
		r.Shuffle(len(shuffled.Units), func(a, b int) { shuffled.Units[a], shuffled.Units[b] = shuffled.Units[b], shuffled.Units[a] })
		r.Shuffle(len(shuffled.Consumers), func(a, b int) {
			shuffled.Consumers[a], shuffled.Consumers[b] = shuffled.Consumers[b], shuffled.Consumers[a]
		})
		if again := Assign(shuffled.Units, shuffled.Consumers, in.Current); !maps.Equal(again, got) {
			t.Fatalf("case %d: shuffled input gave %v, want %v", i, again, got)
		}
		// Idempotent.
		if again := Assign(in.Units, in.Consumers, got); !maps.Equal(again, got) {
			t.Fatalf("case %d: reassigning moved units: %v, want %v", i, again, got)
		}
	}
}

// TestAssignQuick runs the balance property through testing/quick too.
func TestAssignQuick(t *testing.T) {
	t.Parallel()
	balanced := func(nUnits, nConsumers uint8) bool {
		us := units(0, int(nUnits%64))
		var cs []string
		for i := range int(nConsumers % 16) {
			cs = append(cs, fmt.Sprint("c", i))
		}
		got := Assign(us, cs, nil)
		if len(cs) == 0 {
			return len(got) == 0
		}
		counts := make(map[string]int)
		for _, c := range got {
			counts[c]++
		}
		lo, hi := len(us), 0
		for _, c := range cs {
			lo, hi = min(lo, counts[c]), max(hi, counts[c])
		}
		return len(got) == len(us) && hi-lo <= 1
	}
	if err := quick.Check(balanced, nil); err != nil {
		t.Fatal(err)
	}
}

func TestAssignJoinMovesFewUnits(t *testing.T) {
	t.Parallel()
	// Growing a group one consumer at a time moves only what balance needs:
	// with n units and k consumers, a joiner takes about n/(k+1).
	us := units(0, 4, 1, 4, 2, 4)
	cur := Assign(us, []string{"a"}, nil)
	names := []string{"a"}
	for _, joiner := range []string{"b", "c", "d", "e", "f"} {
		names = append(names, joiner)
		next := Assign(us, names, cur)
		moved := 0
		for unit, c := range next {
			if cur[unit] != c {
				moved++
				if c != joiner {
					t.Fatalf("unit %v moved to %s, not to the joiner %s", unit, c, joiner)
				}
			}
		}
		if want := len(us) / len(names); moved > want+1 {
			t.Fatalf("joiner %s: %d units moved, want at most %d", joiner, moved, want+1)
		}
		cur = next
	}
}

func BenchmarkAssign(b *testing.B) {
	for _, size := range []struct{ units, consumers int }{{16, 4}, {256, 16}, {4096, 64}} {
		b.Run(fmt.Sprintf("units=%d/consumers=%d", size.units, size.consumers), func(b *testing.B) {
			us := units(0, size.units)
			var cs []string
			for i := range size.consumers {
				cs = append(cs, fmt.Sprint("c", i))
			}
			cur := Assign(us, cs[:len(cs)-1], nil) // the last one joins
			b.ResetTimer()
			for range b.N {
				Assign(us, cs, cur)
			}
		})
	}
}
