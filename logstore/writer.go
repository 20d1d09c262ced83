package logstore

import (
	"errors"
	"log/slog"
	"sync"
	"syscall"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/wal"
)

// A write or fsync that fails (a full disk, an I/O error) fails a bucket's
// log for good (wal.ErrFailed): its state on disk is unknown until it is
// opened again. The bucket's Writer turns that into a pause, not an
// outage: the appends of the failed batch and every append after it are
// answered UNAVAILABLE naming the cause, and the first append at least
// reopenEvery after the failure reopens the log (repairing its tail) and,
// if that works, is written to it. Once space is freed, appends work again
// within a second or so, with no restart. Reads never stop: they go to the
// store's log, the failed one until the reopen replaces it.
//
// The reopened log keeps exactly what was acknowledged: records that
// reached the file in a batch whose write or fsync failed (answered
// UNAVAILABLE, so resent by the client) are cut, so that no record is
// served that its producer was told failed.

// reopenEvery is the least time between two reopens of a failed log.
const reopenEvery = time.Second

// A Writer is the log a bucket writes to, reopened after a failure. It is
// used by the bucket actor and its committer; its methods are safe for
// concurrent use.
type Writer struct {
	key    UnitKey
	store  *Store
	opts   wal.Options
	logger *slog.Logger
	now    func() time.Time

	mu sync.Mutex
	// Guarded by mu: log is the log to write to; cause is its failure
	// (nil while writable), keep the offset after its last acknowledged
	// record and tried the time of the failure or of the last reopen.
	log   *wal.Log
	cause error
	keep  uint64
	tried time.Time
}

// NewWriter returns the writer of unit key's log l, opened with opts.
func (s *Store) NewWriter(key UnitKey, l *wal.Log, opts wal.Options, logger *slog.Logger) *Writer {
	return &Writer{key: key, log: l, store: s, opts: opts, logger: logger, now: time.Now}
}

// Current returns the log as it is, failed or not (for its offsets).
func (w *Writer) Current() *wal.Log {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.log
}

// Writable returns the log to write to. While it is failed it returns an
// UNAVAILABLE error instead, after trying to reopen it when reopenEvery
// has passed since the failure or the last try.
func (w *Writer) Writable() (*wal.Log, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cause == nil {
		return w.log, nil
	}
	if w.now().Sub(w.tried) < reopenEvery {
		return nil, w.unavailableLocked()
	}
	w.tried = w.now()
	l, err := w.reopenLocked()
	if err != nil {
		w.store.metrics.walReopens.WithLabelValues("failed").Inc()
		w.logger.Error("bucket log: reopen after a failed write failed; appends stay refused (UNAVAILABLE)",
			"unit", w.key.String(), "cause", w.cause, "err", err)
		return nil, api.Errorf(api.CodeUnavailable, "append to %s: %s; reopening its log failed (%s); resend later",
			w.key, describeCause(w.cause), describeCause(err))
	}
	w.store.metrics.walReopens.WithLabelValues("ok").Inc()
	w.logger.Info("bucket log: reopened after a failed write; appends resume", "unit", w.key.String(),
		"cause", w.cause, "next", l.NextOffset())
	w.log, w.cause = l, nil
	return l, nil
}

// reopenLocked opens the log again and cuts what the failed one did not
// acknowledge.
func (w *Writer) reopenLocked() (*wal.Log, error) {
	l, err := w.store.Reopen(w.key, w.opts)
	if err != nil {
		return nil, err
	}
	switch next := l.NextOffset(); {
	case next > w.keep:
		if err := l.TruncateTail(w.keep); err != nil {
			return nil, err
		}
	case next < w.keep:
		// Nothing crashed: the page cache still holds what the failed
		// log wrote. Say so if the disk lost it anyway.
		w.logger.Error("bucket log: reopened shorter than it was acknowledged", "unit", w.key.String(),
			"next", next, "acknowledged", w.keep)
	}
	return l, nil
}

// Failed records that writing to l failed with err, and returns the
// UNAVAILABLE error its appends are answered with. The first failure of a
// log is logged at error level and counted.
func (w *Writer) Failed(l *wal.Log, err error) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cause == nil && l == w.log {
		w.cause, w.keep, w.tried = err, l.NextOffset(), w.now()
		w.store.metrics.walWriteFailures.WithLabelValues(causeLabel(err)).Inc()
		w.logger.Error("bucket log: write failed; appends are refused (UNAVAILABLE) until it reopens",
			"unit", w.key.String(), "dir", l.Dir(), "acknowledged_next", w.keep, "err", err)
	}
	return w.unavailableLocked()
}

func (w *Writer) unavailableLocked() error {
	return api.Errorf(api.CodeUnavailable, "append to %s: %s; its log reopens within %s, resend", w.key,
		describeCause(w.cause), reopenEvery)
}

// causes are the usual causes of a failed write: the error, how a reply
// names it, and its reason label in braid_wal_write_failures_total.
var causes = []struct {
	err          error
	words, label string
}{
	{syscall.ENOSPC, "no space left on device", "no_space"},
	{syscall.EDQUOT, "disk quota exceeded", "quota"},
	{syscall.EROFS, "read-only file system", "read_only"},
	{syscall.EIO, "I/O error", "io"},
	{wal.ErrClosed, "", "closed"},
}

// describeCause names the cause of a failed write in plain words, with
// the error itself when it is none of the usual ones.
func describeCause(err error) string {
	for _, c := range causes {
		if c.words != "" && errors.Is(err, c.err) {
			return c.words
		}
	}
	return err.Error()
}

// causeLabel is the reason label of braid_wal_write_failures_total.
func causeLabel(err error) string {
	for _, c := range causes {
		if errors.Is(err, c.err) {
			return c.label
		}
	}
	return "other"
}
