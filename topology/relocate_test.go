package topology

import (
	"errors"
	"testing"
)

func TestRelocate(t *testing.T) {
	t.Parallel()
	l, err := New(1, 2)
	if err != nil {
		t.Fatal(err)
	}
	l = l.WithOwner("n1")
	if l, err = l.Split(0, nil); err != nil {
		t.Fatal(err)
	}
	l = l.WithOwner("n1")
	active := l.OwnedActive("n1")
	if len(active) != 2 {
		t.Fatalf("active owned by n1: %v", active)
	}
	out, err := l.Relocate(active, "n2")
	if err != nil {
		t.Fatal(err)
	}
	if err := out.Validate(); err != nil {
		t.Fatalf("relocated layout invalid: %v", err)
	}
	if out.Epoch != l.Epoch+1 {
		t.Fatalf("epoch %d, want %d", out.Epoch, l.Epoch+1)
	}
	if got := out.OwnedActive("n1"); len(got) != 0 {
		t.Fatalf("n1 still owns active %v", got)
	}
	moved := out.OwnedActive("n2")
	if len(moved) != 2 {
		t.Fatalf("n2 owns %v", moved)
	}
	for i, id := range moved {
		s, _ := out.Segment(id)
		p, _ := out.Segment(active[i])
		if s.Range != p.Range || s.Buckets != p.Buckets || len(s.Parents) != 1 || s.Parents[0] != p.ID {
			t.Fatalf("successor %+v of %+v", s, p)
		}
		if p.State != StateSealed || p.SealedEpoch != out.Epoch || p.Owner != "n1" {
			t.Fatalf("sealed %+v", p)
		}
	}
	if _, err := l.Relocate([]SegmentID{0}, "n2"); !errors.Is(err, ErrNotActive) {
		t.Fatalf("relocating a sealed segment: %v", err)
	}
	if _, err := l.Relocate([]SegmentID{active[0], active[0]}, "n2"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("relocating twice: %v", err)
	}
	if _, err := l.Relocate(active, "bad owner"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad owner: %v", err)
	}
}
