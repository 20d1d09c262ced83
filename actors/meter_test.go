package actors

import (
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/braidmq/braid/routing"
	"github.com/braidmq/braid/scaling"
	"github.com/braidmq/braid/topology"
	"github.com/braidmq/braid/wal"
)

func TestSegmentMeterTakesWhatBucketsCounted(t *testing.T) {
	l, _ := topology.New(2, 4)
	seg := l.Segments[1] // the upper half, two buckets
	t0 := time.Unix(1000, 0)
	m := newSegmentMeter(seg, t0)
	hot := seg.Range.Lo + 5
	var batch []appendReq
	for i := range 10 {
		h := hot
		if i%5 == 4 {
			h = seg.Range.Hi - uint64(i)
		}
		batch = append(batch, appendReq{records: []wal.Record{{Key: []byte("k"), Payload: []byte("vv")}}, hashes: []uint64{h}})
	}
	m.buckets[0].appended(batch, 10, 30)
	m.buckets[1].appended([]appendReq{{records: []wal.Record{{Payload: []byte("x")}}}}, 1, 1) // unkeyed: no hash
	m.read([]wal.Record{{Key: []byte("ab"), Payload: []byte("cde")}, {Payload: []byte("f")}})

	smp := m.take(t0.Add(2 * time.Second))
	if smp.Elapsed != 2*time.Second || smp.MsgsIn != 11 || smp.BytesIn != 31 || smp.MsgsOut != 2 || smp.BytesOut != 6 {
		t.Fatalf("sample %+v", smp)
	}
	if smp.Hist[0] != 8 || smp.Hist[scaling.Bins-1] != 2 {
		t.Fatalf("histogram: first bin %d, last bin %d; want 8 and 2", smp.Hist[0], smp.Hist[scaling.Bins-1])
	}
	if smp.HotKeyHits != 0 {
		t.Fatalf("the first period has no watched key, got %d hits", smp.HotKeyHits)
	}
	// The next period counts the candidate exactly.
	m.buckets[0].appended(batch, 10, 30)
	smp = m.take(t0.Add(3 * time.Second))
	if smp.Elapsed != time.Second || smp.MsgsIn != 10 || smp.MsgsOut != 0 || smp.HotKey != hot || smp.HotKeyHits != 8 {
		t.Fatalf("second sample %+v", smp)
	}
}

func TestEpochTimes(t *testing.T) {
	l, _ := topology.New(1, 4)
	l, _ = l.Split(0, nil) // epoch 2: 0 sealed, 1 and 2 created
	l, _ = l.Merge(1, 2)   // epoch 3
	l, _ = l.Delete(0)     // epoch 4
	now := time.UnixMilli(5000)
	got := fillEpochTimes(l, map[uint64]int64{1: 100, 2: 200, 9: 900}, now)
	// Epoch 1 created only the deleted root; 9 is nobody's; 3 was missing.
	want := map[uint64]int64{2: 200, 3: 5000}
	if !maps.Equal(got, want) {
		t.Errorf("fillEpochTimes = %v, want %v", got, want)
	}
}

// The meter keeps the key of the hash it watches: hashes list the keyed
// records only, so unkeyed records in between must not shift the match.
func TestMeterCatchesTheWatchedKey(t *testing.T) {
	l, _ := topology.New(1, 1)
	m := newSegmentMeter(l.Segments[0], time.Unix(0, 0))
	long := make([]byte, 100)
	for i := range long {
		long[i] = 'a'
	}
	req := appendReq{
		records: []wal.Record{{Payload: []byte("x")}, {Key: []byte("cold")}, {Payload: []byte("y")}, {Key: []byte("hot")}, {Key: long}},
		hashes:  []uint64{7, 9, 11},
	}
	if k := keyOf(req, 9); string(k) != "hot" {
		t.Errorf("keyOf(9) = %q, want hot", k)
	}
	if k := keyOf(req, 11); len(k) != scaling.MaxHotKeyName {
		t.Errorf("keyOf(11) kept %d bytes, want %d", len(k), scaling.MaxHotKeyName)
	}
	if k := keyOf(req, 8); k != nil {
		t.Errorf("keyOf(8) = %q, want nil", k)
	}
	// First period: 9 becomes the candidate; second: its key is caught.
	m.buckets[0].appended([]appendReq{req, {records: []wal.Record{{Key: []byte("hot")}}, hashes: []uint64{9}}}, 6, 6)
	if smp := m.take(time.Unix(1, 0)); smp.HotKeyName != nil {
		t.Fatalf("nothing watched yet, key %q", smp.HotKeyName)
	}
	m.buckets[0].appended([]appendReq{req}, 5, 5)
	smp := m.take(time.Unix(2, 0))
	if smp.HotKey != 9 || string(smp.HotKeyName) != "hot" {
		t.Fatalf("hot key %d %q, want 9 hot", smp.HotKey, smp.HotKeyName)
	}
	if got := displayKey([]byte{0, 1, 0xff}); got != "0x0001ff" {
		t.Errorf("displayKey of bytes = %q", got)
	}
	if got := displayKey([]byte("clé-1")); got != "clé-1" {
		t.Errorf("displayKey of text = %q", got)
	}
}

// BenchmarkBucketMeterAppended is the meter's cost per flushed batch of
// 512 keyed records over 100,000 keys: the histogram, the heavy hitters,
// and the search for the watched key's bytes (a scan of the batch's
// hashes while the key was not seen this period).
func BenchmarkBucketMeterAppended(b *testing.B) {
	l, _ := topology.New(1, 1)
	m := newSegmentMeter(l.Segments[0], time.Unix(0, 0))
	batches := make([]appendReq, 64)
	for i := range batches {
		q := appendReq{records: make([]wal.Record, 512), hashes: make([]uint64, 512)}
		for j := range q.records {
			k := []byte(fmt.Sprintf("key-%d", (i*512+j)%100_000))
			q.records[j] = wal.Record{Key: k, Payload: []byte("v")}
			q.hashes[j] = routing.KeyHash(k)
		}
		batches[i] = q
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		m.buckets[0].appended(batches[i%len(batches):i%len(batches)+1], 512, 1024)
		if i%1000 == 999 {
			m.take(time.Unix(int64(i), 0)) // a new period: a new candidate to find
		}
	}
}
