package wal

import (
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
)

// A Journal makes the commits of many logs durable with one sequential
// write and one fdatasync of its own file per round (see CommitGroup),
// instead of a sync of every log's file: the logs' files are written as
// always, and their pages reach the disk later, at a checkpoint or when
// the kernel writes them back. Each log keeps its own files, read as
// always; the journal is only read after a crash.
//
// Why: spread over many logs, a round syncs many files with a few records
// each. A syncfs over 128 files with 120 bytes written to each writes back
// 128 data blocks and their inodes (the times changed) and commits the
// file system's journal; the same round through a Journal writes 128 x
// ~200 bytes to one file and fdatasyncs it. On this project's machine, a
// loop of such rounds made 21k-25k records a second durable with syncfs
// and 73k-86k with the journal.
//
// The journal is physical redo: each write a journaled log makes to its
// tail file is journaled as the bytes and where they went (the log's path
// under the journal's root, the file, the position, the log's journal
// generation). ReplayJournal writes them again where they went, in order,
// before any log is opened after a crash: writing the same bytes at the
// same place is harmless when they got there, and restores them when they
// did not. Replay never creates a file: a file or log that is gone was
// removed on purpose (a deleted topic or segment, a file retention
// dropped), and a file that a round's records went to was made durable in
// its directory before the round was acknowledged.
//
// Two things would make replay write what should stay gone, and both are
// fenced. TruncateTail cuts records and may later reuse their offsets, and
// the names of files it removes: it first syncs the log's files, then
// raises the log's journal generation (a small file in its directory,
// written durably), then cuts; replay skips entries of an older
// generation. TruncateHead only removes files and replaces the first one
// by a file named by a higher offset, a name no entry can have.
//
// Journal files are numbered and rolled at MaxBytes. A checkpoint (in the
// background, after a roll) syncs what was journaled in the older files
// into the logs' own files (one syncfs of the root's file system, or an
// fdatasync of each log written, on other file systems) and removes them.
//
// A journal file:
//
//	file:   "J" "1" (2B: magic, version) | entry | entry | ...
//	entry:
//	+-------------+-------------+----------------------------------------+
//	| CRC32C (4B, | size (4B,   | body (size bytes)                      |
//	| LE) of body | LE)         |                                        |
//	+-------------+-------------+----------------------------------------+
//	body: gen (8B) | file first offset (8B) | position (8B) |
//	      pathLen (2B) | path | data (the rest)
//
// All integers little-endian. Replay stops reading a file at the first
// entry that is cut short or fails its CRC (a round whose write a crash
// cut: it was not acknowledged).
type Journal struct {
	fsys     FS
	dir      string // the journal's files
	root     string // journaled logs are named by their path under root
	rootDev  uint64 // root's file system (OSFS), 0 when unknown
	maxBytes int64

	mu sync.Mutex
	// Guarded by mu: file is the journal file rounds write to, number
	// its number and size the length of what it holds; alloc is how far
	// it was filled with zeros ahead (so that its syncs need no change of
	// its size); logs are the logs journaled since the last checkpoint
	// began; closed is set by Close.
	file   File
	number uint64
	size   int64
	alloc  int64
	logs   map[*Log]struct{}
	closed bool
	// broken says a round's write or sync failed: what the file holds
	// after its last good round is unknown, so the next round starts a
	// new file (replay stops at the damage in this one).
	broken bool

	// checkpointing is held while a checkpoint runs (one at a time).
	checkpointing sync.Mutex
	// onCheckpointError, when set, hears of each failed checkpoint.
	onCheckpointError func(error)

	// directBytes, when positive, makes a log that writes this much
	// between two commits commit by syncing its own file
	// (SyncDirectlyFrom); directCommits counts those commits.
	directBytes int

	rounds, entries, bytes, checkpoints atomic.Uint64
	checkpointFailures, directCommits   atomic.Uint64
}

// DefaultJournalBytes is the size past which a journal rolls to a new file
// and checkpoints the old one.
const DefaultJournalBytes = 64 << 20

const (
	journalMagic     = "J1"
	journalSuffix    = ".journal"
	journalHeaderLen = 8
	journalFixedLen  = 8 + 8 + 8 + 2
	genFileName      = "journal-generation"
)

// ErrJournalClosed is returned by a round that writes to a closed Journal.
var ErrJournalClosed = errors.New("braid/wal: journal closed")

// OpenJournal opens a journal in dir for the logs under root, starting a
// new file after the ones there. Replay what is there first
// (ReplayJournal): the files of an earlier run are left alone until a
// checkpoint, which removes them. maxBytes <= 0 is DefaultJournalBytes;
// fsys nil is OSFS.
func OpenJournal(dir, root string, fsys FS, maxBytes int64) (*Journal, error) {
	if fsys == nil {
		fsys = OSFS
	}
	if maxBytes <= 0 {
		maxBytes = DefaultJournalBytes
	}
	if err := mkdirDurable(fsys, dir); err != nil {
		return nil, fmt.Errorf("braid/wal: journal: %w", err)
	}
	numbers, err := journalFiles(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("braid/wal: journal: %w", err)
	}
	j := &Journal{fsys: fsys, dir: dir, root: filepath.Clean(root), maxBytes: maxBytes, logs: map[*Log]struct{}{}}
	if fsys == OSFS {
		if err := mkdirDurable(fsys, root); err != nil {
			return nil, fmt.Errorf("braid/wal: journal: %w", err)
		}
		d, err := os.Open(root)
		if err != nil {
			return nil, fmt.Errorf("braid/wal: journal: %w", err)
		}
		j.rootDev = deviceOf(d)
		d.Close()
	}
	next := uint64(1)
	if len(numbers) > 0 {
		next = numbers[len(numbers)-1] + 1
	}
	if err := j.startFileLocked(next); err != nil {
		return nil, err
	}
	return j, nil
}

// OnCheckpointError sets what hears of a failed checkpoint (the journal
// files it could not remove stay, and the next checkpoint tries again).
func (j *Journal) OnCheckpointError(f func(error)) { j.onCheckpointError = f }

// SyncDirectlyFrom makes the journal adaptive: a log that writes at least
// bytes between two of its commits commits by an fdatasync of its own file
// (in the round, beside the others' journal write) instead of journaling
// what it wrote; 0 (the default) journals everything. Call it before logs
// open.
//
// Why: the journal turns a round's many small syncs into one, which is
// what load spread over many logs needs; but every byte it takes is
// copied twice and written twice (to the journal now, to the log's file
// later), which is what one busy log, writing much per commit, cannot
// afford: on this project's machine a topic of 16 logs produced 1 KiB
// messages at 0.6x the rate of fdatasync through the journal.
func (j *Journal) SyncDirectlyFrom(bytes int) { j.directBytes = bytes }

// JournalCounts are what a Journal did; DirectCommits counts the commits
// of journaled logs that synced their own files (SyncDirectlyFrom).
type JournalCounts struct {
	Rounds, Entries, Bytes, Checkpoints, CheckpointFailures, DirectCommits uint64
}

// Counts returns what the journal did.
func (j *Journal) Counts() JournalCounts {
	return JournalCounts{Rounds: j.rounds.Load(), Entries: j.entries.Load(), Bytes: j.bytes.Load(),
		Checkpoints: j.checkpoints.Load(), CheckpointFailures: j.checkpointFailures.Load(),
		DirectCommits: j.directCommits.Load()}
}

func journalName(number uint64) string { return fmt.Sprintf("%020d%s", number, journalSuffix) }

// journalFiles returns the numbers of the journal files in dir, ascending.
func journalFiles(fsys FS, dir string) ([]uint64, error) {
	entries, err := fsys.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var numbers []uint64
	for _, e := range entries {
		digits, ok := strings.CutSuffix(e.Name(), journalSuffix)
		if !ok || e.IsDir() {
			continue
		}
		if n, err := strconv.ParseUint(digits, 10, 64); err == nil {
			numbers = append(numbers, n)
		}
	}
	slices.Sort(numbers)
	return numbers, nil
}

// startFileLocked makes journal file number the one rounds write to; its
// name is durable in the directory before any round writes to it.
func (j *Journal) startFileLocked(number uint64) error {
	f, err := j.fsys.OpenFile(filepath.Join(j.dir, journalName(number)), os.O_CREATE|os.O_RDWR|os.O_TRUNC, 0o640)
	if err != nil {
		return fmt.Errorf("braid/wal: journal: %w", err)
	}
	header := make([]byte, journalHeaderLen)
	copy(header, journalMagic)
	if _, err := f.WriteAt(header, 0); err == nil {
		err = f.Sync()
	}
	if err == nil {
		err = syncDir(j.fsys, j.dir)
	}
	if err != nil {
		f.Close()
		return fmt.Errorf("braid/wal: journal: start %s: %w", journalName(number), err)
	}
	old := j.file
	j.file, j.number, j.size, j.alloc = f, number, journalHeaderLen, journalHeaderLen
	if old != nil {
		old.Close()
	}
	return nil
}

// relPath returns how the journal names the log in dir, and false when
// dir is not under the journal's root (such a log syncs its own files).
func (j *Journal) relPath(dir string) (string, bool) {
	rel, err := filepath.Rel(j.root, filepath.Clean(dir))
	if err != nil || rel == "." || strings.HasPrefix(rel, "..") || len(rel) > 0xffff {
		return "", false
	}
	return rel, true
}

// appendJournalEntry appends the entry of data written at pos of the file
// of a log (named rel, at generation gen) that starts at offset first.
func appendJournalEntry(dst []byte, rel string, gen, first uint64, pos int64, data []byte) []byte {
	start := len(dst)
	dst = append(dst, make([]byte, 8)...)
	dst = binary.LittleEndian.AppendUint64(dst, gen)
	dst = binary.LittleEndian.AppendUint64(dst, first)
	dst = binary.LittleEndian.AppendUint64(dst, uint64(pos))
	dst = binary.LittleEndian.AppendUint16(dst, uint16(len(rel)))
	dst = append(dst, rel...)
	dst = append(dst, data...)
	body := dst[start+8:]
	binary.LittleEndian.PutUint32(dst[start:], crc32.Checksum(body, castagnoli))
	binary.LittleEndian.PutUint32(dst[start+4:], uint32(len(body)))
	return dst
}

// writeRound writes a round's entries (of the logs given) to the journal
// file and fdatasyncs it; past MaxBytes it rolls to a new file and starts
// a checkpoint of the old ones in the background.
func (j *Journal) writeRound(entries []byte, count int, logs []*Log) error {
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		return ErrJournalClosed
	}
	if j.broken {
		if err := j.startFileLocked(j.number + 1); err != nil {
			j.mu.Unlock()
			return fmt.Errorf("journal: %w", err)
		}
		j.broken = false
	}
	f, at := j.file, j.size
	j.size += int64(len(entries))
	for _, l := range logs {
		j.logs[l] = struct{}{}
	}
	err := j.preallocateLocked()
	if err == nil {
		ioWrites.Add(1)
		_, err = f.WriteAt(entries, at)
	}
	if err == nil {
		ioSyncs.Add(1)
		err = f.Sync()
	}
	j.broken = err != nil
	roll := err == nil && j.size >= j.maxBytes
	if roll {
		if rerr := j.startFileLocked(j.number + 1); rerr != nil {
			// Keep writing to the file we have; the next round tries again.
			roll = false
			if j.onCheckpointError != nil {
				j.onCheckpointError(rerr)
			}
		}
	}
	j.mu.Unlock()
	if err != nil {
		return fmt.Errorf("journal %s: %w", journalName(j.number), err)
	}
	j.rounds.Add(1)
	j.entries.Add(uint64(count))
	j.bytes.Add(uint64(len(entries)))
	if roll {
		go func() { _ = j.Checkpoint() }()
	}
	return nil
}

// forget drops a log that synced its files as it closed from the logs
// the next checkpoint syncs.
func (j *Journal) forget(l *Log) {
	j.mu.Lock()
	delete(j.logs, l)
	j.mu.Unlock()
}

// journalPreallocate is how far ahead of its end the journal file is
// filled with zeros: replay reads zeros as the end.
const journalPreallocate = 1 << 20

// preallocateLocked fills the journal file with zeros past size, when
// size has reached what was filled, so that most round syncs find its
// size unchanged (an fdatasync then needs no metadata commit).
func (j *Journal) preallocateLocked() error {
	if j.size <= j.alloc || j.fsys != OSFS {
		return nil // other file systems gain nothing by it
	}
	end := j.size + journalPreallocate
	for at := j.alloc; at < end; {
		n := min(int64(len(zeros)), end-at)
		if _, err := j.file.WriteAt(zeros[:n], at); err != nil {
			return err
		}
		at += n
	}
	j.alloc = end
	return nil
}

// Checkpoint makes what the journal holds durable in the logs' own files
// and removes every journal file but the one rounds write to now (rolling
// to a new one first if that one holds entries). A failed checkpoint
// leaves the files; the next one tries again.
func (j *Journal) Checkpoint() error {
	j.checkpointing.Lock()
	defer j.checkpointing.Unlock()
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		return ErrJournalClosed
	}
	if j.size > journalHeaderLen {
		if err := j.startFileLocked(j.number + 1); err != nil {
			j.mu.Unlock()
			return j.checkpointFailed(err)
		}
	}
	current := j.number
	logs := j.logs
	j.logs = map[*Log]struct{}{}
	j.mu.Unlock()
	err := j.syncLogs(logs)
	if err == nil {
		err = j.removeBefore(current)
	}
	if err != nil {
		// The logs stay to be synced by the next checkpoint.
		j.mu.Lock()
		for l := range logs {
			j.logs[l] = struct{}{}
		}
		j.mu.Unlock()
		return j.checkpointFailed(err)
	}
	j.checkpoints.Add(1)
	return nil
}

func (j *Journal) checkpointFailed(err error) error {
	err = fmt.Errorf("braid/wal: journal checkpoint: %w", err)
	j.checkpointFailures.Add(1)
	if j.onCheckpointError != nil {
		j.onCheckpointError(err)
	}
	return err
}

// syncLogs makes what was written to logs durable in their files: one
// syncfs of the root's file system on the operating system's, else a sync
// of each log's tail (older files were synced as the logs rolled).
func (j *Journal) syncLogs(logs map[*Log]struct{}) error {
	if len(logs) == 0 {
		return nil
	}
	// What the logs hold in memory goes to their files first.
	for l := range logs {
		if err := l.flushTail(); err != nil && !errors.Is(err, fs.ErrClosed) {
			return err
		}
	}
	if j.fsys == OSFS && j.rootDev != 0 {
		d, err := os.Open(j.root)
		if err != nil {
			return err
		}
		defer d.Close()
		ioSyncs.Add(1)
		return syncFS(d)
	}
	for l := range logs {
		if err := l.syncTail(); err != nil && !errors.Is(err, ErrClosed) {
			return err
		}
	}
	return nil
}

// removeBefore removes the journal files numbered below number.
func (j *Journal) removeBefore(number uint64) error {
	numbers, err := journalFiles(j.fsys, j.dir)
	if err != nil {
		return err
	}
	removed := false
	for _, n := range numbers {
		if n >= number {
			break
		}
		if err := j.fsys.Remove(filepath.Join(j.dir, journalName(n))); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		removed = true
	}
	if removed {
		return syncDir(j.fsys, j.dir)
	}
	return nil
}

// Close checkpoints and closes the journal. Rounds must not run after it.
// Close the logs first: they sync their own files then.
func (j *Journal) Close() error {
	err := j.Checkpoint()
	j.checkpointing.Lock()
	defer j.checkpointing.Unlock()
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		return ErrJournalClosed
	}
	j.closed = true
	if cerr := j.file.Close(); err == nil {
		err = cerr
	}
	return err
}
