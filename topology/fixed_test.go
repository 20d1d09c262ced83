package topology

import (
	"errors"
	"slices"
	"testing"
)

func TestFixedLayout(t *testing.T) {
	l, err := NewFixed(4)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	if !l.Fixed() || len(l.Partitions()) != 4 {
		t.Fatalf("fixed %v, partitions %d", l.Fixed(), len(l.Partitions()))
	}
	for _, h := range []uint64{0, 1, 2, 3, 7, 1 << 63, ^uint64(0)} {
		s, ok := l.Owner(h)
		if !ok || s.Partition != int(h%4) {
			t.Fatalf("hash %#x goes to %+v, want partition %d", h, s, h%4)
		}
	}
	// Partitions do not split, merge, rebucket or move.
	if _, err := l.Split(0, nil); !errors.Is(err, ErrFixed) {
		t.Fatalf("split of a partition: %v", err)
	}
	if _, err := l.Merge(0, 1); !errors.Is(err, ErrFixed) {
		t.Fatalf("merge of partitions: %v", err)
	}
	if _, err := l.Rebucket(0, 4); !errors.Is(err, ErrFixed) {
		t.Fatalf("rebucket of a partition: %v", err)
	}
	if _, err := l.Relocate([]SegmentID{2}, "n2"); !errors.Is(err, ErrFixed) {
		t.Fatalf("relocating a partition: %v", err)
	}

	// Growing: more partitions only; keys remap.
	if _, err := l.AddPartitions(4); !errors.Is(err, ErrFixed) {
		t.Fatalf("growing to the same count: %v", err)
	}
	if _, err := l.AddPartitions(3); !errors.Is(err, ErrFixed) {
		t.Fatalf("shrinking: %v", err)
	}
	grown, err := l.AddPartitions(6)
	if err != nil {
		t.Fatal(err)
	}
	if err := grown.Validate(); err != nil {
		t.Fatal(err)
	}
	if grown.Epoch != 2 || len(grown.Partitions()) != 6 || grown.Partitions()[5].ID != 5 {
		t.Fatalf("grown: %+v", grown)
	}
	if s, _ := grown.Owner(10); s.Partition != 4 {
		t.Fatalf("hash 10 goes to partition %d of 6, want 4", s.Partition)
	}
}

func TestMigrateFixedLayout(t *testing.T) {
	l, _ := NewFixed(4)
	l = l.WithOwner("n1")
	l.Segments[3].Owner = "n3"
	m, err := l.Migrate(2)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	if m.Fixed() || m.Epoch != l.Epoch+1 {
		t.Fatalf("migrated: fixed %v epoch %d", m.Fixed(), m.Epoch)
	}
	// The partitions keep their ids (their logs), sealed; the children
	// are the FromFixed shape.
	want, _ := FromFixed(4, 2)
	for i, p := range m.Partitions() {
		if p.ID != SegmentID(i) || p.State != StateSealed || !slices.Equal(p.Children, want.Segments[i].Children) {
			t.Fatalf("partition %d after the migration: %+v", i, p)
		}
	}
	for i := 4; i < 8; i++ {
		got, w := m.Segments[i], want.Segments[i]
		if got.ID != w.ID || got.Range != w.Range || !slices.Equal(got.Parents, w.Parents) || got.Buckets != 2 || got.State != StateActive {
			t.Fatalf("child %d: %+v, want %+v", i, got, w)
		}
	}
	if m.Segments[7].Owner != "n3" || m.Segments[4].Owner != "n1" {
		t.Fatalf("children owners %q %q: each goes to its partition's node", m.Segments[4].Owner, m.Segments[7].Owner)
	}
	if s, ok := m.Owner(1 << 63); !ok || s.ID != 6 {
		t.Fatalf("a hash in the third quarter goes to %+v, want child 6 by range", s)
	}
	if _, err := m.Migrate(2); !errors.Is(err, ErrFixed) {
		t.Fatalf("migrating twice: %v", err)
	}
	if _, err := m.AddPartitions(6); !errors.Is(err, ErrFixed) {
		t.Fatalf("adding partitions to a migrated topic: %v", err)
	}
	// And the children split like any segment.
	if _, err := m.Split(4, nil); err != nil {
		t.Fatal(err)
	}
}

func TestValidateRefusesMixedFixedLayouts(t *testing.T) {
	l, _ := NewFixed(2)
	bad := l.Clone()
	bad.Segments[1].Partition = 0
	if err := bad.Validate(); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a repeated partition: %v", err)
	}
	bad = l.Clone()
	bad.Segments[1].Partition = -1
	if err := bad.Validate(); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a fixed topic with a range segment: %v", err)
	}
	bad = l.Clone()
	bad.Segments[1].Range = Range{Lo: 0, Hi: 10}
	if err := bad.Validate(); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a partition not over the whole space: %v", err)
	}
}
