package wal

import "fmt"

// Write writes recs as one batch, as Append does, without waiting for them
// to be durable. Under DurabilityAlways they become durable, and visible to
// Read and NextOffset, with the next Commit (or Sync, Close, a roll to a
// new file or a truncation); under the other modes Write is Append.
//
// Write and Commit let one writer overlap the fsync of a batch with the
// writing of the next: it writes, hands the Commit to another goroutine,
// and writes again while the fsync runs.
func (l *Log) Write(recs ...Record) (first uint64, err error) {
	return appendBodies(l, recordBodies(recs), false)
}

// Commit makes every record written before it durable and visible, and
// returns the offset after the last of them. Under DurabilityAlways it
// fsyncs without holding up Write meanwhile; commits run one after the
// other, and one that finds nothing new to sync waits for the pass in
// flight. Under the other modes it returns NextOffset at once. A failed
// fsync fails the log (see ErrFailed).
func (l *Log) Commit() (next uint64, err error) {
	l.writeMu.Lock()
	if err := l.writableLocked(); err != nil {
		l.writeMu.Unlock()
		return 0, err
	}
	if l.opts.Durability != DurabilityAlways {
		next := l.view.next
		l.writeMu.Unlock()
		return next, nil
	}
	// What the fsync will cover: a prefix of the tail's frames, which
	// later writes only append to.
	target := frameIndex{frames: l.tail.frames, end: l.tail.size, next: l.tail.next}
	file := l.tail.file
	err = l.syncOutsideWriteMu(l.prepareSyncLocked())
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	if err != nil {
		return 0, l.failLocked(err)
	}
	// A roll or a truncation since has published (or cut) the target
	// already: the view only moves forward here, and only in the same file.
	if l.tail.file == file && target.next > l.view.next {
		l.mu.Lock()
		l.view.tail = target
		l.view.next = target.next
		l.mu.Unlock()
	}
	return target.next, nil
}

// commitWrittenLocked syncs and publishes what Write left unpublished, so
// that a truncation works on what readers see. The caller holds writeMu.
func (l *Log) commitWrittenLocked() error {
	if l.opts.Durability != DurabilityAlways || l.tail.next == l.view.next {
		return nil
	}
	if err := l.syncLocked(); err != nil {
		return fmt.Errorf("braid/wal: commit before truncating: %w", err)
	}
	l.publishTailLocked()
	return nil
}
