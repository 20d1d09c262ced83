package placement

import (
	"fmt"
	"slices"
	"testing"
)

func TestReplicas(t *testing.T) {
	t.Parallel()
	nodes := []Node{{ID: "n1"}, {ID: "n2"}, {ID: "n3"}, {ID: "n4", Draining: true}, {ID: "n5", Segments: 1000}}
	for _, c := range []struct {
		name  string
		owner string
		n     int
		want  func([]string) error
	}{
		{"one copy", "n1", 1, exactly("n1")},
		{"three copies, owner first, never a draining node, the loaded last", "n2", 3, func(got []string) error {
			if len(got) != 3 || got[0] != "n2" || slices.Contains(got, "n4") || slices.Contains(got, "n5") {
				return fmt.Errorf("%v", got)
			}
			return nil
		}},
		{"more copies than nodes take work", "n1", 7, func(got []string) error {
			if len(got) != 4 || got[0] != "n1" || got[3] != "n5" || slices.Contains(got, "n4") {
				return fmt.Errorf("%v", got)
			}
			return nil
		}},
		{"an owner that is not live comes first all the same", "n9", 2, func(got []string) error {
			if len(got) != 2 || got[0] != "n9" {
				return fmt.Errorf("%v", got)
			}
			return nil
		}},
	} {
		if err := c.want(Replicas(nodes, "topic://t/n/x#1", c.owner, c.n)); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}
	// The copies of many segments spread over the equally loaded nodes.
	count := map[string]int{}
	for i := range 3000 {
		for _, id := range Replicas(nodes[:3], fmt.Sprintf("topic://t/n/x#%d", i), "n1", 2)[1:] {
			count[id]++
		}
	}
	if count["n2"] < 1300 || count["n3"] < 1300 {
		t.Fatalf("second copies of 3000 segments owned by n1: %v", count)
	}
}

func exactly(want ...string) func([]string) error {
	return func(got []string) error {
		if !slices.Equal(got, want) {
			return fmt.Errorf("%v, want %v", got, want)
		}
		return nil
	}
}
