// Package tier is the remote tier of a node's bucket logs (after Kafka's
// KIP-405): closed files of a log copied to a NATS JetStream object store
// bucket, recorded in a manifest kept in the log's directory, read back
// through a small local cache, and removed from the store by retention.
//
// An offload is three steps, each safe to die after:
//
//  1. upload: the file's bytes (from its first frame) are put to the
//     object store under a name fixed by the log's directory and the
//     file's first offset; a put that dies leaves no object (the store
//     writes an object's record after its chunks), and a put again of the
//     same file replaces it;
//  2. record: the manifest ("TIERED" in the log's directory, written to a
//     temporary file, fsynced and renamed) lists the file;
//  3. local delete: the caller removes the local copy (wal's
//     DropFilesBefore) when its local retention says so; until then reads
//     are served locally.
//
// Dying after 1 leaves an object the manifest does not list: the next
// offload of the file puts it again, and a caller that removes a local
// file that was never recorded calls Forget, which removes its object. So
// nothing is lost (the local copy goes only after step 2) and nothing leaks.
// Retention removes a file's object first, then its manifest entry: dying
// in between leaves an entry whose object is gone, which the next pass
// removes (a read of it in the meantime finds nothing, as after retention).
package tier

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/braidmq/braid/wal"
	"github.com/nats-io/nats.go/jetstream"
)

// DefaultBucket is the object store bucket of the tier.
const DefaultBucket = "braid-tier"

// ManifestName is the manifest's file name in a log's directory.
const ManifestName = "TIERED"

// ErrNotInTier says an offset is not held in the tier.
var ErrNotInTier = fmt.Errorf("%w: not in the remote tier", wal.ErrNotFound)

// Entry is one offloaded file of a log: offsets [First, Next), its bytes,
// the time (unix ms) of its newest record, and its object's name.
type Entry struct {
	First  uint64 `json:"first"`
	Next   uint64 `json:"next"`
	Bytes  int64  `json:"bytes"`
	Newest int64  `json:"newest"`
	Object string `json:"object"`
}

type manifest struct {
	Version int     `json:"version"`
	Entries []Entry `json:"entries"`
}

// Config configures a Tier.
type Config struct {
	// Root is the directory the logs live under: an object is named by its
	// log's path relative to it.
	Root string
	// CacheDir holds the files downloaded for reads (emptied at Open), at
	// most CacheBytes of them (default 256 MiB; the file being read may go
	// past it).
	CacheDir   string
	CacheBytes int64
	// Bucket and Replicas of the object store (default DefaultBucket, 1).
	Bucket   string
	Replicas int
	// AfterStep, for tests only, runs after each step of an offload
	// ("upload", "record").
	AfterStep func(step string)
}

// Tier is the remote tier of the logs under Config.Root. It is safe for
// concurrent use.
type Tier struct {
	cfg   Config
	js    jetstream.JetStream
	store jetstream.ObjectStore

	mu        sync.RWMutex       // read: a cached manifest; write: loading or replacing one
	manifests map[string][]Entry // by log directory
	cache     *cache
	// Guarded by mu: offloading counts the offloads under way by log
	// directory, dropping the directories a DropLog removes; idle is
	// signalled (on mu) when an offload ends. A drop waits for the
	// offloads of its directory, and an offload that finds its directory
	// dropping stops, deleting what it uploaded: else a file uploaded
	// while its topic was deleted was recorded after the drop, and stayed
	// in the tier.
	offloading map[string]int
	dropping   map[string]bool
	idle       *sync.Cond
}

// ErrDropped is returned by an Offload of a log whose directory is being
// dropped (DropLog): its topic or segment is going.
var ErrDropped = errors.New("braid/tier: the log is being dropped")

// Open opens (creating if need be) the tier's object store bucket.
func Open(ctx context.Context, js jetstream.JetStream, cfg Config) (*Tier, error) {
	if cfg.Bucket == "" {
		cfg.Bucket = DefaultBucket
	}
	if cfg.Replicas < 1 {
		cfg.Replicas = 1
	}
	if cfg.CacheBytes <= 0 {
		cfg.CacheBytes = 256 << 20
	}
	store, err := js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{
		Bucket: cfg.Bucket, Description: "Braid: closed files of bucket logs offloaded from local disk",
		Storage: jetstream.FileStorage, Replicas: cfg.Replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("braid/tier: opening the object store bucket %s: %w", cfg.Bucket, err)
	}
	if err := os.RemoveAll(cfg.CacheDir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.CacheDir, 0o750); err != nil {
		return nil, err
	}
	t := &Tier{cfg: cfg, js: js, store: store, manifests: map[string][]Entry{}, offloading: map[string]int{}, dropping: map[string]bool{}}
	t.idle = sync.NewCond(&t.mu)
	t.cache = newCache(cfg.CacheDir, cfg.CacheBytes)
	return t, nil
}

// Store is the tier's object store (for tests and tools).
func (t *Tier) Store() jetstream.ObjectStore { return t.store }

// objectName names the object of the file of the log in dir that starts
// at first.
func (t *Tier) objectName(dir string, first uint64) (string, error) {
	rel, err := filepath.Rel(t.cfg.Root, dir)
	if err != nil || rel == ".." || filepath.IsAbs(rel) || len(rel) >= 3 && rel[:3] == "../" {
		return "", fmt.Errorf("braid/tier: log %s is not under %s", dir, t.cfg.Root)
	}
	return filepath.ToSlash(rel) + "/" + fmt.Sprintf("%020d", first), nil
}

// Entries returns the offloaded files of the log in dir, by offset.
func (t *Tier) Entries(dir string) ([]Entry, error) {
	e, err := t.entries(dir)
	return slices.Clone(e), err
}

// entries returns the manifest of dir, read-only: cached (under the read
// lock, as every read of a unit asks for its first offset), else loaded.
// A manifest is replaced, never changed in place.
func (t *Tier) entries(dir string) ([]Entry, error) {
	t.mu.RLock()
	e, ok := t.manifests[dir]
	t.mu.RUnlock()
	if ok {
		return e, nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.entriesLocked(dir)
}

func (t *Tier) entriesLocked(dir string) ([]Entry, error) {
	if e, ok := t.manifests[dir]; ok {
		return e, nil
	}
	data, err := os.ReadFile(filepath.Join(dir, ManifestName))
	if errors.Is(err, os.ErrNotExist) {
		t.manifests[dir] = nil
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var m manifest
	if err := json.Unmarshal(data, &m); err != nil || m.Version != 1 {
		return nil, fmt.Errorf("braid/tier: the manifest of %s does not read (version %d): %v", dir, m.Version, err)
	}
	if m.Entries == nil {
		m.Entries = []Entry{}
	}
	t.manifests[dir] = m.Entries
	return m.Entries, nil
}

// writeLocked replaces the manifest of dir with entries, durably.
func (t *Tier) writeLocked(dir string, entries []Entry) error {
	path := filepath.Join(dir, ManifestName)
	if entries == nil {
		entries = []Entry{} // a manifest of no file: the log takes part
	}
	data, err := json.Marshal(manifest{Version: 1, Entries: entries})
	if err != nil {
		return err
	}
	temp := path + ".TEMP"
	f, err := os.OpenFile(temp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o640)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(temp, path); err != nil {
		return err
	}
	t.manifests[dir] = entries
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// First returns the first offset the tier holds of the log in dir, if it
// holds any.
func (t *Tier) First(dir string) (uint64, bool) {
	e, err := t.entries(dir)
	if err != nil || len(e) == 0 {
		return 0, false
	}
	return e[0].First, true
}

// Holds reports whether the tier holds the file of the log in dir that
// starts at first.
func (t *Tier) Holds(dir string, first uint64) bool {
	e, _ := t.entries(dir)
	return slices.ContainsFunc(e, func(e Entry) bool { return e.First == first })
}

// Bytes returns the bytes the tier holds of the log in dir.
func (t *Tier) Bytes(dir string) int64 {
	e, _ := t.entries(dir)
	var n int64
	for _, e := range e {
		n += e.Bytes
	}
	return n
}

// Offload copies the closed file f of the log l (in dir) to the tier and
// records it: steps 1 and 2 of an offload. The file must follow the last
// one recorded (offsets are offloaded in order), and be whole: a file with
// damage is refused and stays local.
func (t *Tier) Offload(ctx context.Context, dir string, l *wal.Log, f wal.FileInfo) error {
	t.mu.Lock()
	if t.dropping[dir] {
		t.mu.Unlock()
		return ErrDropped
	}
	t.offloading[dir]++
	t.mu.Unlock()
	defer func() {
		t.mu.Lock()
		if t.offloading[dir]--; t.offloading[dir] == 0 {
			delete(t.offloading, dir)
		}
		t.idle.Broadcast()
		t.mu.Unlock()
	}()
	entries, err := t.Entries(dir)
	if err != nil {
		return err
	}
	if n := len(entries); n > 0 && entries[n-1].Next > f.First {
		return fmt.Errorf("braid/tier: file [%d, %d) of %s is below the tier's last [%d, %d): offloaded in order", f.First, f.Next, dir, entries[n-1].First, entries[n-1].Next)
	}
	if len(entries) == 0 && f.First != l.FirstOffset() {
		return fmt.Errorf("braid/tier: file [%d, %d) of %s is not the log's first (the tier holds its offsets in order, from %d)", f.First, f.Next, dir, l.FirstOffset())
	}
	name, err := t.objectName(dir, f.First)
	if err != nil {
		return err
	}
	if entries == nil {
		// The log's first offload: its manifest is there before any
		// object of it, so that Forget knows to look (see Tracks).
		t.mu.Lock()
		err := t.writeLocked(dir, nil)
		t.mu.Unlock()
		if err != nil {
			return fmt.Errorf("braid/tier: starting the manifest of %s: %w", dir, err)
		}
	}
	r, closeFile, err := l.OpenClosedFile(f.First)
	if err != nil {
		return err
	}
	defer closeFile()
	if _, err := wal.NewFileReader(r, r.Size(), f.First, f.Next); err != nil {
		return fmt.Errorf("braid/tier: file [%d, %d) of %s is not whole, not offloaded: %w", f.First, f.Next, dir, err)
	}
	var body io.Reader = r
	if t.cfg.AfterStep != nil {
		body = &stepReader{r: r, step: t.step}
	}
	info, err := t.store.Put(ctx, jetstream.ObjectMeta{Name: name, Metadata: map[string]string{
		"first": strconv.FormatUint(f.First, 10), "next": strconv.FormatUint(f.Next, 10), "newest": strconv.FormatInt(f.Newest, 10),
	}}, body)
	if err != nil {
		return fmt.Errorf("braid/tier: uploading [%d, %d) of %s: %w", f.First, f.Next, dir, err)
	}
	if int64(info.Size) != r.Size() {
		return fmt.Errorf("braid/tier: uploaded %d bytes of [%d, %d) of %s, want %d", info.Size, f.First, f.Next, dir, r.Size())
	}
	t.step("upload")
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.dropping[dir] {
		// Uploaded while the log was dropped: the drop cannot see it.
		if derr := t.store.Delete(context.Background(), name); derr != nil && !errors.Is(derr, jetstream.ErrObjectNotFound) {
			return fmt.Errorf("%w; deleting the object uploaded meanwhile failed (the sweep removes it): %v", ErrDropped, derr)
		}
		return ErrDropped
	}
	entries, err = t.entriesLocked(dir)
	if err != nil {
		return err
	}
	entries = append(slices.Clone(entries), Entry{First: f.First, Next: f.Next, Bytes: r.Size(), Newest: f.Newest, Object: name})
	if err := t.writeLocked(dir, entries); err != nil {
		return fmt.Errorf("braid/tier: recording [%d, %d) of %s: %w", f.First, f.Next, dir, err)
	}
	t.step("record")
	return nil
}

// stepReader reports "uploading" at its second read: the upload is under
// way, its first chunk sent.
type stepReader struct {
	r     io.Reader
	reads int
	step  func(string)
}

func (s *stepReader) Read(p []byte) (int, error) {
	if s.reads++; s.reads == 2 {
		s.step("uploading")
	}
	return s.r.Read(p)
}

// Sweep removes the chunks of uploads that died before their object was
// recorded in the store (a kill during a put) and are older than
// olderThan, so that younger ones, of puts still under way on this node or
// another, stay. It returns how many objects' chunks it removed.
func (t *Tier) Sweep(ctx context.Context, olderThan time.Duration) (int, error) {
	infos, err := t.store.List(ctx)
	if err != nil && !errors.Is(err, jetstream.ErrNoObjectsFound) {
		return 0, err
	}
	live := map[string]bool{}
	for _, info := range infos {
		live[info.NUID] = true
	}
	stream, err := t.js.Stream(ctx, "OBJ_"+t.cfg.Bucket)
	if err != nil {
		return 0, err
	}
	prefix := "$O." + t.cfg.Bucket + ".C."
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter(prefix+">"))
	if err != nil {
		return 0, err
	}
	purged := 0
	for subject := range info.State.Subjects {
		if live[strings.TrimPrefix(subject, prefix)] {
			continue
		}
		last, err := stream.GetLastMsgForSubject(ctx, subject)
		if err != nil || time.Since(last.Time) < olderThan {
			continue
		}
		if err := stream.Purge(ctx, jetstream.WithPurgeSubject(subject)); err != nil {
			return purged, err
		}
		purged++
	}
	return purged, nil
}

func (t *Tier) step(name string) {
	if t.cfg.AfterStep != nil {
		t.cfg.AfterStep(name)
	}
}

// Tracks reports whether the log in dir has a manifest: whether it was
// ever offloaded (or an offload of it started).
func (t *Tier) Tracks(dir string) bool {
	e, err := t.entries(dir)
	return e != nil || err != nil
}

// Forget removes the object an offload of the file of the log in dir that
// starts at first may have left unrecorded (it died after its upload),
// before the caller removes that file locally. A recorded file is not
// touched, and a log the tier does not track (see Tracks) costs nothing.
func (t *Tier) Forget(ctx context.Context, dir string, first uint64) error {
	if !t.Tracks(dir) || t.Holds(dir, first) {
		return nil
	}
	name, err := t.objectName(dir, first)
	if err != nil {
		return err
	}
	if err := t.store.Delete(ctx, name); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
		return err
	}
	return nil
}

// Expire removes from the head of the log's tier the files expired says
// are, objects first; it returns how many files and bytes went.
func (t *Tier) Expire(ctx context.Context, dir string, expired func(Entry) bool) (files int, bytes int64, err error) {
	entries, err := t.Entries(dir)
	if err != nil {
		return 0, 0, err
	}
	k := 0
	for k < len(entries) && expired(entries[k]) {
		if derr := t.store.Delete(ctx, entries[k].Object); derr != nil && !errors.Is(derr, jetstream.ErrObjectNotFound) {
			err = fmt.Errorf("braid/tier: removing %s: %w", entries[k].Object, derr)
			break
		}
		t.cache.drop(entries[k].Object)
		bytes += entries[k].Bytes
		k++
	}
	if k == 0 {
		return 0, 0, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	current, rerr := t.entriesLocked(dir)
	if rerr != nil {
		return 0, 0, rerr
	}
	// Entries only ever go from the head: drop the ones removed.
	cut := sort.Search(len(current), func(i int) bool { return current[i].First >= entries[k-1].Next })
	if werr := t.writeLocked(dir, slices.Clone(current[cut:])); werr != nil {
		return 0, 0, werr
	}
	return k, bytes, err
}

// DropLog removes everything the tier holds of the log in dir (its topic
// or segment was deleted): its objects, then its manifest.
func (t *Tier) DropLog(ctx context.Context, dir string) error {
	t.mu.Lock()
	t.dropping[dir] = true
	for t.offloading[dir] > 0 {
		t.idle.Wait()
	}
	t.mu.Unlock()
	defer func() {
		t.mu.Lock()
		delete(t.dropping, dir)
		t.mu.Unlock()
	}()
	if _, _, err := t.Expire(ctx, dir, func(Entry) bool { return true }); err != nil {
		return err
	}
	if e, _ := t.Entries(dir); len(e) > 0 {
		return fmt.Errorf("braid/tier: %d files of %s are still in the tier", len(e), dir)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.manifests, dir)
	if err := os.Remove(filepath.Join(dir, ManifestName)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// ForgetLog forgets the manifest of a log whose directory is gone.
func (t *Tier) ForgetLog(dir string) {
	t.mu.Lock()
	delete(t.manifests, dir)
	t.mu.Unlock()
}

// Read reads up to max records (within maxBytes, at least one) of the log
// in dir from offset from, out of the tier: from the file that holds it,
// downloaded to the cache if it is not there. It returns ErrNotInTier
// when the tier does not hold from, and stops at the end of that file.
func (t *Tier) Read(ctx context.Context, dir string, from uint64, max, maxBytes int) ([]wal.Record, error) {
	entries, err := t.Entries(dir)
	if err != nil {
		return nil, err
	}
	i := sort.Search(len(entries), func(i int) bool { return entries[i].Next > from })
	if i == len(entries) || entries[i].First > from {
		return nil, ErrNotInTier
	}
	e := entries[i]
	fr, release, err := t.cache.get(ctx, t.store, e)
	if err != nil {
		return nil, err
	}
	defer release()
	return fr.ReadRange(from, max, maxBytes)
}
