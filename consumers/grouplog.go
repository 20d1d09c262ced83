package consumers

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/braidmq/braid/wal"
)

// The I/O both kinds of group do on their own WAL: open and replay it,
// append a record, compact it into a snapshot. The record codecs are the
// groups' own.

// openAndReplay opens the log in dir, repairs its tail (and logs what it
// cut), and hands every record payload to apply, in order. It returns the
// open log (also with an error, so the caller can close it) and the number
// of records it holds. fsys is the file system (nil: wal.OSFS).
func openAndReplay(dir string, durability wal.Durability, fsys wal.FS, logger *slog.Logger, apply func([]byte) error) (*wal.Log, int, error) {
	l, err := wal.Open(dir, wal.Options{Durability: durability, FS: fsys, OnHole: func(h wal.Hole) {
		// The state changes in it are lost: acks among them are
		// delivered again (at least once), as after a crash before them.
		logger.Error("consumer group log: records lost to damage; replaying without them", "dir", dir,
			"from", h.From, "to", h.To, "file", h.File, "pos", h.Pos, "bytes", h.Bytes, "reason", h.Reason)
	}})
	if err != nil {
		return nil, 0, err
	}
	if r := l.Repair(); r != (wal.RepairReport{}) {
		logger.Warn("consumer group log repaired", "dir", dir, "repair", fmt.Sprintf("%+v", r))
	}
	from, next := l.FirstOffset(), l.NextOffset()
	for from < next {
		recs, err := l.ReadRange(from, 512, 0)
		var hole *wal.HoleError
		if errors.As(err, &hole) {
			from = hole.To
			continue
		}
		if err != nil {
			return l, 0, fmt.Errorf("replaying %s at offset %d: %w", dir, from, err)
		}
		if len(recs) == 0 {
			break
		}
		for i, rec := range recs {
			if err := apply(rec.Payload); err != nil {
				return l, 0, fmt.Errorf("replaying %s at offset %d: %w", dir, from+uint64(i), err)
			}
		}
		from += uint64(len(recs))
	}
	return l, int(next - l.FirstOffset()), nil
}

// appendPayload writes one record durably (per the log's durability),
// stamped with now.
func appendPayload(l *wal.Log, now time.Time, payload []byte) (uint64, error) {
	return l.Append(wal.Record{Timestamp: now.UnixMilli(), Payload: payload})
}

// compactLog writes snapshot, then drops the head before it, so that a
// crash in between leaves a log that still replays to the same state. It
// returns the number of records left. now stamps the snapshot.
func compactLog(l *wal.Log, now time.Time, snapshot []byte) (int, error) {
	return compactRecord(l, wal.Record{Timestamp: now.UnixMilli(), Payload: snapshot})
}

// compactRecord is compactLog of a stamped record.
func compactRecord(l *wal.Log, snapshot wal.Record) (int, error) {
	off, err := l.Append(snapshot)
	if err != nil {
		return 0, err
	}
	if err := l.TruncateHead(off); err != nil {
		return 0, err
	}
	return int(l.NextOffset() - l.FirstOffset()), nil
}

// The same, as methods of either group on its state log.

// openStateLog opens the group's state log through the configured opener
// (the local WAL without one) and hands every record payload to apply, in
// order, counting the records. Without create, a group that has no state
// yet gets no log (b.log stays nil: the first join creates it).
func (b *groupBase) openStateLog(create bool, apply func([]byte) error) error {
	open := b.cfg.Logs
	if open == nil {
		open = LocalLogs{}
	}
	l, records, err := open.Open(LogRequest{Topic: b.cfg.Source.Topic(), Subscription: b.cfg.Subscription, Dir: b.cfg.Dir,
		Create: create, Durability: b.cfg.Durability, Logger: b.logger}, apply)
	if l != nil {
		b.log, b.records = l, records
	}
	return err
}

// appendCounted writes payload durably (per the configured durability, or
// committed on a majority of the group's replicas) and counts it.
func (b *groupBase) appendCounted(payload []byte) (uint64, error) {
	off, err := b.log.Append(wal.Record{Timestamp: b.clock.Now().UnixMilli(), Payload: payload})
	if err != nil {
		return 0, err
	}
	b.records++
	return off, nil
}

// compactTo rewrites the log as the one snapshot record.
func (b *groupBase) compactTo(snapshot []byte) error {
	records, err := b.log.Compact(wal.Record{Timestamp: b.clock.Now().UnixMilli(), Payload: snapshot})
	if err != nil {
		return err
	}
	b.records = records
	return nil
}

// compactIfDue rewrites the log as one snapshot once the subscription is
// created and the log holds more than CompactAfter records.
func (b *groupBase) compactIfDue(created bool, snapshot func() []byte) error {
	if !created || b.records <= b.cfg.CompactAfter {
		return nil
	}
	return b.compactTo(snapshot())
}

// failLog ends the incarnation after a write failed: the wal must be
// reopened (wal.ErrFailed), which is what a restart does. Callers have
// answered the requests involved.
func (b *groupBase) failLog(err error) {
	b.current = nil
	panic(fmt.Errorf("braid/consumers: %s %q: log write failed: %w", b.kind, b.cfg.Subscription, err))
}

// retryLoad tries to load a broken group again, at most once every
// loadRetryEvery (the cause may be passing, such as too many open files),
// and reports whether the group is whole again.
func (b *groupBase) retryLoad(load func()) bool {
	if !loadRetryDue(b.brokenAt, b.clock.Now()) {
		return false
	}
	if b.log != nil {
		b.log.Close()
		b.log = nil
	}
	load()
	return b.broken == nil
}
