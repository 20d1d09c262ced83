package consumers

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/topology"
	"github.com/braidmq/braid/wal"
)

// history drives a group through random produce, split, merge, fetch, ack,
// leave and restart steps and checks, after every delivery:
//
//   - key order: a message is delivered only after every earlier message of
//     its key has been delivered (DESIGN.md §1), across splits and merges;
//   - no acknowledged message is delivered again, across restarts.
//
// At the end one consumer drains everything: nothing is lost.
type history struct {
	t   *testing.T
	r   *rand.Rand
	h   *harness
	src *testSource

	seq       map[string]int           // next seq per key
	delivered map[string]map[int]bool  // per key, the seqs delivered at least once
	acked     map[topology.Unit]uint64 // per unit, the cursor of successful acks
	members   map[string]bool          // joined consumers
	holding   map[string]map[topology.Unit]*holding
	produced  int
}

// holding is what one consumer was given of one unit and has not acked.
type holding struct {
	acked, last uint64 // acked: next offset to ack; last: last delivered
}

var historyKeys = []string{"a", "b", "c", "d", "e", "f", "g"}

func TestRandomHistories(t *testing.T) {
	for seed := range uint64(6) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			src := newTestSource(t, 1, 2)
			hist := &history{
				t: t, r: rand.New(rand.NewPCG(seed, 99)), src: src,
				h:         newHarness(t, src, WithDurability(wal.DurabilityNone), WithCompactAfter(16)),
				seq:       make(map[string]int),
				delivered: make(map[string]map[int]bool),
				acked:     make(map[topology.Unit]uint64),
				members:   make(map[string]bool),
				holding:   make(map[string]map[topology.Unit]*holding),
			}
			for range 250 {
				hist.step()
			}
			hist.drain()
		})
	}
}

func (hs *history) step() {
	consumer := fmt.Sprint("c", hs.r.IntN(3))
	switch n := hs.r.IntN(100); {
	case n < 25:
		for range 1 + hs.r.IntN(6) {
			key := historyKeys[hs.r.IntN(len(historyKeys))]
			hs.src.produce(key, fmt.Sprintf("%s:%d", key, hs.seq[key]))
			hs.seq[key]++
			hs.produced++
		}
	case n < 29:
		active := hs.src.Layout().Active()
		if len(active) < 6 {
			hs.src.split(active[hs.r.IntN(len(active))].ID)
		}
	case n < 32:
		active := hs.src.Layout().Active()
		if len(active) > 1 {
			i := hs.r.IntN(len(active) - 1)
			hs.src.merge(active[i].ID, active[i+1].ID)
		}
	case n < 34:
		hs.src.reshape(func(l topology.Layout) (topology.Layout, error) {
			s := l.Active()[0]
			return l.Rebucket(s.ID, 1+s.Buckets%3)
		})
	case n < 60:
		hs.ensureJoined(consumer)
		msgs, _ := hs.h.fetch(consumer, 1+hs.r.IntN(8))
		hs.see(consumer, msgs)
	case n < 90:
		hs.ensureJoined(consumer)
		hs.ackSome(consumer)
	case n < 95:
		if hs.members[consumer] {
			hs.h.leave(consumer)
			hs.forget(consumer)
		}
	default:
		hs.h.reopen()
		for c := range hs.members {
			hs.forget(c)
		}
	}
}

func (hs *history) ensureJoined(consumer string) {
	if !hs.members[consumer] {
		hs.h.join(consumer)
		hs.members[consumer] = true
		hs.holding[consumer] = make(map[topology.Unit]*holding)
	}
}

func (hs *history) forget(consumer string) {
	delete(hs.members, consumer)
	delete(hs.holding, consumer)
}

func (hs *history) see(consumer string, msgs []api.Message) {
	hs.t.Helper()
	for _, m := range msgs {
		unit := unitOf(m)
		if m.Offset < hs.acked[unit] {
			hs.t.Fatalf("%s got %v offset %d, acknowledged up to %d", consumer, unit, m.Offset, hs.acked[unit])
		}
		key, seqText, _ := strings.Cut(string(m.Payload), ":")
		seq, _ := strconv.Atoi(seqText)
		if hs.delivered[key] == nil {
			hs.delivered[key] = make(map[int]bool)
		}
		for earlier := range seq {
			if !hs.delivered[key][earlier] {
				hs.t.Fatalf("%s got key %s seq %d before seq %d was ever delivered", consumer, key, seq, earlier)
			}
		}
		hs.delivered[key][seq] = true
		hd := hs.holding[consumer][unit]
		if hd == nil {
			hd = &holding{acked: m.Offset}
			hs.holding[consumer][unit] = hd
		}
		hd.last = m.Offset
	}
}

// ackSome acknowledges a random prefix of what consumer holds of one unit.
func (hs *history) ackSome(consumer string) {
	hs.t.Helper()
	held := hs.holding[consumer]
	if len(held) == 0 {
		return
	}
	units := slices.SortedFunc(func(yield func(topology.Unit) bool) {
		for unit := range held {
			if !yield(unit) {
				return
			}
		}
	}, compareUnits)
	unit := units[hs.r.IntN(len(units))]
	hd := held[unit]
	off := hd.acked + uint64(hs.r.IntN(int(hd.last-hd.acked)+1))
	hs.h.ack(consumer, pos(int(unit.Segment), unit.Bucket, off))
	hs.acked[unit] = max(hs.acked[unit], off+1)
	if hd.acked = off + 1; hd.acked > hd.last {
		delete(held, unit)
	}
}

// drain leaves one consumer, which reads and acks everything left. The
// previous owners still awaited after a restart leave too, or their units
// would wait for them.
func (hs *history) drain() {
	hs.t.Helper()
	for c := range hs.members {
		hs.h.leave(c)
		hs.forget(c)
	}
	for _, c := range hs.h.stats().AwaitedOwners {
		hs.h.leave(c)
	}
	hs.ensureJoined("last")
	for range 1000 {
		msgs, _ := hs.h.fetch("last", 50)
		if len(msgs) == 0 {
			break
		}
		hs.see("last", msgs)
		hs.h.ackAll("last", msgs)
		for _, m := range msgs {
			hs.acked[unitOf(m)] = max(hs.acked[unitOf(m)], m.Offset+1)
		}
	}
	total := 0
	for key, seqs := range hs.delivered {
		if len(seqs) != hs.seq[key] {
			hs.t.Fatalf("key %s: %d of %d messages delivered", key, len(seqs), hs.seq[key])
		}
		total += len(seqs)
	}
	if total != hs.produced {
		hs.t.Fatalf("%d of %d messages delivered", total, hs.produced)
	}
	if st := hs.h.stats(); st.Backlog != 0 || len(st.Withheld) != 0 {
		t := hs.t
		t.Fatalf("after draining: backlog %d, withheld %v", st.Backlog, st.Withheld)
	}
}
