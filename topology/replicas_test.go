package topology

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestReplicas(t *testing.T) {
	l, err := New(1, 4)
	if err != nil {
		t.Fatal(err)
	}
	l = l.WithOwner("n1")
	reps := []Replica{{"n1", "aa01"}, {"n2", "bb02"}, {"n3", "cc03"}}
	l.Segments[0].Replicas = reps
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	if id := l.Segments[0].ReplicaID("n2", "bb02"); id != 2 {
		t.Fatalf("replica id of n2: %d", id)
	}
	if id := l.Segments[0].ReplicaID("n2", "ffff"); id != 0 {
		t.Fatalf("n2 under another incarnation is replica %d", id)
	}
	b, err := json.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"replicas":[{"node":"n1","incarnation":"aa01"},{"node":"n2","incarnation":"bb02"},{"node":"n3","incarnation":"cc03"}]`) {
		t.Fatalf("json %s", b)
	}
	var back Layout
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if got := back.Segments[0].Replicas; len(got) != 3 || got[2] != reps[2] {
		t.Fatalf("replicas back %v", got)
	}
	for name, bad := range map[string][]Replica{
		"owner not first":   {{"n2", "bb02"}, {"n1", "aa01"}},
		"two on one node":   {{"n1", "aa01"}, {"n1", "dd04"}},
		"no incarnation":    {{"n1", ""}},
		"bad node":          {{"n1", "aa01"}, {"n 2", "bb02"}},
		"more than the cap": {{"n1", "a"}, {"n2", "a"}, {"n3", "a"}, {"n4", "a"}, {"n5", "a"}, {"n6", "a"}, {"n7", "a"}, {"n8", "a"}},
	} {
		c := l
		c.Segments = append([]Segment(nil), l.Segments...)
		c.Segments[0].Replicas = bad
		if err := c.Validate(); err == nil {
			t.Errorf("%s: valid", name)
		}
	}
}
