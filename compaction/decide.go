// Package compaction decides what a compacted topic keeps: for every key,
// its latest record across the units of the topic's segment DAG below their
// horizons, as Kafka's log cleaner and Pulsar's compactor do for one log.
// It is pure logic over records handed to it (no actors, no disks of its
// own but the temporary files of a compaction that needs several passes);
// the compactor actor reads the logs and writes the compacted ones.
//
// "Latest" follows the ordering rule: of two records of a key, the one in
// a descendant segment is later (a key's history runs down one chain of
// the DAG: parent, child, merged grandchild), and within a unit the one at
// the higher offset. The caller gives each unit a rank that orders a
// segment after its ancestors (the epoch it was created in does).
//
// Memory is bounded: the key map holds at most what Budget allows (32
// bytes a key, in a flat open-addressed table). When a topic has more keys,
// the keys are split by hash into partitions decided in turn, each pass
// reading the records again, and the offsets each pass keeps are spilled to
// a temporary file per unit and merged back in offset order.
package compaction

import (
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"time"

	"github.com/braidmq/braid/wal"
	"github.com/cespare/xxhash/v2"
)

// Unit is one unit (segment, bucket) of the compacted portion of a topic.
type Unit struct {
	Segment uint64
	Bucket  int
	// Rank orders units along the DAG: a segment's is above every one of
	// its ancestors' (its creation epoch).
	Rank uint64
}

// Scan calls fn, in offset order, for every record of units[unit] that is
// to be compacted (below its horizon); fn's error stops it and is
// returned.
type Scan func(unit int, fn func(off uint64, rec wal.Record) error) error

// Rules are a compaction's policies, at a time.
type Rules struct {
	// RetainNullKey keeps unkeyed records (else they are dropped).
	RetainNullKey bool
	// DeleteRetention is how long a tombstone (a keyed record with an
	// empty payload, the latest of its key) stays; Lag how young a record
	// must be never to be dropped.
	DeleteRetention, Lag time.Duration
	// Now is the compaction's time (records' times are unix ms).
	Now time.Time
}

// EntryBytes is what the key map takes per key.
const EntryBytes = 32

// entry is one key of the map: its 128-bit hash, and where its latest
// record is (unit+1: 0 marks an empty slot).
type entry struct {
	h1, h2 uint64
	off    uint64
	unit   uint32
	_      uint32
}

// table is an open-addressed hash table of entries (linear probing, at
// most three quarters full).
type table struct {
	slots []entry
	used  int
	limit int
}

func newTable(maxKeys int) *table {
	n := 16
	for n*3/4 < maxKeys {
		n *= 2
	}
	return &table{slots: make([]entry, n), limit: maxKeys}
}

var errFull = errors.New("compaction: the key map is full")

// put records that (unit, off) holds key (h1, h2) if it is later than what
// the map has (ranks orders units).
func (t *table) put(h1, h2, off uint64, unit uint32, ranks []uint64) error {
	mask := uint64(len(t.slots) - 1)
	for i := h2 & mask; ; i = (i + 1) & mask {
		e := &t.slots[i]
		if e.unit == 0 {
			if t.used >= t.limit {
				return errFull
			}
			*e = entry{h1: h1, h2: h2, off: off, unit: unit + 1}
			t.used++
			return nil
		}
		if e.h1 == h1 && e.h2 == h2 {
			// Later: in a descendant, or further on in the same unit. (Two
			// units of one rank are siblings of disjoint key ranges: they
			// cannot both hold a key.)
			if old := e.unit - 1; ranks[unit] > ranks[old] || unit == old && off > e.off {
				e.off, e.unit = off, unit+1
			}
			return nil
		}
	}
}

func hashKey(key []byte) (uint64, uint64) {
	f := fnv.New64a()
	f.Write(key)
	return xxhash.Sum64(key), f.Sum64()
}

// Decision is what a compaction keeps of each unit's keyed records: the
// offsets of the latest record of each key. Keep applies the rules over it.
type Decision struct {
	rules Rules
	kept  []*keptOffsets // by unit
	// Keys is how many keys the units hold; Passes how many passes over
	// the records deciding them took (1 when the keys fit the budget).
	Keys, Passes int
	spill        *spill
}

// Decide reads every unit's records and decides, for every key, which
// record is its latest. budget bounds the key map's bytes (at least 1,024
// keys' worth); tmpDir holds the spilled offsets of a compaction of more
// keys than that (removed by Close).
func Decide(units []Unit, scan Scan, rules Rules, budget int64, tmpDir string) (*Decision, error) {
	maxKeys := int(max(budget/EntryBytes, 1024))
	ranks := make([]uint64, len(units))
	for i, u := range units {
		ranks[i] = u.Rank
	}
	d := &Decision{rules: rules}
	for parts := 1; ; parts *= 2 {
		err := d.decide(units, scan, ranks, parts, maxKeys, tmpDir)
		if !errors.Is(err, errFull) {
			return d, err
		}
		d.Close()
		*d = Decision{rules: rules}
		if parts >= 1<<20 {
			return nil, fmt.Errorf("compaction: over %d passes of %d keys each", parts, maxKeys)
		}
	}
}

// decide runs parts passes, each over the keys whose hash falls in it.
func (d *Decision) decide(units []Unit, scan Scan, ranks []uint64, parts, maxKeys int, tmpDir string) error {
	d.kept = make([]*keptOffsets, len(units))
	if parts > 1 {
		sp, err := newSpill(tmpDir, len(units))
		if err != nil {
			return err
		}
		d.spill = sp
	}
	for p := 0; p < parts; p++ {
		t := newTable(maxKeys)
		for u := range units {
			err := scan(u, func(off uint64, rec wal.Record) error {
				if len(rec.Key) == 0 {
					return nil
				}
				h1, h2 := hashKey(rec.Key)
				if parts > 1 && int((h1>>32)%uint64(parts)) != p {
					return nil
				}
				return t.put(h1, h2, off, uint32(u), ranks)
			})
			if err != nil {
				return err
			}
		}
		d.Keys += t.used
		d.Passes++
		byUnit := make([][]uint64, len(units))
		for _, e := range t.slots {
			if e.unit != 0 {
				byUnit[e.unit-1] = append(byUnit[e.unit-1], e.off)
			}
		}
		for u, offs := range byUnit {
			slices.Sort(offs)
			if parts == 1 {
				d.kept[u] = &keptOffsets{mem: offs}
				continue
			}
			if err := d.spill.add(u, offs); err != nil {
				return err
			}
		}
	}
	if parts > 1 {
		for u := range units {
			k, err := d.spill.merged(u)
			if err != nil {
				return err
			}
			d.kept[u] = k
		}
	}
	return nil
}

// Keep reports whether the record at off of units[unit] stays in the
// compacted view. It must be asked in offset order within a unit (it walks
// the kept offsets alongside).
func (d *Decision) Keep(unit int, off uint64, rec wal.Record) (bool, error) {
	r := d.rules
	young := r.Lag > 0 && rec.Timestamp > r.Now.Add(-r.Lag).UnixMilli()
	if len(rec.Key) == 0 {
		return r.RetainNullKey || young, nil
	}
	latest, err := d.kept[unit].has(off)
	if err != nil {
		return false, err
	}
	if young {
		return true, nil
	}
	if !latest {
		return false, nil
	}
	if len(rec.Payload) == 0 && rec.Timestamp <= r.Now.Add(-r.DeleteRetention).UnixMilli() {
		return false, nil // a tombstone past delete_retention: the key is gone
	}
	return true, nil
}

// Close removes the spilled files.
func (d *Decision) Close() error {
	var err error
	for _, k := range d.kept {
		if k != nil {
			err = errors.Join(err, k.close())
		}
	}
	if d.spill != nil {
		err = errors.Join(err, d.spill.remove())
	}
	return err
}
