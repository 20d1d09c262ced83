package actors

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/wal"
	"github.com/braidmq/braid/wal/tier"
)

// The remote tier as the rest of the node sees it: a unit's offsets start
// at the first one the tier holds, reads below the local log's first
// offset go to the tier, and a removal of logs removes what the tier holds
// of them. The storage worker offloads (storage.go).

// tierReadTimeout bounds one read from the remote tier (a download of a
// file at most).
const tierReadTimeout = 30 * time.Second

// firstOffset returns the first offset of the log's unit: the tier's, if
// it holds older offsets than the log.
func (s *LogStore) firstOffset(l *wal.Log) uint64 {
	first := l.FirstOffset()
	if s.tier != nil {
		if f, ok := s.tier.First(l.Dir()); ok && f < first {
			return f
		}
	}
	return first
}

// removeLogs removes a directory of logs, after what the tier holds of
// the logs in it: a failure there keeps the directory (and the manifests
// that name the tier's objects) for the removal to be tried again.
func (s *LogStore) removeLogs(dir string) error {
	if s.tier != nil {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil
				}
				return err
			}
			if !d.IsDir() || !hasManifest(path) {
				return nil
			}
			ctx, cancel := context.WithTimeout(context.Background(), tierReadTimeout)
			defer cancel()
			return s.tier.DropLog(ctx, path)
		})
		if err != nil {
			return err
		}
	}
	return os.RemoveAll(dir)
}

func hasManifest(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, tier.ManifestName))
	return err == nil
}

// readLocal serves a UnitRead from a log of this node, and from the
// remote tier below the log's first offset.
func (m *Manager) readLocal(open func() (*wal.Log, error), req UnitRead) (UnitData, error) {
	l, err := open()
	if err != nil {
		return UnitData{}, err
	}
	tr := m.store.tier
	d := UnitData{First: m.store.firstOffset(l), Next: l.NextOffset(), Bytes: l.SizeBytes()}
	if req.BoundsOnly || req.From >= d.Next {
		return d, nil
	}
	if tr != nil && req.From < l.FirstOffset() {
		ctx, cancel := context.WithTimeout(context.Background(), tierReadTimeout)
		recs, err := tr.Read(ctx, l.Dir(), req.From, req.Max, req.MaxBytes)
		cancel()
		switch {
		case err == nil:
			m.m.tierReads.WithLabelValues("ok").Inc()
			d.Records = recs
			return d, nil
		case !errors.Is(err, tier.ErrNotInTier):
			m.m.tierReads.WithLabelValues("error").Inc()
			m.log.Error("reading from the remote tier failed", "dir", l.Dir(), "from", req.From, "err", err)
			return d, api.Errorf(api.CodeUnavailable, "reading offset %d from the remote tier: %v; retry", req.From, err)
		}
	}
	d.Records, err = l.ReadRange(req.From, req.Max, req.MaxBytes)
	if errors.Is(err, wal.ErrClosed) {
		// The log was opened again under the read (its bucket reopened
		// it after a failed write): read the one the store has now.
		if l, err = open(); err == nil {
			d.Records, err = l.ReadRange(req.From, req.Max, req.MaxBytes)
		}
	}
	return d, err
}
