package actors

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/braidmq/braid/scaling"
	"github.com/braidmq/braid/topology"
	"github.com/braidmq/braid/wal"
)

// bucketMeter counts what one bucket actor appends, for the topic's load
// tracker: messages, bytes, the key hashes per sub-range of the segment,
// and the heaviest key. The bucket locks it once per flushed batch, the
// scaler once per evaluation, so the lock is almost never contended.
type bucketMeter struct {
	rng topology.Range // the segment's range, for the histogram

	mu sync.Mutex
	// Guarded by mu, reset by take:
	msgs, bytes uint64
	hist        scaling.Histogram
	heavy       scaling.HeavyHitters
	// heavyKey is a copy of the key of the hash heavy watches, once an
	// append of it was seen this period.
	heavyKey []byte
}

// appended records one flushed batch: its record and byte (key and
// payload) counts, and the key hashes of its keyed records.
func (m *bucketMeter) appended(batch []appendReq, msgs, bytes int) {
	m.mu.Lock()
	m.msgs += uint64(msgs)
	m.bytes += uint64(bytes)
	watched, watching := m.heavy.Watched()
	for _, q := range batch {
		for _, h := range q.hashes {
			m.hist[scaling.Bin(m.rng, h)]++
			m.heavy.Add(h)
		}
		if watching && m.heavyKey == nil {
			m.heavyKey = keyOf(q, watched)
		}
	}
	m.mu.Unlock()
}

// keyOf returns a copy of the key (at most scaling.MaxHotKeyName bytes)
// of the first record of q whose key hashes to h, or nil. q.hashes holds
// the hashes of q's keyed records, in order.
func keyOf(q appendReq, h uint64) []byte {
	at := slices.Index(q.hashes, h)
	if at < 0 {
		return nil
	}
	j := 0
	for i := range q.records {
		key := q.records[i].Key
		if len(key) == 0 {
			continue
		}
		if j == at {
			return append([]byte(nil), key[:min(len(key), scaling.MaxHotKeyName)]...)
		}
		j++
	}
	return nil
}

// segmentMeter gathers the meters of one active segment's buckets and
// counts what subscribers read from it.
type segmentMeter struct {
	buckets           []*bucketMeter
	outMsgs, outBytes atomic.Uint64
	lastTake          time.Time // touched by the scaler only
}

func newSegmentMeter(s topology.Segment, now time.Time) *segmentMeter {
	m := &segmentMeter{buckets: make([]*bucketMeter, s.Buckets), lastTake: now}
	for i := range m.buckets {
		m.buckets[i] = &bucketMeter{rng: s.Range}
	}
	return m
}

// read records records handed to a subscriber.
func (m *segmentMeter) read(recs []wal.Record) {
	bytes := 0
	for i := range recs {
		bytes += len(recs[i].Key) + len(recs[i].Payload)
	}
	m.outMsgs.Add(uint64(len(recs)))
	m.outBytes.Add(uint64(bytes))
}

// take returns what was counted since the previous take and starts again.
// Only the scaler calls it.
// quiet reports whether nothing was appended to or read from the segment
// since the last take.
func (m *segmentMeter) quiet() bool {
	if m.outMsgs.Load() != 0 {
		return false
	}
	for _, b := range m.buckets {
		b.mu.Lock()
		busy := b.msgs != 0
		b.mu.Unlock()
		if busy {
			return false
		}
	}
	return true
}

// skipTake moves the start of the next take's period to now, for a
// period with nothing in it (quiet).
func (m *segmentMeter) skipTake(now time.Time) { m.lastTake = now }

func (m *segmentMeter) take(now time.Time) scaling.Sample {
	smp := scaling.Sample{Elapsed: now.Sub(m.lastTake)}
	m.lastTake = now
	for _, b := range m.buckets {
		b.mu.Lock()
		smp.MsgsIn += b.msgs
		smp.BytesIn += b.bytes
		for i, n := range b.hist {
			smp.Hist[i] += n
		}
		hash, hits, ok := b.heavy.Take()
		name := b.heavyKey
		b.msgs, b.bytes, b.hist, b.heavyKey = 0, 0, scaling.Histogram{}, nil
		b.mu.Unlock()
		if ok && hits > smp.HotKeyHits {
			smp.HotKey, smp.HotKeyHits, smp.HotKeyName = hash, hits, name
		}
	}
	smp.MsgsOut = m.outMsgs.Swap(0)
	smp.BytesOut = m.outBytes.Swap(0)
	return smp
}
