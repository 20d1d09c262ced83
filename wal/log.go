package wal

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"

	tidwall "github.com/tidwall/wal"
)

// tidwallCacheSegments is how many older files tidwall keeps in memory for
// reads (its default).
const tidwallCacheSegments = 2

// maxKeptBatchBytes bounds the write buffer a Log keeps between appends.
const maxKeptBatchBytes = 1 << 20

// Log is one append-only log in a directory of its own. See the package doc
// for the format, durability and repair. Safe for concurrent use.
type Log struct {
	dir    string // absolute
	opts   Options
	repair RepairReport
	wal    *tidwall.Log // does its own locking; see readMu

	// readMu serializes calls to tidwall's Read: tidwall loads and evicts
	// the files it caches while holding only its read lock, so two
	// concurrent tidwall Reads race (and can index a just-evicted file).
	readMu sync.Mutex

	// writeMu serializes the writers: Append, the truncations, Sync, Close
	// and the interval syncer. It is held across the fsync of
	// DurabilityAlways, so that NextOffset moves only once records are
	// durable. Lock order: writeMu, then mu.
	writeMu sync.Mutex
	// The fields below are guarded by writeMu; tail.file is replaced or
	// closed only holding syncMu as well.
	tail        tailFile
	batch       tidwall.Batch
	unsynced    bool  // records written since the last fsync of tail
	dirUnsynced bool  // files created, renamed or removed since the last fsync of dir
	failed      error // sticky, wraps ErrFailed; see ErrFailed

	// syncMu is held for every fsync and for every change of tail.file, so
	// that the interval syncer can fsync without writeMu (appends go on
	// meanwhile) and without its descriptor being closed under it. Lock
	// order: writeMu, then syncMu.
	syncMu sync.Mutex
	// syncErr is the failure of an fsync pass, guarded by syncMu: a pass
	// that finds nothing left to sync because a failed one took it must not
	// report success.
	syncErr error

	// mu guards the fields below. Writers change them holding writeMu as
	// well, so a writer may read them holding writeMu alone.
	mu sync.RWMutex
	// Invariant: first <= next. [first, next) is what Read serves.
	first  uint64 // first retained offset
	next   uint64 // offset of the next append
	closed bool

	stopSyncer chan struct{} // closed by Close; nil unless DurabilityInterval
	syncerDone chan struct{} // closed by the syncer goroutine when it returns
	syncs      atomic.Uint64 // fsync passes done, for tests
}

// Open opens the log in dir, creating dir if needed. Before loading, it
// repairs a torn, zero-filled or corrupt tail of the last file by cutting
// it after the last valid record; Repair says what was cut.
func Open(dir string, opts Options) (*Log, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return nil, err
	}
	if err := mkdirDurable(dir); err != nil {
		return nil, fmt.Errorf("braid/wal: open %s: %w", dir, err)
	}
	if err := removeStaleTemps(dir); err != nil {
		return nil, fmt.Errorf("braid/wal: open %s: %w", dir, err)
	}
	report, err := repairTail(dir)
	if err != nil {
		return nil, fmt.Errorf("braid/wal: repair %s: %w", dir, err)
	}
	w, err := tidwall.Open(dir, &tidwall.Options{
		NoSync:           true,
		SegmentSize:      opts.SegmentBytes,
		SegmentCacheSize: tidwallCacheSegments,
		AllowEmpty:       true,
		DirPerms:         0o750,
		FilePerms:        0o640,
	})
	if err != nil {
		return nil, fmt.Errorf("braid/wal: open %s: %w", dir, fromTidwall(err))
	}
	// With AllowEmpty, an empty log has FirstIndex == LastIndex+1.
	firstIndex, err1 := w.FirstIndex()
	lastIndex, err2 := w.LastIndex()
	tail, err3 := openTail(dir)
	if err := errors.Join(err1, err2, err3); err != nil {
		w.Close()
		return nil, fmt.Errorf("braid/wal: open %s: %w", dir, err)
	}
	l := &Log{
		dir:    dir,
		opts:   opts,
		repair: report,
		wal:    w,
		tail:   tail,
		first:  firstIndex - 1,
		next:   lastIndex,
		// tidwall may just have created the first file, or renamed the
		// files of an unfinished truncation, without a directory fsync.
		dirUnsynced: true,
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

// Repair reports what Open cut from the tail of the log (zero if nothing).
func (l *Log) Repair() RepairReport { return l.repair }

// Dir returns the absolute path of the log's directory.
func (l *Log) Dir() string { return l.dir }

// FirstOffset returns the first retained offset; it equals NextOffset when
// the log is empty.
func (l *Log) FirstOffset() uint64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.first
}

// NextOffset returns the offset the next appended record gets.
func (l *Log) NextOffset() uint64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.next
}

// Append writes recs as one batch (one tidwall write, one fsync under
// DurabilityAlways) and returns the offset of the first; the others follow
// densely. Appending nothing returns NextOffset.
func (l *Log) Append(recs ...Record) (first uint64, err error) {
	size := 0
	for _, r := range recs {
		size += encodedLen(r)
	}
	buf := make([]byte, 0, size)
	frames := make([][]byte, len(recs))
	for i, r := range recs {
		start := len(buf)
		buf = EncodeRecord(buf, r)
		frames[i] = buf[start:]
	}
	return l.appendFrames(frames)
}

// AppendEncoded is Append for frames made by EncodeRecord, so that callers
// can encode outside any lock. It checks every frame's version and CRC
// first (a bad frame written in the middle of the last file would make the
// next repair cut every record after it) and writes nothing if one fails.
func (l *Log) AppendEncoded(frames [][]byte) (first uint64, err error) {
	for i, frame := range frames {
		if _, err := checkFrame(frame); err != nil {
			return 0, fmt.Errorf("braid/wal: frame %d of batch: %w", i, err)
		}
	}
	return l.appendFrames(frames)
}

func (l *Log) appendFrames(frames [][]byte) (uint64, error) {
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	if err := l.writableLocked(); err != nil {
		return 0, err
	}
	first := l.next
	if len(frames) == 0 {
		return first, nil
	}
	l.batch.Clear()
	batchBytes := 0
	for i, frame := range frames {
		l.batch.Write(first+1+uint64(i), frame)
		batchBytes += len(frame)
	}
	err := l.wal.WriteBatch(&l.batch)
	if batchBytes > maxKeptBatchBytes {
		l.batch = tidwall.Batch{}
	}
	if err != nil {
		return 0, l.failLocked(fmt.Errorf("write batch at offset %d: %w", first, err))
	}
	l.unsynced = true
	if l.tail.advance(first+1, frames, l.opts.SegmentBytes) {
		if err := l.followRollLocked(); err != nil {
			return 0, l.failLocked(err)
		}
	}
	if l.opts.Durability == DurabilityAlways {
		if err := l.syncLocked(); err != nil {
			return 0, err
		}
	}
	l.mu.Lock()
	l.next = first + uint64(len(frames))
	l.mu.Unlock()
	return first, nil
}

// followRollLocked points tail at the file tidwall rolled to. tidwall has
// fsynced the previous file; the new name needs a directory fsync.
func (l *Log) followRollLocked() error {
	l.dirUnsynced = true
	f, err := os.Open(filepath.Join(l.dir, segmentName(l.tail.index)))
	if err != nil {
		// The replay of tidwall's roll decision is off: trust the directory.
		return l.reloadTailLocked()
	}
	l.syncMu.Lock()
	l.tail.file.Close()
	l.tail.file = f
	l.syncMu.Unlock()
	return nil
}

// reloadTailLocked finds the tail file from the directory, after tidwall
// replaced or removed files.
func (l *Log) reloadTailLocked() error {
	tail, err := openTail(l.dir)
	if err != nil {
		return err
	}
	l.syncMu.Lock()
	l.tail.close()
	l.tail = tail
	l.syncMu.Unlock()
	l.dirUnsynced = true
	return nil
}

// syncJob is one fsync pass: what prepareSyncLocked found to sync.
type syncJob struct {
	file *os.File // nil: the tail is in sync
	dir  string   // "": the directory is in sync
}

// prepareSyncLocked returns the fsync pass that covers everything written
// so far and marks it as synced; the caller runs it holding syncMu and
// must treat its failure as fatal (failLocked).
func (l *Log) prepareSyncLocked() (syncJob, error) {
	var job syncJob
	if l.unsynced {
		info, err := l.tail.file.Stat()
		if err != nil {
			return job, err
		}
		if info.Size() != l.tail.size {
			// The replay of tidwall's roll decision is off: trust the
			// directory, so that the fsync hits the right file.
			if err := l.reloadTailLocked(); err != nil {
				return job, err
			}
		}
		job.file = l.tail.file
		l.unsynced = false
	}
	if l.dirUnsynced {
		job.dir = l.dir
		l.dirUnsynced = false
	}
	return job, nil
}

// run does the fsync pass; the caller holds syncMu.
func (job syncJob) run() error {
	if job.file != nil {
		if err := job.file.Sync(); err != nil {
			return fmt.Errorf("fsync %s: %w", job.file.Name(), err)
		}
	}
	if job.dir != "" {
		if err := syncDir(job.dir); err != nil {
			return fmt.Errorf("fsync %s: %w", job.dir, err)
		}
	}
	return nil
}

// syncLocked fsyncs what was written since the last sync: the tail file,
// and the directory if files came or went. A failure is sticky.
func (l *Log) syncLocked() error {
	job, err := l.prepareSyncLocked()
	if err != nil {
		return l.failLocked(err)
	}
	if err := l.runSyncJob(job); err != nil {
		return l.failLocked(err)
	}
	return nil
}

// runSyncJob runs an fsync pass under syncMu, after any pass in flight.
func (l *Log) runSyncJob(job syncJob) error {
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	if l.syncErr != nil {
		return l.syncErr
	}
	if err := job.run(); err != nil {
		l.syncErr = err
		return err
	}
	l.syncs.Add(1)
	return nil
}

// writableLocked returns why the log cannot be written, or nil.
func (l *Log) writableLocked() error {
	if l.closed {
		return ErrClosed
	}
	return l.failed
}

// failLocked makes err sticky (see ErrFailed) and returns it wrapped.
func (l *Log) failLocked(err error) error {
	if l.failed == nil {
		l.failed = fmt.Errorf("%w: %s: %w", ErrFailed, l.dir, err)
	}
	return l.failed
}

// Sync fsyncs everything appended so far. Needed only with
// DurabilityInterval or DurabilityNone.
func (l *Log) Sync() error {
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	if err := l.writableLocked(); err != nil {
		return err
	}
	return l.syncLocked()
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
	job, err := l.prepareSyncLocked()
	if err != nil {
		l.failLocked(err)
		l.writeMu.Unlock()
		return
	}
	// Take syncMu before letting go of writeMu: the descriptor in job
	// stays open, and a Sync that comes next waits for this pass.
	l.syncMu.Lock()
	l.writeMu.Unlock()
	if l.syncErr == nil {
		if err := job.run(); err != nil {
			l.syncErr = err
		} else {
			l.syncs.Add(1)
		}
	}
	err = l.syncErr
	l.syncMu.Unlock()
	if err != nil {
		l.writeMu.Lock()
		l.failLocked(err)
		l.writeMu.Unlock()
	}
}

// Read returns the record at off. The error wraps ErrNotFound outside
// [FirstOffset, NextOffset), ErrCorrupt or ErrUnsupportedVersion when the
// stored frame does not check out, ErrClosed after Close.
func (l *Log) Read(off uint64) (Record, error) {
	if err := l.checkReadable(off); err != nil {
		return Record{}, err
	}
	l.readMu.Lock()
	frame, err := l.readFrameLocked(off)
	l.readMu.Unlock()
	if err != nil {
		return Record{}, err
	}
	rec, err := DecodeRecord(frame)
	if err != nil {
		return Record{}, fmt.Errorf("%w (offset %d in %s)", err, off, l.dir)
	}
	return rec, nil
}

// ReadRange returns up to maxRecords records from offset from, stopping
// before the encoded frames would exceed maxBytes, but returning at least
// one record when from < NextOffset. A limit <= 0 means no limit. From ==
// NextOffset returns no record and no error (nothing new yet).
//
// It returns the good records before a corrupt or unreadable one; the
// error comes from the call that starts at that offset.
func (l *Log) ReadRange(from uint64, maxRecords int, maxBytes int) ([]Record, error) {
	l.mu.RLock()
	first, next, closed := l.first, l.next, l.closed
	l.mu.RUnlock()
	switch {
	case closed:
		return nil, ErrClosed
	case from == next:
		return nil, nil
	case from < first || from > next:
		return nil, fmt.Errorf("%w: offset %d outside [%d, %d) in %s", ErrNotFound, from, first, next, l.dir)
	}
	end := next
	if maxRecords > 0 && uint64(maxRecords) < end-from {
		end = from + uint64(maxRecords)
	}
	frames := make([][]byte, 0, min(end-from, 256))
	total := 0
	l.readMu.Lock()
	for off := from; off < end; off++ {
		frame, err := l.readFrameLocked(off)
		if err != nil {
			if len(frames) == 0 {
				l.readMu.Unlock()
				return nil, err
			}
			break
		}
		if len(frames) > 0 && maxBytes > 0 && total+len(frame) > maxBytes {
			break
		}
		frames = append(frames, frame)
		total += len(frame)
	}
	l.readMu.Unlock()

	recs := make([]Record, 0, len(frames))
	for i, frame := range frames {
		rec, err := DecodeRecord(frame)
		if err != nil {
			if i == 0 {
				return nil, fmt.Errorf("%w (offset %d in %s)", err, from, l.dir)
			}
			break
		}
		recs = append(recs, rec)
	}
	return recs, nil
}

func (l *Log) checkReadable(off uint64) error {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return ErrClosed
	}
	if off < l.first || off >= l.next {
		return fmt.Errorf("%w: offset %d outside [%d, %d) in %s", ErrNotFound, off, l.first, l.next, l.dir)
	}
	return nil
}

// readFrameLocked reads the frame at off from tidwall; the caller holds
// readMu. The frame is a copy the caller owns. tidwall indexes slices with
// counts taken from the files; damage in an older file can make that panic,
// which is reported as corruption instead.
func (l *Log) readFrameLocked(off uint64) (frame []byte, err error) {
	defer func() {
		if p := recover(); p != nil {
			frame, err = nil, fmt.Errorf("%w: reading offset %d in %s: %v", ErrCorrupt, off, l.dir, p)
		}
	}()
	frame, err = l.wal.Read(off + 1)
	if err != nil {
		return nil, fmt.Errorf("%w (reading offset %d in %s)", fromTidwall(err), off, l.dir)
	}
	return frame, nil
}

// fromTidwall maps tidwall's sentinel errors to this package's.
func fromTidwall(err error) error {
	switch {
	case errors.Is(err, tidwall.ErrNotFound):
		return ErrNotFound
	case errors.Is(err, tidwall.ErrClosed):
		return ErrClosed
	case errors.Is(err, tidwall.ErrCorrupt):
		return fmt.Errorf("%w: tidwall: %w", ErrCorrupt, err)
	}
	return err
}

// TruncateHead drops every offset below before (retention). before may be
// NextOffset, which empties the log; FirstOffset becomes before either way.
// A before at or below FirstOffset does nothing; above NextOffset it is an
// error wrapping ErrNotFound.
func (l *Log) TruncateHead(before uint64) error {
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	if err := l.writableLocked(); err != nil {
		return err
	}
	if before <= l.first {
		return nil
	}
	if before > l.next {
		return fmt.Errorf("%w: truncate head to %d beyond next offset %d in %s", ErrNotFound, before, l.next, l.dir)
	}
	if err := l.wal.TruncateFront(before + 1); err != nil {
		return l.failLocked(fmt.Errorf("truncate head to %d: %w", before, err))
	}
	l.mu.Lock()
	l.first = before
	l.mu.Unlock()
	return l.afterTruncateLocked()
}

// TruncateTail drops every offset from from on; the next append gets from.
// A from at or beyond NextOffset does nothing; below FirstOffset it is an
// error wrapping ErrNotFound.
func (l *Log) TruncateTail(from uint64) error {
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	if err := l.writableLocked(); err != nil {
		return err
	}
	if from >= l.next {
		return nil
	}
	if from < l.first {
		return fmt.Errorf("%w: truncate tail to %d below first offset %d in %s", ErrNotFound, from, l.first, l.dir)
	}
	// tidwall keeps indexes up to and including its argument: offsets < from.
	if err := l.wal.TruncateBack(from); err != nil {
		return l.failLocked(fmt.Errorf("truncate tail to %d: %w", from, err))
	}
	l.mu.Lock()
	l.next = from
	l.mu.Unlock()
	return l.afterTruncateLocked()
}

// afterTruncateLocked follows the files tidwall rewrote (through a synced
// temporary file and a rename) and removed; the directory needs an fsync.
func (l *Log) afterTruncateLocked() error {
	if err := l.reloadTailLocked(); err != nil {
		return l.failLocked(err)
	}
	if l.opts.Durability == DurabilityAlways {
		return l.syncLocked()
	}
	return nil
}

// Close syncs and closes the log and stops its syncer. Every later call,
// a second Close included, returns ErrClosed.
func (l *Log) Close() error {
	l.writeMu.Lock()
	if l.closed {
		l.writeMu.Unlock()
		return ErrClosed
	}
	l.mu.Lock()
	l.closed = true
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
		if err := l.syncLocked(); err != nil {
			errs = append(errs, err)
		}
	}
	// tidwall's Close fsyncs its own descriptor of the tail again; cheap
	// when nothing is dirty.
	if err := l.wal.Close(); err != nil && l.failed == nil {
		errs = append(errs, fmt.Errorf("braid/wal: close %s: %w", l.dir, err))
	}
	l.syncMu.Lock()
	if err := l.tail.close(); err != nil {
		errs = append(errs, err)
	}
	l.syncMu.Unlock()
	return errors.Join(errs...)
}

// SizeBytes returns the total size of the log's files on disk.
func (l *Log) SizeBytes() int64 {
	entries, err := os.ReadDir(l.dir)
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
	return total
}
