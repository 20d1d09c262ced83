package lifecycle

import (
	"context"
	"errors"
	"time"

	"github.com/braidmq/braid/scaling"
	"github.com/braidmq/braid/wal"
	"github.com/braidmq/braid/wal/tier"
)

// The storage worker's part in the remote tier (offload): every pass, for
// each log of a topic with offload on, it
//
//  1. offloads, in order, the closed files whose newest record is
//     offload_after old and that the tier does not hold yet (upload and
//     record: see package tier), stopping at the first failure;
//  2. drops the local copies of the files the tier holds once they are
//     past local_retention_ms (and, in trimBytes, while the topic's disk
//     holds more than local_retention_bytes);
//  3. removes from the tier, objects first, the files past retention (and,
//     in trimBytes, the oldest while tier and disk together hold more than
//     retention_bytes).
//
// A local copy goes only once the tier holds it; a local file that goes
// by retention without having been recorded takes its object (an offload
// cut short after the upload) with it. Once an hour (and at the first
// pass) it sweeps the chunks of uploads that died before their object was
// recorded and are older than tierSweepAge.

// tierOffloadTimeout bounds one pass's offloads of one log.
const tierOffloadTimeout = 2 * time.Minute

// tierSweepAge is how old the chunks of an unrecorded upload must be to
// be swept: older than any upload still under way.
const tierSweepAge = 10 * time.Minute

// offload runs steps 1 and 2 for one log and returns its closed files
// that stay local.
func (w *storageWorker) offload(sl storageLog, p scaling.Policy, now time.Time, files []wal.FileInfo) []wal.FileInfo {
	l, tr, dir := w.l, w.l.store.Tier(), sl.log.Dir()
	ctx, cancel := context.WithTimeout(context.Background(), tierOffloadTimeout)
	defer cancel()
	ready := now.Add(-p.OffloadAfter).UnixMilli()
	for i := range files {
		if !olderThan(sl.log, &files[i], ready) {
			break
		}
		f := files[i]
		if tr.Holds(dir, f.First) {
			continue
		}
		if err := tr.Offload(ctx, dir, sl.log, f); err != nil {
			if errors.Is(err, tier.ErrDropped) {
				break // its topic or segment is being deleted
			}
			l.m.tierErrors.Inc()
			sl.counts.Errors.Add(1)
			l.log.Error("storage worker: offloading a file to the remote tier failed; it stays local, tried again next pass",
				"unit", sl.key.String(), "first", f.First, "next", f.Next, "err", err)
			break
		}
		l.m.tierOffloadedFiles.Inc()
		l.m.tierOffloadedBytes.Add(float64(f.Bytes))
		sl.counts.Offloaded.Add(1)
		sl.counts.OffloadedBytes.Add(uint64(f.Bytes))
		l.log.Debug("storage worker: file offloaded", "unit", sl.key.String(), "first", f.First, "next", f.Next, "bytes", f.Bytes)
	}
	keep := p.LocalRetention()
	if keep < 0 {
		return files
	}
	cutoff := now.Add(-keep).UnixMilli()
	k := 0
	for k < len(files) && olderThan(sl.log, &files[k], cutoff) && tr.Holds(dir, files[k].First) {
		k++
	}
	if k > 0 && w.drop(sl, files[:k], "local_retention") {
		return files[k:]
	}
	return files
}

// expireTier removes from the head of a log's tier the files expired
// says are, and returns the bytes that went.
func (w *storageWorker) expireTier(sl storageLog, expired func(tier.Entry) bool, why string) int64 {
	l := w.l
	ctx, cancel := context.WithTimeout(context.Background(), tierOffloadTimeout)
	defer cancel()
	files, bytes, err := l.store.Tier().Expire(ctx, sl.log.Dir(), expired)
	if err != nil {
		l.m.tierErrors.Inc()
		sl.counts.Errors.Add(1)
		l.log.Error("storage worker: removing files from the remote tier failed; tried again next pass", "unit", sl.key.String(), "why", why, "err", err)
	}
	if files > 0 {
		l.m.tierRemovedFiles.Add(float64(files))
		l.m.tierRemovedBytes.Add(float64(bytes))
		sl.counts.TierRemoved.Add(uint64(files))
		l.log.Debug("storage worker: files removed from the remote tier", "unit", sl.key.String(), "files", files, "bytes", bytes, "why", why)
	}
	return bytes
}

// trimTierBytes removes the oldest files of the topic's logs from the tier
// until excess bytes went (or the tier holds none of them); it returns
// what the tier holds of them after.
func (w *storageWorker) trimTierBytes(logs []storageLog, excess, tiered int64) int64 {
	tr := w.l.store.Tier()
	for excess > 0 && tiered > 0 {
		var oldest *storageLog
		var oldestEntry tier.Entry
		for i := range logs {
			entries, err := tr.Entries(logs[i].log.Dir())
			if err != nil || len(entries) == 0 {
				continue
			}
			if oldest == nil || entries[0].Newest < oldestEntry.Newest {
				oldest, oldestEntry = &logs[i], entries[0]
			}
		}
		if oldest == nil {
			break
		}
		gone := w.expireTier(*oldest, func(e tier.Entry) bool { return e.First == oldestEntry.First }, "retention_bytes")
		if gone == 0 {
			break // it failed (logged)
		}
		tiered -= gone
		excess -= gone
	}
	return tiered
}

// sweepTier removes the chunks of uploads that died unrecorded.
func (w *storageWorker) sweepTier(now time.Time) {
	tr := w.l.store.Tier()
	if tr == nil || now.Sub(w.swept) < time.Hour {
		return
	}
	w.swept = now
	ctx, cancel := context.WithTimeout(context.Background(), tierOffloadTimeout)
	defer cancel()
	n, err := tr.Sweep(ctx, tierSweepAge)
	if err != nil {
		w.l.m.tierErrors.Inc()
		w.l.log.Error("storage worker: sweeping dead uploads from the remote tier failed", "err", err)
		return
	}
	if n > 0 {
		w.l.log.Warn("storage worker: removed the chunks of uploads to the remote tier that died before they were recorded", "uploads", n)
	}
}
