// Command syncfs measures what wal.SharedSync is built on: making many
// dirty files durable with one syncfs against one fdatasync per file (in
// parallel, as independent bucket committers do). Each round writes 120
// bytes to every file and syncs them one way, then writes again and syncs
// them the other way; it prints each round and the median ratio with its
// spread, per number of files.
//
//	go run ./benchmarks/syncfs -files 4,64,500 -rounds 9
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

func main() {
	sizes := flag.String("files", "4,64,500", "numbers of files, comma-separated")
	rounds := flag.Int("rounds", 9, "alternating rounds per number of files")
	dir := flag.String("dir", ".", "directory to make the files in (its file system is the one measured)")
	flag.Parse()
	for _, f := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "syncfs: -files: %q is not a number of files\n", f)
			os.Exit(2)
		}
		if err := run(*dir, n, *rounds); err != nil {
			fmt.Fprintln(os.Stderr, "syncfs:", err)
			os.Exit(1)
		}
	}
}

func run(parent string, n, rounds int) error {
	dir, err := os.MkdirTemp(parent, "syncfs-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	files := make([]*os.File, n)
	for i := range files {
		f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(i)), os.O_CREATE|os.O_RDWR, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		// Preallocated, as the logs are: a sync moves data, not sizes.
		if err := f.Truncate(1 << 20); err != nil {
			return err
		}
		if err := f.Sync(); err != nil {
			return err
		}
		files[i] = f
	}
	buf := make([]byte, 120)
	off := int64(0)
	write := func() error {
		for _, f := range files {
			if _, err := f.WriteAt(buf, off); err != nil {
				return err
			}
		}
		off += int64(len(buf))
		return nil
	}
	eachFile := func() error {
		var wg sync.WaitGroup
		errs := make(chan error, len(files))
		for _, f := range files {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := unix.Fdatasync(int(f.Fd())); err != nil {
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		return <-errs
	}
	oneSyncfs := func() error { return unix.Syncfs(int(files[0].Fd())) }
	timed := func(sync func() error) (time.Duration, error) {
		if err := write(); err != nil {
			return 0, err
		}
		begin := time.Now()
		err := sync()
		return time.Since(begin), err
	}
	var ratios []float64
	fmt.Printf("%d files:\n", n)
	for r := range rounds {
		each, err := timed(eachFile)
		if err != nil {
			return err
		}
		one, err := timed(oneSyncfs)
		if err != nil {
			return err
		}
		ratios = append(ratios, float64(each)/float64(one))
		fmt.Printf("  round %d: %d fdatasyncs in parallel %v, one syncfs %v\n", r+1, n, each.Round(time.Microsecond), one.Round(time.Microsecond))
	}
	slices.Sort(ratios)
	fmt.Printf("  fdatasyncs / syncfs: median %.2fx [%.2fx, %.2fx] over %d rounds\n", ratios[len(ratios)/2], ratios[0], ratios[len(ratios)-1], rounds)
	return nil
}
