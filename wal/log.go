package wal

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"
)

// Log is one append-only log in a directory of its own. See the package doc
// for the format, durability and repair. Safe for concurrent use.
type Log struct {
	dir    string // absolute
	fs     FS
	opts   Options
	repair RepairReport

	// writeMu serializes the writers: Append, the truncations, Sync, Close
	// and the interval syncer. It is held across the fsync of
	// DurabilityAlways, so that NextOffset moves only once records are
	// durable. Lock order: writeMu, readMu, syncMu, mu.
	writeMu sync.Mutex
	// The fields below are guarded by writeMu; tail.file is replaced or
	// closed only holding readMu and syncMu as well.
	tail        tailFile
	files       []uint64 // first offsets of the files, ascending; the last is tail's
	buf         []byte   // the entries of the append being written
	plan        []plannedFrame
	bodyLens    []int
	unsynced    bool          // bytes written to tail.file since its last fsync
	written     int64         // bytes written since Open, for the preallocation step
	dirUnsynced bool          // files created, renamed or removed since the last fsync of dir
	failed      error         // sticky, wraps ErrFailed; see ErrFailed
	journaled   *journalState // nil unless the log is journaled (Options.Journal)

	// syncMu is held for every fsync of the tail and for every change of
	// tail.file, so that the interval syncer can fsync without writeMu
	// (appends go on meanwhile) and without its descriptor being closed
	// under it.
	syncMu sync.Mutex
	// syncErr is the failure of an fsync pass, guarded by syncMu: a pass
	// that finds nothing left to sync because a failed one took it must not
	// report success.
	syncErr error

	// readMu serializes the readers' use of the caches below and of the
	// files they read. A writer holds it to replace, close or remove a file
	// that readers may be reading; appends do not take it.
	readMu sync.Mutex
	older  []*olderFile // most recently used first, at most olderFilesCached
	recent [2]*batch    // the frames read last, checked; recent[0] is the newest
	// holes are the lost offsets found so far (see Hole), by offset, and
	// emptyHoles the damaged runs that lost no record.
	holes, emptyHoles []Hole

	// mu guards view. Writers change it holding writeMu as well, so a writer
	// may read it holding writeMu alone.
	mu   sync.RWMutex
	view view

	stopSyncer chan struct{} // closed by Close; nil unless DurabilityInterval
	syncerDone chan struct{} // closed by the syncer goroutine when it returns
	syncs      atomic.Uint64 // fsync passes done, for tests
	// readLimit bounds what readers see (SetReadLimit); MaxUint64: none.
	readLimit atomic.Uint64
	// preallocated is tail.alloc - tail.size, for SizeBytes.
	preallocated atomic.Int64
	// tailStarted is when the tail file was started, or found at Open
	// (unix ns; see TailStarted); newest caches the size and newest record
	// time of closed files by first offset (ClosedFiles).
	tailStarted atomic.Int64
	// segmentBytes is the roll size SetSegmentBytes set (0: Options').
	segmentBytes atomic.Int64
	newestMu     sync.Mutex
	newest       map[uint64]closedInfo
	// maxTimes holds, per file rolled in this process (by its first
	// offset), the largest timestamp of its records; under newestMu.
	maxTimes map[uint64]int64
	// trimMu serializes TrimHead with the truncations; taken before
	// writeMu, it lets TrimHead write its record and punch its file
	// without holding up appends.
	trimMu sync.Mutex
	// slowSync, set by tests only, runs before each fsync pass that goes
	// on without writeMu, as a slow disk would take time.
	slowSync func()
}

// view is what readers may see of the log.
type view struct {
	// Invariant: first <= next. [first, next) is what Read serves.
	first uint64 // first retained offset
	next  uint64 // offset of the next append
	// files are the first offsets of the files, ascending; the last one is
	// the tail. Appends only ever append to files and to tail.frames, so a
	// copy of view stays valid while the writer appends.
	files    []uint64
	tail     frameIndex // the tail's frames that Read may serve
	tailFile File       // the writer's descriptor of the tail
	closed   bool
	// headPos, when above 0, says the first file's head was trimmed (see
	// TrimHead): it is the file named by headName, and its frames start
	// at byte headPos with offset files[0].
	headName uint64
	headPos  int64
}

// tailFile is the file appends go to.
type tailFile struct {
	first uint64 // offset of its first record, its name
	file  File   // read-write; readers read through it too
	size  int64  // bytes written or being written
	// alloc is how far the file extends: [size, alloc) are the zeros
	// written ahead (Options.Preallocate). Invariant: size <= alloc, or
	// alloc is 0 (nothing written ahead).
	alloc  int64
	frames []frameRef
	holes  []Hole // the holes Open found in it (see Hole)
	next   uint64 // offset after its last record written or being written
	// maxTime is the largest timestamp of the records written to it in
	// this process; exact says that is every record of the file (it was
	// created empty here), so that the roll can remember it.
	maxTime int64
	exact   bool
}

// index returns the index of what was written to the tail.
func (t *tailFile) index() frameIndex {
	return frameIndex{frames: t.frames, holes: t.holes, end: t.size, next: t.next}
}

// Open opens the log in dir, creating dir if needed. It finishes a
// truncation a crash interrupted, then repairs a torn, zero-filled or
// corrupt tail of the last file by cutting it after the last valid frame;
// Repair says what was cut. A log written in the format of an earlier
// release fails with ErrUnsupportedVersion.
func Open(dir string, opts Options) (*Log, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return nil, err
	}
	l, err := open(dir, opts)
	if err != nil {
		return nil, fmt.Errorf("braid/wal: open %s: %w", dir, err)
	}
	if opts.Durability == DurabilityInterval {
		l.stopSyncer = make(chan struct{})
		l.syncerDone = make(chan struct{})
		go pprof.Do(context.Background(), pprof.Labels("braid_wal", dir), func(context.Context) {
			l.syncLoop()
		})
	}
	return l, nil
}

func open(dir string, opts Options) (*Log, error) {
	fsys := opts.FS
	if err := mkdirDurable(fsys, dir); err != nil {
		return nil, err
	}
	if err := removeStaleTemps(fsys, dir); err != nil {
		return nil, err
	}
	files, err := finishTruncation(fsys, dir)
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		files = []segmentFile{{name: segmentName(0)}}
		f, err := fsys.OpenFile(filepath.Join(dir, files[0].name), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o640)
		if err != nil {
			return nil, err
		}
		if err := f.Close(); err != nil {
			return nil, err
		}
	} else if len(files) > 1 {
		if err := refuseOldFormat(fsys, filepath.Join(dir, files[0].name)); err != nil {
			return nil, err
		}
	}
	head, err := loadHead(fsys, dir, files)
	if err != nil {
		return nil, err
	}
	last := files[len(files)-1]
	path := filepath.Join(dir, last.name)
	report, index, err := repairTail(fsys, path, last.first)
	if err != nil {
		return nil, err
	}
	journaled, err := openJournaled(dir, opts)
	if err != nil {
		return nil, err
	}
	f, err := openLogFile(opts, path, os.O_RDWR, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	if journaled != nil {
		f = newBufferedFile(f)
	}
	if info, err := f.Stat(); err != nil || info.Size() != index.end {
		f.Close()
		return nil, errors.Join(err, fmt.Errorf("%s is not %d bytes after repair", path, index.end))
	}
	l := &Log{
		dir:    dir,
		fs:     fsys,
		opts:   opts,
		repair: report,
		tail: tailFile{first: last.first, file: f, size: index.end, frames: index.frames, holes: index.holes, next: index.next,
			maxTime: math.MinInt64, exact: index.next == last.first && index.end == 0},
		// The first file may just have been created.
		dirUnsynced: true,
	}
	l.readLimit.Store(math.MaxUint64)
	l.journaled = journaled
	l.addHolesLocked(index.holes)
	for _, f := range files {
		l.files = append(l.files, f.first)
	}
	if head.pos > 0 {
		l.files[0] = head.first
	}
	l.view = view{first: l.files[0], next: index.next, files: l.files, tail: index, tailFile: f}
	if head.pos > 0 {
		l.view.headName, l.view.headPos = files[0].first, head.pos
	}
	// A tail found with records started no later than its first record
	// (its time as stamped: a legacy file's may be a year old, and is
	// then due to roll by age at once).
	started := time.Now()
	if index.next > last.first {
		if rec, err := l.Read(last.first); err == nil && rec.Timestamp > 0 && time.UnixMilli(rec.Timestamp).Before(started) {
			started = time.UnixMilli(rec.Timestamp)
		}
	}
	l.tailStarted.Store(started.UnixNano())
	return l, nil
}

// Repair reports what Open cut from the tail of the log (zero if nothing).
func (l *Log) Repair() RepairReport { return l.repair }

// Dir returns the absolute path of the log's directory.
func (l *Log) Dir() string { return l.dir }

// FirstOffset returns the first retained offset; it equals NextOffset when
// the log is empty.
func (l *Log) FirstOffset() uint64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.view.first
}

// NextOffset returns the offset the next appended record gets; with a
// read limit (SetReadLimit), the offset after the last record readers may
// see.
func (l *Log) NextOffset() uint64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return min(l.view.next, l.readLimit.Load())
}

// DurableOffset returns the offset after the last durable record, past
// the read limit.
func (l *Log) DurableOffset() uint64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.view.next
}

// SetReadLimit makes readers (Read, ReadRange, NextOffset) see the log's
// records below limit only, as far as they are durable: a replicated log
// shows what is committed on a majority of its replicas, not what its
// own disk holds. The limit may only grow; the default is none.
func (l *Log) SetReadLimit(limit uint64) {
	for {
		old := l.readLimit.Load()
		if old != math.MaxUint64 && limit <= old {
			return
		}
		if l.readLimit.CompareAndSwap(old, limit) {
			return
		}
	}
}

// trimLocked cuts the preallocated zeros off the tail file, before a roll
// leaves it or Close closes it. The caller syncs after.
func (l *Log) trimLocked() error {
	if l.tail.alloc <= l.tail.size {
		return nil
	}
	if err := l.tail.file.Truncate(l.tail.size); err != nil {
		return err
	}
	l.tail.alloc = 0
	l.preallocated.Store(0)
	l.unsynced = true
	return nil
}

// rollLocked starts a new tail file whose first record is at offset first.
func (l *Log) rollLocked(first uint64) error {
	// Repair only ever looks at the last file, so the file left behind
	// must be whole on disk before the next one holds anything: sync it,
	// after any background pass in flight, which must have succeeded.
	l.syncMu.Lock()
	err := l.syncErr
	if err == nil {
		err = l.trimLocked()
	}
	if err == nil && l.unsynced {
		if err = (syncJob{file: l.tail.file, fs: l.fs}).run(); err != nil {
			l.syncErr = err
		}
	}
	l.unsynced = false
	l.syncMu.Unlock()
	if err != nil {
		return err
	}
	f, err := l.openTailFile(filepath.Join(l.dir, segmentName(first)), os.O_CREATE|os.O_RDWR|os.O_TRUNC, 0o640)
	if err != nil {
		return err
	}
	l.dirUnsynced = true
	l.files = append(l.files, first)
	old := l.tail.file
	l.readMu.Lock()
	l.syncMu.Lock()
	if t := l.tail; t.exact && t.next > t.first {
		l.rememberMaxTime(t.first, t.maxTime)
	}
	l.tail = tailFile{first: first, file: f, next: first, maxTime: math.MinInt64, exact: true}
	l.tailStarted.Store(time.Now().UnixNano())
	l.syncMu.Unlock()
	l.mu.Lock()
	l.view.files = l.files
	l.view.tail = frameIndex{next: first}
	l.view.tailFile = f
	// The old tail is synced whole: what Write left unpublished in it
	// is durable now.
	l.view.next = max(l.view.next, first)
	l.mu.Unlock()
	l.readMu.Unlock()
	return old.Close()
}

// publishTailLocked makes what was written to the tail visible to readers.
func (l *Log) publishTailLocked() {
	l.mu.Lock()
	l.view.tail = l.tail.index()
	l.view.next = l.tail.next
	l.mu.Unlock()
}

// syncJob is one fsync pass: what prepareSyncLocked found to sync.
type syncJob struct {
	file File   // nil: the tail is in sync
	dir  string // "": the directory is in sync
	fs   FS
}

// prepareSyncLocked returns the fsync pass that covers everything written
// so far and marks it as synced; the caller runs it holding syncMu and
// must treat its failure as fatal (failLocked).
func (l *Log) prepareSyncLocked() syncJob {
	job := syncJob{fs: l.fs}
	if l.unsynced {
		job.file = l.tail.file
		l.unsynced = false
		l.dropJournaledLocked()
	}
	if l.dirUnsynced {
		job.dir = l.dir
		l.dirUnsynced = false
	}
	return job
}

// run does the fsync pass; the caller holds syncMu.
func (job syncJob) run() error {
	if job.file != nil {
		ioSyncs.Add(1)
		if err := job.file.Sync(); err != nil {
			return fmt.Errorf("fsync %s: %w", job.file.Name(), err)
		}
	}
	if job.dir != "" {
		if err := syncDir(job.fs, job.dir); err != nil {
			return fmt.Errorf("fsync %s: %w", job.dir, err)
		}
	}
	return nil
}

// syncLocked fsyncs what was written since the last sync: the tail file,
// and the directory if files came or went. A failure is sticky.
func (l *Log) syncLocked() error {
	if err := l.runSyncJob(l.prepareSyncLocked()); err != nil {
		return l.failLocked(err)
	}
	return nil
}

// runSyncJob runs an fsync pass under syncMu, after any pass in flight.
func (l *Log) runSyncJob(job syncJob) error {
	l.syncMu.Lock()
	return l.runSyncHeld(job)
}

// writableLocked returns why the log cannot be written, or nil.
func (l *Log) writableLocked() error {
	if l.view.closed {
		return ErrClosed
	}
	return l.failed
}

// Err reports whether the log takes writes: nil, ErrClosed, or the
// failure that failed it (wrapping ErrFailed; see ErrFailed).
func (l *Log) Err() error {
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	return l.writableLocked()
}

// failLocked makes err sticky (see ErrFailed) and returns it wrapped.
func (l *Log) failLocked(err error) error {
	if l.failed == nil {
		l.failed = fmt.Errorf("%w: %s: %w", ErrFailed, l.dir, err)
	}
	return l.failed
}

// Sync fsyncs everything appended or written so far and makes it visible.
// Needed only with DurabilityInterval or DurabilityNone, or after Write.
func (l *Log) Sync() error {
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	if err := l.writableLocked(); err != nil {
		return err
	}
	if err := l.syncLocked(); err != nil {
		return err
	}
	l.publishTailLocked()
	return nil
}

// syncLoop is the DurabilityInterval syncer. A failed fsync is sticky and
// surfaces on the next write.
func (l *Log) syncLoop() {
	defer close(l.syncerDone)
	ticker := time.NewTicker(l.opts.SyncInterval)
	defer ticker.Stop()
	for {
		select {
		case <-l.stopSyncer:
			return
		case <-ticker.C:
		}
		l.backgroundSync()
	}
}

// backgroundSync is one pass of the interval syncer. The fsync runs
// without writeMu, so appends are not held up by it; syncMu, taken before
// writeMu is released, keeps the descriptor open until it is done.
func (l *Log) backgroundSync() {
	l.writeMu.Lock()
	if l.writableLocked() != nil || !l.unsynced && !l.dirUnsynced {
		l.writeMu.Unlock()
		return
	}
	if err := l.syncOutsideWriteMu(l.prepareSyncLocked()); err != nil {
		l.writeMu.Lock()
		l.failLocked(err)
		l.writeMu.Unlock()
	}
}

// syncOutsideWriteMu runs job, taken by prepareSyncLocked under writeMu,
// and lets go of writeMu while it runs: syncMu, taken before writeMu is
// released, keeps the descriptor in job open until it is done, and makes a
// pass that comes next wait for this one. It returns with neither lock
// held.
func (l *Log) syncOutsideWriteMu(job syncJob) error {
	l.syncMu.Lock()
	l.writeMu.Unlock()
	return l.runSyncHeld(job)
}

// finishSyncHeld completes a pass begun by StartCommit, whose tail fsync
// (when job has a file) was submitted and is waited for by wait; then it
// lets go of syncMu. A failure is sticky, as in runSyncHeld.
func (l *Log) finishSyncHeld(job syncJob, wait func() error) error {
	defer l.syncMu.Unlock()
	if l.slowSync != nil {
		l.slowSync()
	}
	if l.syncErr != nil {
		if wait != nil {
			_ = wait()
		}
		return l.syncErr
	}
	if wait != nil {
		if err := wait(); err != nil {
			if job.file != nil {
				err = fmt.Errorf("fsync %s: %w", job.file.Name(), err)
			} // else the journal's error names its file
			l.syncErr = err
			return l.syncErr
		}
	}
	if job.dir != "" {
		if err := syncDir(l.fs, job.dir); err != nil {
			l.syncErr = fmt.Errorf("fsync %s: %w", job.dir, err)
			return l.syncErr
		}
	}
	l.syncs.Add(1)
	return nil
}

// runSyncHeld runs job with syncMu held, then lets go of syncMu. A failure
// is sticky: later passes report it without syncing.
func (l *Log) runSyncHeld(job syncJob) error {
	defer l.syncMu.Unlock()
	if l.slowSync != nil {
		l.slowSync()
	}
	if l.syncErr == nil {
		if err := job.run(); err != nil {
			l.syncErr = err
		} else {
			l.syncs.Add(1)
		}
	}
	return l.syncErr
}

// Close syncs and closes the log and stops its syncer. Every later call,
// a second Close included, returns ErrClosed.
func (l *Log) Close() error {
	l.writeMu.Lock()
	if l.view.closed {
		l.writeMu.Unlock()
		return ErrClosed
	}
	l.mu.Lock()
	l.view.closed = true
	l.mu.Unlock()
	l.writeMu.Unlock()

	// The syncer takes writeMu, so stop it before taking writeMu again.
	if l.stopSyncer != nil {
		close(l.stopSyncer)
		<-l.syncerDone
	}

	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	var errs []error
	if l.failed == nil {
		if err := l.trimLocked(); err != nil {
			errs = append(errs, fmt.Errorf("braid/wal: cut the preallocated end of %s: %w", l.dir, err))
		}
		if err := l.syncLocked(); err != nil {
			errs = append(errs, err)
		}
	}
	if l.journaled != nil && len(errs) == 0 && l.failed == nil {
		l.journaled.journal.forget(l) // synced: no checkpoint needs it
	}
	l.readMu.Lock()
	l.dropReadCachesLocked()
	l.syncMu.Lock()
	if err := l.tail.file.Close(); err != nil && l.failed == nil {
		errs = append(errs, fmt.Errorf("braid/wal: close %s: %w", l.dir, err))
	}
	l.syncMu.Unlock()
	l.readMu.Unlock()
	return errors.Join(errs...)
}

// SizeBytes returns the total size of the log's files on disk, less the
// zeros written ahead of the tail (Options.Preallocate).
func (l *Log) SizeBytes() int64 {
	entries, err := l.fs.ReadDir(l.dir)
	if err != nil {
		return 0
	}
	var total int64
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		if info, err := e.Info(); err == nil {
			total += info.Size()
		}
	}
	l.mu.RLock()
	trimmed := l.view.headPos
	l.mu.RUnlock()
	return max(total-l.preallocated.Load()-trimmed, 0)
}
