package meta

import (
	"context"
	"errors"
	"time"

	"github.com/braidmq/braid/routing"
	"github.com/nats-io/nats.go/jetstream"
)

// Compaction records. A compacted topic's compaction state is one record
// per topic: the generation of the compacted logs its units read, and each
// unit's horizon (the offsets below it are read from the unit's compacted
// log). It is written by compare-and-swap only after every compacted log
// of the generation is durable, so a reader sees the old generation or the
// new one, never a mix.

// CompactionRecord is a topic's compaction state.
type CompactionRecord struct {
	Topic       string `json:"topic"`
	Incarnation string `json:"incarnation,omitempty"`
	// Generation names the compacted logs ("compacted-<generation>" in
	// each unit's directory); 0: never compacted.
	Generation uint64           `json:"generation"`
	Units      []CompactionUnit `json:"units"`
	// What the last compaction did.
	Finished    time.Time `json:"finished"`
	DurationMs  int64     `json:"duration_ms"`
	Keys        int       `json:"keys"`
	Kept        uint64    `json:"kept"`
	Read        uint64    `json:"read"`
	BytesBefore int64     `json:"bytes_before"`
	BytesAfter  int64     `json:"bytes_after"`
	Passes      int       `json:"passes"`
}

// CompactionUnit is one unit's horizon.
type CompactionUnit struct {
	Segment uint64 `json:"segment"`
	Bucket  int    `json:"bucket"`
	Horizon uint64 `json:"horizon"`
	// Kept is how many records its compacted log holds.
	Kept uint64 `json:"kept"`
}

// Horizon returns the horizon recorded for a unit, and whether the record
// has one.
func (r *CompactionRecord) Horizon(segment uint64, bucket int) (uint64, bool) {
	for _, u := range r.Units {
		if u.Segment == segment && u.Bucket == bucket {
			return u.Horizon, true
		}
	}
	return 0, false
}

func compactionKey(t routing.TopicName) string {
	return "cmp." + t.Tenant + "." + t.Namespace + "." + t.Name
}

// Compaction returns a topic's compaction record and its revision
// (ErrNotFound: never compacted).
func (s *Store) Compaction(ctx context.Context, name routing.TopicName) (CompactionRecord, uint64, error) {
	var r CompactionRecord
	rev, err := s.get(ctx, compactionKey(name), &r)
	return r, rev, err
}

// PutCompaction writes a topic's compaction record: created when rev is 0,
// else replaced if still at rev (ErrConflict, ErrExists otherwise).
func (s *Store) PutCompaction(ctx context.Context, name routing.TopicName, r CompactionRecord, rev uint64) (uint64, error) {
	if rev == 0 {
		return s.create(ctx, compactionKey(name), r)
	}
	return s.update(ctx, compactionKey(name), r, rev)
}

// DeleteCompaction removes a topic's compaction record.
func (s *Store) DeleteCompaction(ctx context.Context, name routing.TopicName) error {
	err := s.kv.Purge(ctx, compactionKey(name))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil
	}
	return err
}
