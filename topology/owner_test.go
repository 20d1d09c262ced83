package topology

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestOwners: a split leaves its children without an owner while the
// parent keeps its own; WithOwner stamps only segments without one; the
// owner survives the JSON form, appears only when set, and a bad or empty
// one is refused.
func TestOwners(t *testing.T) {
	t.Parallel()
	l, err := New(1, 2)
	if err != nil {
		t.Fatal(err)
	}
	l = l.WithOwner("n1")
	split, err := l.Split(0, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range split.Segments {
		want := ""
		if s.ID == 0 {
			want = "n1"
		}
		if s.Owner != want {
			t.Fatalf("after a split, segment %d has owner %q, want %q", s.ID, s.Owner, want)
		}
	}
	stamped := split.WithOwner("n2")
	if split.Segments[1].Owner != "" {
		t.Fatal("WithOwner changed the layout it was called on")
	}
	for _, s := range stamped.Segments {
		want := "n2"
		if s.ID == 0 {
			want = "n1"
		}
		if s.Owner != want {
			t.Fatalf("stamped segment %d has owner %q, want %q", s.ID, s.Owner, want)
		}
	}
	b, err := json.Marshal(stamped)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"owner":"n2"`) {
		t.Fatalf("no owner in %s", b)
	}
	var back Layout
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	for i, s := range back.Segments {
		if s.Owner != stamped.Segments[i].Owner {
			t.Fatalf("segment %d decoded with owner %q, want %q", s.ID, s.Owner, stamped.Segments[i].Owner)
		}
	}
	if b, _ := json.Marshal(split); strings.Contains(string(b), `"owner":""`) {
		t.Fatalf("an empty owner was written: %s", b)
	}
	empty := strings.Replace(string(b), `"owner":"n1"`, `"owner":""`, 1)
	if err := json.Unmarshal([]byte(empty), &back); err == nil {
		t.Fatal("an empty owner was accepted")
	}
	bad := stamped.WithOwner("x")
	bad.Segments[0].Owner = "n.1"
	if err := bad.Validate(); err == nil {
		t.Fatal("an owner with a dot passed Validate")
	}
}
