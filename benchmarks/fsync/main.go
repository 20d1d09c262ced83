// Command fsync measures the disk baseline under Braid's durability:
// writers, one file each, write fixed-size chunks and fsync after each (as
// bucket logs do under durability "always"), and it reports MB/s and the
// process CPU it took. No NATS and no Braid: it is the floor the produce
// path stands on.
//
//	go run ./benchmarks/fsync [-files 16] [-chunk 524288] [-mb 800] [-sync=true] [-prealloc] [-datasync]
//	go run ./benchmarks/fsync -stalls 15s [-files 4] [-stall 10ms]   # how often the disk's syncs stall
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"time"
)

func main() {
	files := flag.Int("files", 16, "files written at once, one goroutine each")
	chunk := flag.Int("chunk", 512<<10, "bytes per write")
	total := flag.Int("mb", 800, "MiB written in all")
	doSync := flag.Bool("sync", true, "fsync after every write")
	prealloc := flag.Bool("prealloc", false, "fallocate each file's space first")
	datasync := flag.Bool("datasync", false, "fdatasync instead of fsync")
	dir := flag.String("dir", ".", "where to create the scratch directory")
	stallsFor := flag.Duration("stalls", 0, "instead: for this long, each file takes 6 KB writes into space already written, each followed by an fdatasync (as Braid's logs do), and the syncs slower than -stall are counted")
	stall := flag.Duration("stall", 10*time.Millisecond, "with -stalls: what counts as a stall")
	flag.Parse()
	if *stallsFor > 0 {
		measureStalls(*dir, *files, *stallsFor, *stall)
		return
	}
	if *files < 1 || *chunk < 1 || *total < 1 {
		log.Fatal("files, chunk and mb must be positive")
	}
	scratch, err := os.MkdirTemp(*dir, "braid-fsync-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(scratch)
	buf := make([]byte, *chunk)
	writes := max(1, (*total<<20) / *files / *chunk)

	var before, after syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &before); err != nil {
		log.Fatal(err)
	}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, *files)
	for i := range *files {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- writeFile(filepath.Join(scratch, fmt.Sprint(i)), buf, writes, *doSync, *prealloc, *datasync)
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	for err := range errs {
		if err != nil {
			log.Fatal(err)
		}
	}
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &after); err != nil {
		log.Fatal(err)
	}
	cpu := time.Duration(after.Utime.Nano() - before.Utime.Nano() + after.Stime.Nano() - before.Stime.Nano())
	mib := float64(writes**files**chunk) / (1 << 20)
	fmt.Printf("machine: %d CPUs, %s/%s, %s\n", runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version())
	fmt.Printf("%d files, %d B per write, fsync %v, prealloc %v, fdatasync %v: %.0f MiB/s, process CPU %.2f cores\n",
		*files, *chunk, *doSync, *prealloc, *datasync, mib/elapsed.Seconds(), cpu.Seconds()/elapsed.Seconds())
}

func writeFile(path string, buf []byte, writes int, doSync, prealloc, datasync bool) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if prealloc {
		// FALLOC_FL_KEEP_SIZE: allocate blocks, leave the size to the writes.
		if err := syscall.Fallocate(int(f.Fd()), 1, 0, int64(writes*len(buf))); err != nil {
			return fmt.Errorf("fallocate %s: %w", path, err)
		}
	}
	for range writes {
		if _, err := f.Write(buf); err != nil {
			return err
		}
		switch {
		case !doSync:
		case datasync:
			if err := syscall.Fdatasync(int(f.Fd())); err != nil {
				return err
			}
		default:
			if err := f.Sync(); err != nil {
				return err
			}
		}
	}
	return nil
}

// measureStalls counts the fdatasyncs slower than stall while files
// writers sync small writes into zero-filled files for d.
func measureStalls(dir string, files int, d, stall time.Duration) {
	scratch, err := os.MkdirTemp(dir, "braid-stalls-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(scratch)
	const span = 64 << 20
	var mu sync.Mutex
	var lats []time.Duration
	var wg sync.WaitGroup
	deadline := time.Now().Add(d)
	for i := range files {
		f, err := os.Create(filepath.Join(scratch, fmt.Sprint(i)))
		if err != nil {
			log.Fatal(err)
		}
		if _, err := f.WriteAt(make([]byte, span), 0); err != nil {
			log.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			log.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer f.Close()
			buf := make([]byte, 6000)
			var mine []time.Duration
			for k := 0; time.Now().Before(deadline); k++ {
				if _, err := f.WriteAt(buf, int64(k*len(buf))%(span-int64(len(buf)))); err != nil {
					log.Fatal(err)
				}
				s := time.Now()
				if err := syscall.Fdatasync(int(f.Fd())); err != nil {
					log.Fatal(err)
				}
				mine = append(mine, time.Since(s))
			}
			mu.Lock()
			lats = append(lats, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	slices.Sort(lats)
	over := 0
	for _, l := range lats {
		if l > stall {
			over++
		}
	}
	fmt.Printf("machine: %d CPUs, %s/%s, %s\n", runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version())
	fmt.Printf("%d files, %d fdatasyncs in %s (%.0f/s): p50 %s, p99 %s, p99.9 %s, max %s; %d over %s (%.2f/s)\n",
		files, len(lats), d, float64(len(lats))/d.Seconds(), lats[len(lats)/2], lats[len(lats)*99/100], lats[len(lats)*999/1000],
		lats[len(lats)-1], over, stall, float64(over)/d.Seconds())
}
