package logstore

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/braidmq/braid/wal"
	"github.com/braidmq/braid/wal/tier"
)

// The remote tier as the log store sees it: a unit's offsets start at the
// first one the tier holds, and a removal of logs removes what the tier
// holds of them (the storage worker offloads; reads below a log's first
// offset go to the tier: package actors).

// tierTimeout bounds one request to the remote tier.
const tierTimeout = 30 * time.Second

// Tier is the remote tier (nil: none).
func (s *Store) Tier() *tier.Tier { return s.tier }

// FirstOffset returns the first offset of the log's unit: the tier's, if
// it holds older offsets than the log.
func (s *Store) FirstOffset(l *wal.Log) uint64 {
	first := l.FirstOffset()
	if s.tier != nil {
		if f, ok := s.tier.First(l.Dir()); ok && f < first {
			return f
		}
	}
	return first
}

// RemoveLogs removes a directory of logs, after what the tier holds of
// the logs in it: a failure there keeps the directory (and the manifests
// that name the tier's objects) for the removal to be tried again.
func (s *Store) RemoveLogs(dir string) error {
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
			ctx, cancel := context.WithTimeout(context.Background(), tierTimeout)
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
