package replica

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/braidmq/braid/wal"
)

// A StateJournal makes the state changes of every group on a node durable
// with one write and one fdatasync of its own file a round (the host's
// append rounds sync it beside the logs' commit), instead of a replaced
// state file, its fsync, a rename and a directory fsync per group per
// change. An election of thousands of groups at once (a node's first
// writes to many new topics, a node lost) is then a few rounds, not tens
// of thousands of syncs.
//
// A record is a group's whole state (its encoding, with its instance and
// seq), named by the state file's path under the journal's root. The state
// files stay the groups' states at rest: at a checkpoint (after the
// journal rolls to a new file, and after a start that found files) the
// latest record of every group written in the older files is written to
// its state file durably, and those files are removed. A group opening
// takes the journal's latest record of it when that is of its instance and
// newer (higher seq) than its file (OpenStorageIn).
//
// A journal file:
//
//	"RSJ" 1 (4B: magic, version) | record | record | ...
//	record: CRC32C of body (4B, LE) | body size (4B, LE) | body
//	body:   path length (uvarint) | path | state (its encoding)
//
// Replay stops reading a file at the first record cut short or failing its
// CRC (a round's write a crash cut: it was not acknowledged), or at the
// zeros written ahead of the records.
type StateJournal struct {
	fsys     wal.FS
	dir      string
	root     string
	maxBytes int64

	mu      sync.Mutex
	file    wal.File
	number  uint64
	size    int64 // where the next write goes
	alloc   int64 // how far the file was filled with zeros
	pending []byte
	staged  uint64 // records staged so far
	written uint64 // records written and synced
	entries map[string]*stateEntry
	err     error // closed: the journal takes no more
	// broken says a write or sync of the current file failed: what its
	// tail holds is unknown, so the next write starts a new file; lost
	// holds the positions of the records such writes took (their groups
	// were told, and fail).
	broken bool
	lost   []lostRange

	syncMu        sync.Mutex // one write and sync at a time
	checkpointing sync.Mutex // one checkpoint at a time
	background    sync.WaitGroup
	onError       atomic.Pointer[func(error)]

	syncs, records, checkpoints, failures atomic.Uint64
}

// lostRange is the positions (from, to] of records a failed write took.
type lostRange struct {
	from, to uint64
	err      error
}

// maxLostRanges bounds the failed writes remembered: a record's position
// is asked for (SyncTo) right after it is staged.
const maxLostRanges = 64

// lostErr is the error of the failed write that took the record at pos,
// or nil. The caller holds mu.
func (j *StateJournal) lostErr(pos uint64) error {
	for _, r := range j.lost {
		if pos > r.from && pos <= r.to {
			return r.err
		}
	}
	return nil
}

// stateEntry is a group's latest record, and the oldest journal file
// holding a record of it not yet in its state file: a checkpoint of that
// file writes the latest (durable by then, or soon: a state durable
// earlier than raft asks is no harm), so that no acknowledged state goes
// with the file.
type stateEntry struct {
	last   []byte
	oldest uint64
}

const (
	stateJournalMagic  = "RSJ\x01"
	stateJournalSuffix = ".rsj"
	// DefaultStateJournalBytes is the size past which the journal rolls to
	// a new file (and checkpoints the older ones).
	DefaultStateJournalBytes = 8 << 20
	stateJournalAhead        = 1 << 20
)

var stateZeros = make([]byte, 64<<10)

// OpenStateJournal opens the journal in dir for the state files under
// root (fsys: OSFS if nil; maxBytes: DefaultStateJournalBytes if 0): it
// reads the records of the files it finds, starts a new file, and
// checkpoints the older ones in the background.
func OpenStateJournal(dir, root string, fsys wal.FS, maxBytes int64) (*StateJournal, error) {
	if fsys == nil {
		fsys = wal.OSFS
	}
	if maxBytes <= 0 {
		maxBytes = DefaultStateJournalBytes
	}
	if err := wal.MkdirDurable(fsys, dir); err != nil {
		return nil, err
	}
	j := &StateJournal{fsys: fsys, dir: dir, root: root, maxBytes: maxBytes, entries: map[string]*stateEntry{}}
	numbers, err := j.files()
	if err != nil {
		return nil, err
	}
	for _, n := range numbers {
		if err := j.replay(n); err != nil {
			return nil, err
		}
	}
	next := uint64(1)
	if len(numbers) > 0 {
		next = numbers[len(numbers)-1] + 1
	}
	if err := j.startFile(next); err != nil {
		return nil, err
	}
	if len(numbers) > 0 {
		j.checkpointLater(next - 1)
	}
	return j, nil
}

// OnError sets what hears of a failed write or sync (the groups whose
// records it took fail; the journal goes on in a new file) or a failed
// roll or checkpoint (its files are kept, and checkpointed at the next
// roll or start).
func (j *StateJournal) OnError(f func(error)) { j.onError.Store(&f) }

// StateJournalCounts are what a StateJournal did.
type StateJournalCounts struct {
	Syncs, Records, Checkpoints, Failures uint64
}

// Counts returns what the journal did.
func (j *StateJournal) Counts() StateJournalCounts {
	return StateJournalCounts{Syncs: j.syncs.Load(), Records: j.records.Load(), Checkpoints: j.checkpoints.Load(), Failures: j.failures.Load()}
}

func stateJournalName(n uint64) string { return fmt.Sprintf("%020d%s", n, stateJournalSuffix) }

// files lists the journal's file numbers, in order.
func (j *StateJournal) files() ([]uint64, error) {
	entries, err := j.fsys.ReadDir(j.dir)
	if err != nil {
		return nil, err
	}
	var out []uint64
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), stateJournalSuffix)
		if !ok || e.IsDir() {
			continue
		}
		n, err := strconv.ParseUint(name, 10, 64)
		if err != nil {
			continue
		}
		out = append(out, n)
	}
	slices.Sort(out)
	return out, nil
}

// replay reads the records of file n into the entries.
func (j *StateJournal) replay(n uint64) error {
	b, err := wal.ReadFile(j.fsys, filepath.Join(j.dir, stateJournalName(n)))
	if err != nil {
		return err
	}
	if len(b) < len(stateJournalMagic) {
		return nil // made by a roll a crash cut short: nothing in it was acknowledged
	}
	if string(b[:len(stateJournalMagic)]) != stateJournalMagic {
		return fmt.Errorf("braid/replica: %s is no state journal of this version", filepath.Join(j.dir, stateJournalName(n)))
	}
	b = b[len(stateJournalMagic):]
	for len(b) >= 8 {
		sum, size := binary.LittleEndian.Uint32(b), binary.LittleEndian.Uint32(b[4:])
		if size == 0 || uint64(size) > uint64(len(b)-8) {
			break
		}
		body := b[8 : 8+size]
		if crc32.Checksum(body, castagnoli) != sum {
			break
		}
		plen, k := binary.Uvarint(body)
		if k <= 0 || plen > uint64(len(body)-k) {
			break
		}
		path, rec := string(body[k:k+int(plen)]), body[k+int(plen):]
		if _, err := decodeState(rec); err != nil {
			break
		}
		if e := j.entries[path]; e != nil {
			e.last = slices.Clone(rec)
		} else {
			j.entries[path] = &stateEntry{last: slices.Clone(rec), oldest: n}
		}
		b = b[8+size:]
	}
	return nil
}

// startFile makes file n the one records go to (under syncMu, or before
// the journal is shared).
func (j *StateJournal) startFile(n uint64) error {
	f, err := j.fsys.OpenFile(filepath.Join(j.dir, stateJournalName(n)), os.O_CREATE|os.O_RDWR|os.O_TRUNC, 0o640)
	if err != nil {
		return err
	}
	if _, err := f.WriteAt([]byte(stateJournalMagic), 0); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := j.fsys.SyncDir(j.dir); err != nil {
		f.Close()
		return err
	}
	j.mu.Lock()
	old := j.file
	j.file, j.number, j.size, j.alloc = f, n, int64(len(stateJournalMagic)), int64(len(stateJournalMagic))
	j.mu.Unlock()
	if old != nil {
		_ = old.Close()
	}
	return nil
}

// rel names a state file by its path under the root.
func (j *StateJournal) rel(path string) (string, error) {
	r, err := filepath.Rel(j.root, path)
	if err != nil || r == ".." || strings.HasPrefix(r, ".."+string(filepath.Separator)) {
		return "", fmt.Errorf("braid/replica: state file %s is not under the state journal's root %s", path, j.root)
	}
	return r, nil
}

// stage adds a group's state to what the next write takes, and returns
// its position: durable once SyncTo that position returns.
func (j *StateJournal) stage(rel string, rec []byte) uint64 {
	body := binary.AppendUvarint(nil, uint64(len(rel)))
	body = append(body, rel...)
	body = append(body, rec...)
	j.mu.Lock()
	defer j.mu.Unlock()
	j.pending = binary.LittleEndian.AppendUint32(j.pending, crc32.Checksum(body, castagnoli))
	j.pending = binary.LittleEndian.AppendUint32(j.pending, uint32(len(body)))
	j.pending = append(j.pending, body...)
	j.staged++
	if e := j.entries[rel]; e != nil {
		e.last = rec
	} else {
		j.entries[rel] = &stateEntry{last: rec, oldest: j.number}
	}
	return j.staged
}

// latest returns the journal's latest record of the state file rel.
func (j *StateJournal) latest(rel string) []byte {
	j.mu.Lock()
	defer j.mu.Unlock()
	if e := j.entries[rel]; e != nil {
		return e.last
	}
	return nil
}

// Sync makes every record staged so far durable.
func (j *StateJournal) Sync() error {
	j.mu.Lock()
	pos := j.staged
	j.mu.Unlock()
	return j.SyncTo(pos)
}

// SyncTo makes the records staged up to pos durable: one write and one
// fdatasync for all that is staged then, callers at once sharing it. A
// write or sync that fails fails the records it took, for good (their
// groups fail, and their copies are made again from their peers; a later
// fsync that succeeds would not make them durable), and the journal goes
// on in a new file: a disk that failed a moment, or filled up, takes the
// other groups' states again once it can.
func (j *StateJournal) SyncTo(pos uint64) error {
	done := func() (bool, error) {
		if j.err != nil {
			return true, j.err
		}
		if err := j.lostErr(pos); err != nil {
			return true, err
		}
		return j.written >= pos, nil
	}
	j.mu.Lock()
	if ok, err := done(); ok {
		j.mu.Unlock()
		return err
	}
	j.mu.Unlock()
	j.syncMu.Lock()
	defer j.syncMu.Unlock()
	j.mu.Lock()
	if ok, err := done(); ok {
		j.mu.Unlock()
		return err
	}
	broken := j.broken
	j.mu.Unlock()
	var err error
	if broken {
		err = j.startFile(j.number + 1)
	}
	j.mu.Lock()
	buf, upto, f, at := j.pending, j.staged, j.file, j.size
	j.pending = nil
	j.size += int64(len(buf))
	alloc := j.alloc
	j.mu.Unlock()
	if err == nil {
		err = j.write(f, buf, at, alloc)
	}
	j.mu.Lock()
	if err != nil {
		err = fmt.Errorf("braid/replica: the state journal %s: %w", j.dir, err)
		j.broken = true
		j.lost = append(j.lost, lostRange{from: j.written, to: upto, err: err})
		if len(j.lost) > maxLostRanges {
			j.lost = j.lost[1:]
		}
		j.written = upto
		j.mu.Unlock()
		j.report(err)
		return err
	}
	j.broken = false
	j.records.Add(upto - j.written)
	j.written = upto
	j.syncs.Add(1)
	if end := at + int64(len(buf)); end > j.alloc {
		j.alloc = max(j.alloc, end+stateJournalAhead)
	}
	roll := j.size >= j.maxBytes
	old := j.number
	j.mu.Unlock()
	if roll {
		if err := j.startFile(old + 1); err != nil {
			// The next sync tries again; records go on to the old file.
			j.report(fmt.Errorf("braid/replica: rolling the state journal %s: %w", j.dir, err))
			return nil
		}
		j.checkpointLater(old)
	}
	return nil
}

// write writes buf at at and syncs it, writing zeros ahead first when the
// records reach past them (so that a sync seldom changes the file's size).
func (j *StateJournal) write(f wal.File, buf []byte, at, alloc int64) error {
	if len(buf) == 0 {
		return nil
	}
	end := at + int64(len(buf))
	if end > alloc && j.fsys == wal.OSFS {
		for p := max(alloc, end); p < end+stateJournalAhead; {
			n := min(int64(len(stateZeros)), end+stateJournalAhead-p)
			if _, err := f.WriteAt(stateZeros[:n], p); err != nil {
				return err
			}
			p += n
		}
	}
	if _, err := f.WriteAt(buf, at); err != nil {
		return err
	}
	return f.Sync()
}

func (j *StateJournal) report(err error) {
	j.failures.Add(1)
	if f := j.onError.Load(); f != nil {
		(*f)(err)
	}
}

// checkpointLater checkpoints the files up to upto in the background.
func (j *StateJournal) checkpointLater(upto uint64) {
	j.background.Add(1)
	go func() {
		defer j.background.Done()
		if err := j.checkpoint(upto); err != nil {
			j.report(err)
		}
	}()
}

// checkpoint writes the latest record of every group whose latest went to
// a file up to upto into its state file, then removes those files.
func (j *StateJournal) checkpoint(upto uint64) error {
	j.checkpointing.Lock()
	defer j.checkpointing.Unlock()
	type item struct {
		rel  string
		last []byte
	}
	var items []item
	j.mu.Lock()
	for rel, e := range j.entries {
		if e.oldest <= upto {
			items = append(items, item{rel, e.last})
		}
	}
	// Records staged from now on go to this file or later ones.
	current := j.number
	j.mu.Unlock()
	errs := make([]error, len(items))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(16, len(items)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < len(items); i = int(next.Add(1) - 1) {
				errs[i] = j.writeStateFile(items[i].rel, items[i].last)
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("braid/replica: checkpointing the state journal %s (its files are kept): %w", j.dir, err)
	}
	j.mu.Lock()
	for _, it := range items {
		switch e := j.entries[it.rel]; {
		case e == nil:
		case &e.last[0] == &it.last[0]:
			delete(j.entries, it.rel) // its state file has its latest
		default:
			e.oldest = max(e.oldest, current) // changed since: in later files
		}
	}
	j.mu.Unlock()
	numbers, err := j.files()
	if err != nil {
		return err
	}
	for _, n := range numbers {
		if n > upto {
			break
		}
		if err := j.fsys.Remove(filepath.Join(j.dir, stateJournalName(n))); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	if err := j.fsys.SyncDir(j.dir); err != nil {
		return err
	}
	j.checkpoints.Add(1)
	return nil
}

// writeStateFile writes record rec to the state file rel durably if that
// file holds an older state of the same instance. A file that is gone (its
// group removed) or of another instance (its path used again) is left.
func (j *StateJournal) writeStateFile(rel string, rec []byte) error {
	path := filepath.Join(j.root, rel)
	cur, found, err := readState(j.fsys, path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	st, err := decodeState(rec)
	if err != nil {
		return err
	}
	if !found || cur.instance != st.instance || cur.seq >= st.seq {
		return nil
	}
	if err := wal.ReplaceFile(j.fsys, path, rec); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// Close writes what is staged, waits for the checkpoints under way and
// closes the file. The groups must be stopped first; what is in the
// journal's files is read again at the next open.
func (j *StateJournal) Close() error {
	err := j.Sync()
	j.background.Wait()
	j.syncMu.Lock()
	defer j.syncMu.Unlock()
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.file != nil {
		if cerr := j.file.Close(); err == nil {
			err = cerr
		}
		j.file = nil
	}
	if j.err == nil {
		j.err = errors.New("braid/replica: the state journal is closed")
	}
	return err
}

// newInstance makes a random instance id (never 0).
func newInstance() uint64 {
	var b [8]byte
	for {
		_, _ = rand.Read(b[:])
		if v := binary.LittleEndian.Uint64(b[:]); v != 0 {
			return v
		}
	}
}
