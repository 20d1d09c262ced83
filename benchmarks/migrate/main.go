// Command migrate measures the in-place migration of a fixed-partition
// topic (persistent://) into a scalable one: the time topic.migrate takes
// and the bytes the process writes meanwhile (/proc/self/io write_bytes:
// the metadata record, the children's first files), at two data sizes, to
// show both are constant in the data: no partition log is copied.
//
//	go run ./benchmarks/migrate -sizes 256,1024
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/benchmarks/workload"
	"github.com/braidmq/braid/client"
)

func main() {
	sizes := flag.String("sizes", "256,1024", "MiB of data in the fixed topic, one migration each")
	partitions := flag.Int("partitions", 4, "partitions of the fixed topic")
	payload := flag.Int("payload", 16<<10, "bytes a message")
	flag.Parse()
	dir, err := os.MkdirTemp("", "braid-migrate-bench-")
	check(err)
	defer os.RemoveAll(dir)
	node, nc, err := workload.StartBraid(filepath.Join(dir, "braid"), "always")
	check(err)
	defer node.Close()
	ctx := context.Background()
	adm := client.NewAdmin(nc, client.WithRequestTimeout(time.Minute))
	fmt.Printf("| data | partitions | migrate took | bytes written by the migration | data dir before -> after |\n|---|---|---|---|---|\n")
	for _, s := range strings.Split(*sizes, ",") {
		mib, err := strconv.Atoi(strings.TrimSpace(s))
		check(err)
		uri := fmt.Sprintf("persistent://public/default/fixed%d", mib)
		_, err = adm.CreateFixedTopic(ctx, uri, *partitions)
		check(err)
		spec := workload.Spec{Messages: (mib << 20) / *payload, Size: *payload, Keys: 1000}
		_, err = workload.ProduceBraid(ctx, nc, uri, spec)
		check(err)
		before := workload.DirBytes(dir)
		w0 := writeBytes()
		t0 := time.Now()
		d, err := adm.Migrate(ctx, api.MigrateRequest{Topic: uri})
		took := time.Since(t0)
		check(err)
		written := writeBytes() - w0
		fmt.Printf("| %d MiB | %d | %s | %d bytes | %d -> %d MB |\n", mib, *partitions, took.Round(time.Microsecond), written,
			before>>20, workload.DirBytes(dir)>>20)
		if d.Topic == "" || len(d.Segments) != 2**partitions {
			check(fmt.Errorf("migrated layout: %+v", d))
		}
	}
}

// writeBytes is what the process caused to be written to storage so far.
func writeBytes() int64 {
	f, err := os.Open("/proc/self/io")
	check(err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "write_bytes: "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			check(err)
			return n
		}
	}
	check(fmt.Errorf("no write_bytes in /proc/self/io"))
	return 0
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "migrate benchmark:", err)
		os.Exit(1)
	}
}
