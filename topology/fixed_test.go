package topology

import (
	"errors"
	"slices"
	"testing"
)

func TestFixedLayout(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
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
	t.Parallel()
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

// A partition that moves (its node lost or drained) becomes a chain: the
// sealed segment where its logs are, then a successor with the same
// partition index taking its appends.
func TestRelocatedPartitionIsAChain(t *testing.T) {
	t.Parallel()
	l, _ := NewFixed(3)
	l = l.WithOwner("n1")
	moved, err := l.Relocate([]SegmentID{1, 2}, "n2")
	if err != nil {
		t.Fatal(err)
	}
	if err := moved.Validate(); err != nil {
		t.Fatal(err)
	}
	if !moved.Fixed() || len(moved.Partitions()) != 3 || moved.Epoch != 2 {
		t.Fatalf("after a move: fixed %v, partitions %d, epoch %d", moved.Fixed(), len(moved.Partitions()), moved.Epoch)
	}
	for i, p := range moved.Partitions() {
		want := []SegmentID{0, 3, 4}[i]
		if p.ID != want || p.State != StateActive || p.Partition != i {
			t.Fatalf("partition %d's tip is %+v, want active segment %d", i, p, want)
		}
	}
	if moved.PartitionOf(1) != 1 || moved.PartitionOf(3) != 1 || moved.PartitionOf(99) != -1 {
		t.Fatalf("PartitionOf: %d %d %d", moved.PartitionOf(1), moved.PartitionOf(3), moved.PartitionOf(99))
	}
	// Keys still go hash % 3, to each partition's tip.
	for _, h := range []uint64{0, 1, 2, 4, 5, 1 << 63} {
		s, ok := moved.Owner(h)
		if !ok || s.Partition != int(h%3) || s.State != StateActive {
			t.Fatalf("hash %#x goes to %+v, want partition %d's active segment", h, s, h%3)
		}
	}
	// The chain is read in order: the successor after its parent drains.
	drained := func(id SegmentID) bool { return false }
	if MayRead(moved, 3, drained) || !MayRead(moved, 1, drained) {
		t.Fatalf("a partition's successor is readable before the segment it follows drained")
	}
	// A chain moves again, grows and migrates.
	again, err := moved.Relocate([]SegmentID{3}, "n3")
	if err != nil {
		t.Fatal(err)
	}
	if err := again.Validate(); err != nil {
		t.Fatal(err)
	}
	if anc := again.Ancestors(5); !slices.Equal(anc, []SegmentID{1, 3}) && !slices.Equal(anc, []SegmentID{3, 1}) {
		t.Fatalf("ancestors of partition 1's third segment: %v", anc)
	}
	grown, err := again.AddPartitions(4)
	if err != nil {
		t.Fatal(err)
	}
	if err := grown.Validate(); err != nil {
		t.Fatal(err)
	}
	if p := grown.Partitions(); len(p) != 4 || p[3].ID != 6 || p[3].Owner != "n1" {
		t.Fatalf("grown: %+v", p)
	}
	m, err := grown.Migrate(1)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, c := range m.Active() {
		if !slices.Equal(c.Parents, []SegmentID{0, 4, 5, 6}) {
			t.Fatalf("a migration child's parents are %v, want the partitions' tips", c.Parents)
		}
	}
	// Partitions stay full-range: splits are still refused.
	if _, err := moved.Split(3, nil); !errors.Is(err, ErrFixed) {
		t.Fatalf("split of a moved partition: %v", err)
	}
}

func TestValidateRefusesBrokenPartitionChains(t *testing.T) {
	t.Parallel()
	l, _ := NewFixed(2)
	moved, _ := l.Relocate([]SegmentID{1}, "n2") // 1 sealed -> 2 active, partition 1
	for name, breakIt := range map[string]func(*Layout){
		"successor of another partition": func(b *Layout) { b.Segments[2].Partition = 0 },
		"two active segments": func(b *Layout) {
			b.Segments[1].State, b.Segments[1].SealedEpoch, b.Segments[1].Children = StateActive, 0, nil
			b.Segments[2].Parents = nil
		},
		"no active segment":        func(b *Layout) { b.Segments[2].State, b.Segments[2].SealedEpoch = StateSealed, 2 },
		"successor not full range": func(b *Layout) { b.Segments[2].Range = Range{Lo: 0, Hi: 1 << 40} },
		"successor of two":         func(b *Layout) { b.Segments[2].Parents = []SegmentID{0, 1} },
		"epochs apart":             func(b *Layout) { b.Segments[1].SealedEpoch = 1 },
		"sealed with no successor": func(b *Layout) {
			b.Segments[1].Children = nil
			b.Segments[2].Parents = nil
		},
	} {
		b := moved.Clone()
		breakIt(&b)
		if err := b.Validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: Validate = %v, want ErrInvalid", name, err)
		}
	}
	// A migrated layout whose child lists a non-tip segment of a chain.
	m, _ := moved.Migrate(1)
	bad := m.Clone()
	for i := range bad.Segments {
		if bad.Segments[i].Partition < 0 {
			bad.Segments[i].Parents = []SegmentID{0, 1}
		}
	}
	if err := bad.Validate(); !errors.Is(err, ErrInvalid) {
		t.Errorf("migration children following a sealed link of a chain: %v", err)
	}
}
