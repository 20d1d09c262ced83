package scaling

// HotKeyShare is the share of a segment's msg/s above which its heaviest
// key is hot: it carries most of the load, and splitting cannot divide a
// single key.
const HotKeyShare = 0.5

// heavySlots is the size of the Space-Saving summary. A key with a share
// above 1/heavySlots of a period's appends is sure to be in it at the end of
// the period.
const heavySlots = 8

// HeavyHitters finds the heaviest key hash of a stream of appends, cheaply
// enough to be fed every key hash a bucket appends: a Space-Saving summary
// of heavySlots counters proposes a candidate each period, and the next
// period counts that candidate's appends exactly. The count is exact (no
// estimation error), one period late. The zero value is ready to use; it is
// not safe for concurrent use.
type HeavyHitters struct {
	slots [heavySlots]struct{ hash, count uint64 }
	used  int
	// watched is the candidate of the previous period; hits counts its
	// appends this period.
	watched  uint64
	watching bool
	hits     uint64
}

// Add records one append of key hash h.
func (s *HeavyHitters) Add(h uint64) {
	if s.watching && h == s.watched {
		s.hits++
	}
	for i := 0; i < s.used; i++ {
		if s.slots[i].hash == h {
			s.slots[i].count++
			return
		}
	}
	if s.used < heavySlots {
		s.slots[s.used].hash, s.slots[s.used].count = h, 1
		s.used++
		return
	}
	// Space-Saving: the new key takes the smallest counter, plus one.
	least := 0
	for i := 1; i < heavySlots; i++ {
		if s.slots[i].count < s.slots[least].count {
			least = i
		}
	}
	s.slots[least].hash = h
	s.slots[least].count++
}

// Watched returns the hash watched this period (ok false: none).
func (s *HeavyHitters) Watched() (hash uint64, ok bool) { return s.watched, s.watching }

// Take ends a period. It returns the key hash watched during it and how
// many of the period's appends were exactly that hash (ok is false when
// nothing was watched), then watches the period's heaviest candidate and
// starts a new period.
func (s *HeavyHitters) Take() (hash, hits uint64, ok bool) {
	hash, hits, ok = s.watched, s.hits, s.watching
	s.watching = s.used > 0
	if s.watching {
		top := 0
		for i := 1; i < s.used; i++ {
			if s.slots[i].count > s.slots[top].count {
				top = i
			}
		}
		s.watched = s.slots[top].hash
	}
	s.hits = 0
	s.used = 0
	return hash, hits, ok
}
