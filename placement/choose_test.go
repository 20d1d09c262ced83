package placement

import (
	"fmt"
	"testing"
)

func TestChoose(t *testing.T) {
	t.Parallel()
	idle := []Node{{ID: "a"}, {ID: "b"}, {ID: "c"}}
	tests := []struct {
		name         string
		nodes        []Node
		key, avoid   string
		selfDraining bool
		want         string
	}{
		{name: "alone", nodes: []Node{{ID: "a", Segments: 1000}}, key: "k", want: "self"},
		{name: "none known", key: "k", want: "self"},
		{name: "least bytes by the MiB", nodes: []Node{{ID: "a", BytesPerSec: 3 << 20}, {ID: "b", BytesPerSec: 1 << 20}, {ID: "c", BytesPerSec: 2 << 20}}, key: "k", want: "b"},
		{name: "least segments by the 64", nodes: []Node{{ID: "a", Segments: 200}, {ID: "b", Segments: 70}, {ID: "c", Segments: 130}}, key: "k", want: "b"},
		{name: "bytes before segments", nodes: []Node{{ID: "a", BytesPerSec: 1 << 20}, {ID: "b", Segments: 640}}, key: "k", want: "b"},
		{name: "draining takes nothing", nodes: []Node{{ID: "a", Draining: true}, {ID: "b", Segments: 640}}, key: "k", want: "b"},
		{name: "self draining though its lease does not say yet", nodes: []Node{{ID: "self"}, {ID: "b", Segments: 640}}, key: "k", selfDraining: true, want: "b"},
		{name: "every node draining", nodes: []Node{{ID: "a", Draining: true}, {ID: "b", Draining: true}}, key: "k", want: "self"},
		{name: "avoided among equals", nodes: []Node{{ID: "self"}, {ID: "b"}}, key: "k", avoid: "self", want: "b"},
		{name: "avoided when alone less loaded", nodes: []Node{{ID: "self"}, {ID: "b", Segments: 64}}, key: "k", avoid: "self", want: "self"},
	}
	for _, tt := range tests {
		if got := Choose(tt.nodes, tt.key, tt.avoid, "self", tt.selfDraining); got != tt.want {
			t.Errorf("%s: Choose = %q, want %q", tt.name, got, tt.want)
		}
	}
	// Among equals the choice depends on the key only: the same key picks
	// the same node, whatever the order the nodes come in.
	if a, b := Choose(idle, "k1", "", "self", false), Choose([]Node{idle[2], idle[0], idle[1]}, "k1", "", "self", false); a != b {
		t.Errorf("the order of the nodes changed the choice: %s then %s", a, b)
	}
}

// Topics made while the nodes are idle spread evenly over them.
func TestChooseSpreadsEqualNodes(t *testing.T) {
	t.Parallel()
	nodes := []Node{{ID: "n1"}, {ID: "n2"}, {ID: "n3"}}
	counts := map[string]int{}
	for i := range 3000 {
		counts[Choose(nodes, fmt.Sprintf("topic://t/ns/x%d", i), "", "n1", false)]++
	}
	for _, n := range nodes {
		if c := counts[n.ID]; c < 850 || c > 1150 {
			t.Errorf("node %s got %d of 3000: %v", n.ID, c, counts)
		}
	}
}

func TestRebalance(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		nodes []Node
		want  Move
		ok    bool
	}{
		{name: "one node", nodes: []Node{{ID: "a", Segments: 100}}},
		{name: "under the gap", nodes: []Node{{ID: "a", Segments: 10}, {ID: "b", Segments: 7}}},
		{name: "at the gap", nodes: []Node{{ID: "a", Segments: 10}, {ID: "b", Segments: 6}}, want: Move{From: "a", To: "b", Segments: 2}, ok: true},
		{name: "most to least of three", nodes: []Node{{ID: "a", Segments: 5}, {ID: "b", Segments: 25}, {ID: "c", Segments: 1}}, want: Move{From: "b", To: "c", Segments: 12}, ok: true},
		{name: "draining left out", nodes: []Node{{ID: "a", Segments: 30, Draining: true}, {ID: "b", Segments: 9}, {ID: "c", Segments: 1}}, want: Move{From: "b", To: "c", Segments: 4}, ok: true},
		{name: "ties by id", nodes: []Node{{ID: "d", Segments: 0}, {ID: "c", Segments: 0}, {ID: "b", Segments: 8}, {ID: "a", Segments: 8}}, want: Move{From: "b", To: "c", Segments: 4}, ok: true},
	}
	for _, tt := range tests {
		got, ok := Rebalance(tt.nodes)
		if ok != tt.ok || got != tt.want {
			t.Errorf("%s: Rebalance = %+v, %v; want %+v, %v", tt.name, got, ok, tt.want, tt.ok)
		}
	}
}

func TestPickTopics(t *testing.T) {
	t.Parallel()
	cands := []Candidate{{"t/e", 5}, {"t/a", 1}, {"t/d", 3}, {"t/c", 1}, {"t/b", 2}}
	tests := []struct {
		budget int
		want   []string
	}{
		{0, nil},
		{1, []string{"t/a"}},
		{2, []string{"t/a", "t/c"}},
		{6, []string{"t/a", "t/c", "t/b"}}, // t/d (3) would make 7: it and all larger stay
		{7, []string{"t/a", "t/c", "t/b", "t/d"}},
		{100, []string{"t/a", "t/c", "t/b", "t/d", "t/e"}},
	}
	for _, tt := range tests {
		var got []string
		for _, c := range PickTopics(cands, tt.budget) {
			got = append(got, c.Topic)
		}
		if fmt.Sprint(got) != fmt.Sprint(tt.want) {
			t.Errorf("budget %d: %v, want %v", tt.budget, got, tt.want)
		}
	}
	if cands[0].Topic != "t/e" {
		t.Error("PickTopics reordered its argument")
	}
}
