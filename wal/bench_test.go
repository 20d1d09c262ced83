package wal

import (
	"fmt"
	"testing"
)

// benchRecord is a record with a payload of size bytes and a short key.
func benchRecord(size, i int) Record {
	payload := make([]byte, size)
	for j := range payload {
		payload[j] = byte(i + j)
	}
	return Record{Timestamp: 1700000000000 + int64(i), Key: []byte(fmt.Sprintf("key-%08d", i)), Payload: payload}
}

// BenchmarkAppend measures one Append of a batch per op: one write and,
// with durability=always, one fsync. SetBytes counts payload bytes.
func BenchmarkAppend(b *testing.B) {
	for _, size := range []int{100, 1024} {
		for _, batch := range []int{1, 16, 256} {
			for _, durability := range []Durability{DurabilityAlways, DurabilityInterval, DurabilityNone} {
				name := fmt.Sprintf("size=%d/batch=%d/%s", size, batch, durability)
				b.Run(name, func(b *testing.B) {
					l := openLog(b, b.TempDir(), Options{Durability: durability})
					defer closeLog(b, l)
					recs := make([]Record, batch)
					for i := range recs {
						recs[i] = benchRecord(size, i)
					}
					b.SetBytes(int64(size * batch))
					b.ReportAllocs()
					b.ResetTimer()
					for range b.N {
						if _, err := l.Append(recs...); err != nil {
							b.Fatal(err)
						}
					}
					b.StopTimer()
					b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "rec/s")
				})
			}
		}
	}
}

// BenchmarkReadRange measures ReadRange of up to maxRecords records per op,
// walking a prefilled log of several files from start to end and around.
func BenchmarkReadRange(b *testing.B) {
	const records = 20000
	for _, size := range []int{100, 1024} {
		dir := b.TempDir()
		l := openLog(b, dir, Options{Durability: DurabilityNone, SegmentBytes: 4 << 20})
		batch := make([]Record, 0, 500)
		for i := range records {
			batch = append(batch, benchRecord(size, i))
			if len(batch) == cap(batch) {
				mustAppend(b, l, batch...)
				batch = batch[:0]
			}
		}
		for _, maxRecords := range []int{1, 100} {
			b.Run(fmt.Sprintf("size=%d/records=%d", size, maxRecords), func(b *testing.B) {
				b.SetBytes(int64(size * maxRecords))
				b.ReportAllocs()
				off := uint64(0)
				for range b.N {
					recs, err := l.ReadRange(off, maxRecords, 0)
					if err != nil {
						b.Fatal(err)
					}
					off += uint64(len(recs))
					if off >= records {
						off = 0
					}
				}
				b.ReportMetric(float64(b.N*maxRecords)/b.Elapsed().Seconds(), "rec/s")
			})
		}
		closeLog(b, l)
	}
}
