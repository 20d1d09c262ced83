package consumers

import (
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
// of records it holds.
func openAndReplay(dir string, durability wal.Durability, logger *slog.Logger, apply func([]byte) error) (*wal.Log, int, error) {
	l, err := wal.Open(dir, wal.Options{Durability: durability})
	if err != nil {
		return nil, 0, err
	}
	if r := l.Repair(); r != (wal.RepairReport{}) {
		logger.Warn("consumer group log repaired", "dir", dir, "repair", fmt.Sprintf("%+v", r))
	}
	from, next := l.FirstOffset(), l.NextOffset()
	for from < next {
		recs, err := l.ReadRange(from, 512, 0)
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

// appendPayload writes one record durably (per the log's durability).
func appendPayload(l *wal.Log, payload []byte) (uint64, error) {
	return l.Append(wal.Record{Timestamp: time.Now().UnixMilli(), Payload: payload})
}

// compactLog writes snapshot, then drops the head before it, so that a
// crash in between leaves a log that still replays to the same state. It
// returns the number of records left.
func compactLog(l *wal.Log, snapshot []byte) (int, error) {
	off, err := appendPayload(l, snapshot)
	if err != nil {
		return 0, err
	}
	if err := l.TruncateHead(off); err != nil {
		return 0, err
	}
	return int(l.NextOffset() - l.FirstOffset()), nil
}
