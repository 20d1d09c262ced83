package tier

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/braidmq/braid/internal/poll"
	"github.com/braidmq/braid/wal"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// startNATS starts an embedded JetStream server and returns its URL.
func startNATS(t *testing.T) string {
	t.Helper()
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true, SyncAlways: true})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats not ready")
	}
	t.Cleanup(func() {
		ns.Shutdown()
		ns.WaitForShutdown()
	})
	return ns.ClientURL()
}

func openTier(t testing.TB, url, root string, step func(string)) *Tier {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tr, err := Open(ctx, js, Config{Root: root, CacheDir: filepath.Join(root, "cache"), CacheBytes: 8 << 10, AfterStep: step})
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func record(i int) wal.Record {
	return wal.Record{Timestamp: 1000 + int64(i), Key: []byte(fmt.Sprint("k", i%5)), Payload: bytes.Repeat([]byte{byte('a' + i%26)}, 100+i%50)}
}

// writeLog writes n records to the log in dir, rolling every 20: closed
// files [0, 20), [20, 40), ... and an open one.
func writeLog(t testing.TB, dir string, n int) {
	t.Helper()
	l, err := wal.Open(dir, wal.Options{Durability: wal.DurabilityAlways, SegmentBytes: wal.Unlimited})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if _, err := l.Append(record(i)); err != nil {
			t.Fatal(err)
		}
		if i%20 == 19 {
			if _, err := l.Roll(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}

// pass offloads the closed files of l the tier does not hold yet, in
// order, and drops the local copies of those it holds: what the storage
// worker does with offload on and a local retention of 0.
func pass(t testing.TB, tr *Tier, l *wal.Log) {
	t.Helper()
	ctx := context.Background()
	files, err := l.ClosedFiles()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if !tr.Holds(l.Dir(), f.First) {
			if err := tr.Offload(ctx, l.Dir(), l, f); err != nil {
				t.Fatal(err)
			}
		}
		if err := l.DropFilesBefore(f.Next); err != nil {
			t.Fatal(err)
		}
		tr.step("drop")
	}
}

// readAll reads [0, next) of the log through the tier and the log.
func readAll(t testing.TB, tr *Tier, l *wal.Log, next uint64) {
	t.Helper()
	for off := uint64(0); off < next; {
		var recs []wal.Record
		var err error
		if off < l.FirstOffset() {
			recs, err = tr.Read(context.Background(), l.Dir(), off, 7, 0)
		} else {
			recs, err = l.ReadRange(off, 7, 0)
		}
		if err != nil || len(recs) == 0 {
			t.Fatalf("offset %d (local from %d): %d records, %v", off, l.FirstOffset(), len(recs), err)
		}
		for _, r := range recs {
			want := record(int(off))
			if r.Timestamp != want.Timestamp || !bytes.Equal(r.Payload, want.Payload) {
				t.Fatalf("offset %d reads another record", off)
			}
			off++
		}
	}
}

// objects returns the names of the objects in the tier's store.
func objects(t testing.TB, tr *Tier) []string {
	t.Helper()
	infos, err := tr.Store().List(context.Background())
	if err != nil && !errors.Is(err, jetstream.ErrNoObjectsFound) {
		t.Fatal(err)
	}
	var out []string
	for _, i := range infos {
		out = append(out, i.Name)
	}
	slices.Sort(out)
	return out
}

// chunkSubjects returns how many objects' chunks the store's stream holds.
func chunkSubjects(t testing.TB, tr *Tier) int {
	t.Helper()
	stream, err := tr.js.Stream(context.Background(), "OBJ_"+tr.cfg.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(context.Background(), jetstream.WithSubjectFilter("$O."+tr.cfg.Bucket+".C.>"))
	if err != nil {
		t.Fatal(err)
	}
	return len(info.State.Subjects)
}

// TestOffloadReadExpireDrop: closed files offloaded in order read back
// from the tier (through a cache smaller than a file) once their local
// copies are gone; retention removes objects and entries from the head;
// dropping the log leaves nothing in the store.
func TestOffloadReadExpireDrop(t *testing.T) {
	url := startNATS(t)
	root := t.TempDir()
	dir := filepath.Join(root, "t", "ns", "topic", "0", "0")
	writeLog(t, dir, 95)
	tr := openTier(t, url, root, nil)
	l, err := wal.Open(dir, wal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	files, _ := l.ClosedFiles()
	if len(files) != 4 {
		t.Fatalf("closed files: %+v", files)
	}
	if err := tr.Offload(context.Background(), dir, l, files[1]); err == nil {
		t.Fatal("a log's second file offloaded first")
	}
	pass(t, tr, l)
	if l.FirstOffset() != 80 {
		t.Fatalf("local first offset %d after the offload", l.FirstOffset())
	}
	if first, ok := tr.First(dir); !ok || first != 0 {
		t.Fatalf("tier first: %d %v", first, ok)
	}
	readAll(t, tr, l, 95)
	readAll(t, tr, l, 95) // again, through the cache
	if d, hits, _ := tr.Stats(); d < 4 || hits == 0 {
		t.Fatalf("downloads %d, hits %d", d, hits)
	}
	if _, err := tr.Read(context.Background(), dir, 80, 1, 0); !errors.Is(err, wal.ErrNotFound) {
		t.Fatalf("a read past the tier: %v", err)
	}
	if got := objects(t, tr); len(got) != 4 || got[0] != "t/ns/topic/0/0/00000000000000000000" {
		t.Fatalf("objects: %v", got)
	}
	n, bytes, err := tr.Expire(context.Background(), dir, func(e Entry) bool { return e.Newest < 1030 })
	if err != nil || n != 1 || bytes == 0 {
		t.Fatalf("expire: %d files, %d bytes, %v", n, bytes, err)
	}
	if first, _ := tr.First(dir); first != 20 || len(objects(t, tr)) != 3 {
		t.Fatalf("after the expiry: tier first %d, objects %v", first, objects(t, tr))
	}
	if _, err := tr.Read(context.Background(), dir, 5, 1, 0); !errors.Is(err, wal.ErrNotFound) {
		t.Fatalf("a read of an expired file: %v", err)
	}
	// A new Tier reads the manifest back.
	tr2 := openTier(t, url, root, nil)
	if e, err := tr2.Entries(dir); err != nil || len(e) != 3 || e[0].First != 20 {
		t.Fatalf("entries read back: %+v %v", e, err)
	}
	if err := tr2.DropLog(context.Background(), dir); err != nil {
		t.Fatal(err)
	}
	if got := objects(t, tr2); len(got) != 0 || chunkSubjects(t, tr2) != 0 {
		t.Fatalf("after the drop: objects %v, %d chunk subjects", got, chunkSubjects(t, tr2))
	}
	if _, err := os.Stat(filepath.Join(dir, ManifestName)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the manifest stayed: %v", err)
	}
}

// The kill test's child: it runs a pass with the tier killing the
// process (SIGKILL, as kill -9) right after the step named in the
// environment.
const (
	childStep = "BRAID_TIER_TEST_KILL_AFTER"
	childDir  = "BRAID_TIER_TEST_DIR"
	childNATS = "BRAID_TIER_TEST_NATS"
)

func TestMain(m *testing.M) {
	if step := os.Getenv(childStep); step != "" {
		runChild(step)
		return
	}
	os.Exit(m.Run())
}

func runChild(step string) {
	t := &testing.T{}
	root := os.Getenv(childDir)
	seen := 0
	tr := openTier(t, os.Getenv(childNATS), root, func(s string) {
		if s == step {
			if seen++; seen == 2 { // in the second file: the first one done
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
			}
		}
	})
	l, err := wal.Open(filepath.Join(root, "log"), wal.Options{Durability: wal.DurabilityAlways})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	pass(t, tr, l)
	fmt.Fprintln(os.Stderr, "the step never came:", step)
	os.Exit(3)
}

// TestKillAtEachStepOfAnOffload: a process killed with SIGKILL during an
// upload, after it, after the manifest record, and after the local delete
// loses no record, and once a pass has run again (and a sweep of dead
// uploads) the store holds exactly the objects the manifest lists.
func TestKillAtEachStepOfAnOffload(t *testing.T) {
	url := startNATS(t)
	for _, step := range []string{"uploading", "upload", "record", "drop"} {
		t.Run(step, func(t *testing.T) {
			root := t.TempDir()
			dir := filepath.Join(root, "log")
			writeLog(t, dir, 70)
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), childStep+"="+step, childDir+"="+root, childNATS+"="+url)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("the child was not killed: %v; %s", err, stderr.String())
			}
			tr := openTier(t, url, root, nil)
			// The store's bucket is shared by the subtests: clear what
			// earlier ones left (they checked it) — here only this log's.
			l, err := wal.Open(dir, wal.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			readAll(t, tr, l, 70)
			pass(t, tr, l)
			readAll(t, tr, l, 70)
			if _, err := tr.Sweep(context.Background(), 0); err != nil {
				t.Fatal(err)
			}
			entries, _ := tr.Entries(dir)
			var want []string
			for _, e := range entries {
				want = append(want, e.Object)
			}
			got := objects(t, tr)
			if !slices.Equal(got, want) || chunkSubjects(t, tr) != len(want) || len(want) != 3 {
				t.Fatalf("objects %v, %d chunk subjects; the manifest lists %v", got, chunkSubjects(t, tr), want)
			}
			if err := tr.DropLog(context.Background(), dir); err != nil {
				t.Fatal(err)
			}
			if n := chunkSubjects(t, tr); n != 0 || strings.Join(objects(t, tr), "") != "" {
				t.Fatalf("left after the drop: %d chunk subjects", n)
			}
		})
	}
}

// A log dropped while one of its files is being uploaded keeps nothing in
// the tier: the drop waits for the upload, and the upload, finding its log
// dropped, deletes what it sent instead of recording it (before, the
// upload recorded the file after the drop, and it stayed in the tier: a
// topic deleted while the storage worker offloaded it).
func TestDropDuringAnOffload(t *testing.T) {
	url := startNATS(t)
	root := t.TempDir()
	dir := filepath.Join(root, "t", "n", "x", "seg-0", "b-0")
	writeLog(t, dir, 50)
	var tr *Tier
	dropped := make(chan error, 1)
	var once sync.Once
	tr = openTier(t, url, root, func(step string) {
		if step != "uploading" {
			return
		}
		once.Do(func() {
			go func() { dropped <- tr.DropLog(context.Background(), dir) }()
			poll.Eventually(t, 10*time.Second, "the drop begun", func() bool {
				tr.mu.Lock()
				defer tr.mu.Unlock()
				return tr.dropping[dir]
			})
		})
	})
	l, err := wal.Open(dir, wal.Options{SegmentBytes: wal.Unlimited})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	files, err := l.ClosedFiles()
	if err != nil || len(files) == 0 {
		t.Fatalf("closed files %v, %v", files, err)
	}
	if err := tr.Offload(context.Background(), dir, l, files[0]); !errors.Is(err, ErrDropped) {
		t.Fatalf("an offload whose log was dropped meanwhile: %v, want ErrDropped", err)
	}
	if err := <-dropped; err != nil {
		t.Fatal(err)
	}
	if got := objects(t, tr); len(got) != 0 {
		t.Fatalf("the tier holds %v after the drop", got)
	}
	if err := tr.Offload(context.Background(), dir, l, files[0]); err != nil {
		t.Fatalf("an offload after the drop ended: %v", err)
	}
}
