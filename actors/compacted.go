package actors

import (
	"context"
	"errors"
	"os"
	"time"

	"github.com/braidmq/braid/compaction"
	"github.com/braidmq/braid/meta"
	"github.com/braidmq/braid/topology"
)

// Reads of the compacted view (read.fetch "compacted":true): a unit's
// offsets below its horizon are read from its compacted log (the kept
// records, at their offsets), those from the horizon on from its log.

// CompactionRecord returns the topic's compaction record, read from the
// metadata once per activation (and written by a compaction here,
// CompactionRecorded); nil when it has none.
func (t *Topic) CompactionRecord() *meta.CompactionRecord {
	if r := t.compaction.Load(); r != nil {
		if r.Generation == 0 {
			return nil
		}
		return r
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rec, _, err := t.mgr.meta.Compaction(ctx, t.name)
	switch {
	case errors.Is(err, meta.ErrNotFound) || err == nil && rec.Incarnation != t.incarnation:
		rec = meta.CompactionRecord{}
	case err != nil:
		return nil // read raw this time; the next read asks again
	}
	t.compaction.Store(&rec)
	if rec.Generation == 0 {
		return nil
	}
	return &rec
}

// ReadCompacted reads a unit of the topic's compacted view from from: the
// kept records at their offsets below the unit's horizon (none below its
// first offset: what retention removed is not in the view), then, in the
// same read when there is room, its log from the horizon. It returns the
// records with their offsets and resume, the offset the next read of the
// unit goes on from: past the last record returned, and past the offsets
// compaction removed after it. The compacted logs are on this node, the
// topic's home, also those of units other nodes own.
func (t *Topic) ReadCompacted(seg topology.SegmentID, bucket int, from uint64, maxRecs, maxBytes int) (kept []compaction.Kept, resume uint64, err error) {
	if rec := t.CompactionRecord(); rec != nil {
		if horizon, ok := rec.Horizon(uint64(seg), bucket); ok && from < horizon {
			var done bool
			kept, from, done, err = t.readKept(seg, bucket, rec.Generation, horizon, from, maxRecs, maxBytes)
			if err != nil || done {
				return kept, from, err
			}
			maxRecs -= len(kept)
			if maxBytes > 0 {
				for _, k := range kept {
					maxBytes -= len(k.Record.Payload)
				}
				if len(kept) > 0 && maxBytes <= 0 {
					return kept, from, nil
				}
			}
			if maxRecs <= 0 {
				return kept, from, nil
			}
		}
	}
	recs, err := t.Read(seg, bucket, from, maxRecs, maxBytes)
	if err != nil && len(kept) > 0 {
		return kept, from, nil // the next read reports it
	}
	for i, r := range recs {
		kept = append(kept, compaction.Kept{Offset: from + uint64(i), Record: r})
	}
	return kept, from + uint64(len(recs)), err
}

// readKept reads the kept records of a unit's compacted log of generation
// gen from from, below horizon. It returns them and where the view goes on:
// with done, past the last of them (the compacted log has more); else at
// the horizon (or the unit's first offset past it), where the log takes
// over — or at from when this node does not have the compacted log (the
// log is read raw).
func (t *Topic) readKept(seg topology.SegmentID, bucket int, gen, horizon, from uint64, maxRecs, maxBytes int) (kept []compaction.Kept, next uint64, done bool, err error) {
	first, _, err := t.Bounds(seg, bucket)
	if err != nil {
		return nil, from, true, err
	}
	r, err := t.compactedReader(compaction.GenerationDir(t.mgr.store.UnitDir(UnitKey{Topic: t.name, Segment: seg, Bucket: bucket}), gen))
	if err != nil {
		return nil, from, true, err
	}
	if r == nil {
		return nil, from, false, nil
	}
	got, end, err := r.ReadFrom(max(from, first), maxRecs, maxBytes)
	if err != nil {
		return nil, from, true, err
	}
	n := 0
	for n < len(got) && got[n].Offset < horizon {
		n++
	}
	if kept = got[:n]; n == len(got) && !end && n > 0 {
		return kept, kept[n-1].Offset + 1, true, nil
	}
	return kept, max(horizon, first), false, nil
}

// compactedReader returns the reader of the compacted log in dir, opening
// it on first use; nil when dir is not on this node (the topic's home
// moved since the compaction: its units are read raw until the next).
func (t *Topic) compactedReader(dir string) (*compaction.LogReader, error) {
	t.compactedMu.Lock()
	defer t.compactedMu.Unlock()
	if r := t.compacted[dir]; r != nil {
		return r, nil
	}
	r, err := compaction.OpenLog(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if t.compacted == nil {
		t.compacted = map[string]*compaction.LogReader{}
	}
	t.compacted[dir] = r
	return r, nil
}

// CompactionRecorded tells the topic that a compaction here recorded rec
// in the metadata (the commit point of the compaction): reads of its
// compacted view go by rec from now on, and the readers of the compacted
// logs of other generations are closed (their directories are going).
func (t *Topic) CompactionRecorded(rec meta.CompactionRecord) {
	t.compaction.Store(&rec)
	gen := rec.Generation
	t.compactedMu.Lock()
	defer t.compactedMu.Unlock()
	for dir, r := range t.compacted {
		if !hasGeneration(dir, gen) {
			r.Close()
			delete(t.compacted, dir)
		}
	}
}

// closeCompactedReaders closes the readers of the compacted logs the topic
// opened (it is passivated: they held a descriptor each for ever).
func (t *Topic) closeCompactedReaders() {
	t.compactedMu.Lock()
	defer t.compactedMu.Unlock()
	for dir, r := range t.compacted {
		r.Close()
		delete(t.compacted, dir)
	}
}

func hasGeneration(dir string, gen uint64) bool {
	g, ok := compaction.GenerationOf(dir)
	return ok && g == gen
}
