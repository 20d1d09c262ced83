// Command walcompare appends the same records through Braid's wal and
// through github.com/tidwall/wal (the log the design first named) in one
// run, alternating the two round by round, and prints records per second
// and the ratio (median of the rounds, with their spread), by payload
// size, batch size and durability: what keeps the choice of a log of
// Braid's own measured (see the wal package doc).
//
//	go run ./benchmarks/walcompare [-rounds 3] [-records 20000] [-sync-records 2000]
//
// Durability: "always" is Braid's DurabilityAlways (an fdatasync before
// Append returns) against tidwall/wal's default (an fsync after every
// Write and WriteBatch); "none" is DurabilityNone against NoSync. Both
// write the same bytes per record: wal.EncodeRecord of a record with a
// 12-byte key and the payload.
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/braidmq/braid/wal"
	tidwall "github.com/tidwall/wal"
)

func main() {
	rounds := flag.Int("rounds", 3, "alternating rounds")
	records := flag.Int("records", 20_000, "records per run without sync")
	syncRecords := flag.Int("sync-records", 2_000, "records per run with a sync per batch")
	flag.Parse()
	fmt.Printf("machine: %d CPUs, %s/%s, %s; %d alternating rounds\n\n", runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version(), *rounds)
	type key struct {
		size, batch int
		mode        string
	}
	type cell struct{ braid, tidwall []float64 }
	cells := map[key]*cell{}
	var order []key
	for _, mode := range []string{"always", "none"} {
		for _, size := range []int{100, 1024} {
			for _, batch := range []int{1, 16, 256} {
				k := key{size, batch, mode}
				order = append(order, k)
				cells[k] = &cell{}
			}
		}
	}
	for r := range *rounds {
		for _, k := range order {
			n := *records
			if k.mode == "always" {
				n = *syncRecords * min(k.batch, 16)
			}
			n = max(n/k.batch, 1) * k.batch
			c := cells[k]
			runs := []func(){
				func() {
					c.braid = append(c.braid, rate(n, func(dir string) float64 { return braid(dir, k.size, k.batch, n, k.mode) }))
				},
				func() {
					c.tidwall = append(c.tidwall, rate(n, func(dir string) float64 { return tidwallRun(dir, k.size, k.batch, n, k.mode) }))
				},
			}
			if r%2 == 1 {
				runs[0], runs[1] = runs[1], runs[0]
			}
			for _, run := range runs {
				run()
			}
		}
	}
	fmt.Printf("%-8s %-7s %-6s | %-16s | %-16s | %s\n", "mode", "size", "batch", "braid rec/s", "tidwall rec/s", "braid / tidwall: median [min, max]")
	fmt.Println(strings.Repeat("-", 100))
	for _, k := range order {
		c := cells[k]
		var ratios []float64
		for i := range c.braid {
			ratios = append(ratios, c.braid[i]/c.tidwall[i])
		}
		slices.Sort(ratios)
		fmt.Printf("%-8s %-7s %-6d | %-16.0f | %-16.0f | %.2fx [%.2f, %.2f]\n", k.mode, fmt.Sprintf("%d B", k.size), k.batch,
			median(c.braid), median(c.tidwall), ratios[len(ratios)/2], ratios[0], ratios[len(ratios)-1])
	}
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// rate runs f in a fresh directory and returns records per second.
func rate(n int, f func(dir string) float64) float64 {
	dir, err := os.MkdirTemp("", "braid-walcompare-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	return float64(n) / f(dir)
}

func records(size, n int) []wal.Record {
	out := make([]wal.Record, n)
	for i := range out {
		p := make([]byte, size)
		for j := range p {
			p[j] = byte(i + j)
		}
		out[i] = wal.Record{Timestamp: 1700000000000 + int64(i), Key: fmt.Appendf(nil, "key-%08d", i), Payload: p}
	}
	return out
}

// braid appends n records in batches of batch and returns the seconds it
// took.
func braid(dir string, size, batch, n int, mode string) float64 {
	d := wal.DurabilityAlways
	if mode == "none" {
		d = wal.DurabilityNone
	}
	l, err := wal.Open(dir, wal.Options{Durability: d})
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	recs := records(size, batch)
	start := time.Now()
	for i := 0; i < n; i += batch {
		if _, err := l.Append(recs...); err != nil {
			log.Fatal(err)
		}
	}
	return time.Since(start).Seconds()
}

// tidwallRun writes the same records, each as wal.EncodeRecord makes it,
// through tidwall/wal.
func tidwallRun(dir string, size, batch, n int, mode string) float64 {
	opts := *tidwall.DefaultOptions
	opts.NoSync = mode == "none"
	l, err := tidwall.Open(dir, &opts)
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	recs := records(size, batch)
	encoded := make([][]byte, len(recs))
	for i := range recs {
		encoded[i] = wal.EncodeRecord(nil, recs[i])
	}
	var b tidwall.Batch
	index := uint64(1)
	start := time.Now()
	for i := 0; i < n; i += batch {
		if batch == 1 {
			if err := l.Write(index, encoded[0]); err != nil {
				log.Fatal(err)
			}
			index++
			continue
		}
		b.Clear()
		for _, e := range encoded {
			b.Write(index, e)
			index++
		}
		if err := l.WriteBatch(&b); err != nil {
			log.Fatal(err)
		}
	}
	return time.Since(start).Seconds()
}
