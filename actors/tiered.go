package actors

import (
	"context"
	"errors"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/wal"
	"github.com/braidmq/braid/wal/tier"
)

// The remote tier as the rest of the node sees it: a unit's offsets start
// at the first one the tier holds, reads below the local log's first
// offset go to the tier, and a removal of logs removes what the tier holds
// of them. The storage worker offloads (package lifecycle).

// tierReadTimeout bounds one read from the remote tier (a download of a
// file at most).
const tierReadTimeout = 30 * time.Second

// readLocal serves a UnitRead from a log of this node, and from the
// remote tier below the log's first offset.
func (m *Manager) readLocal(open func() (*wal.Log, error), req UnitRead) (UnitData, error) {
	l, err := open()
	if err != nil {
		return UnitData{}, err
	}
	tr := m.store.Tier()
	d := UnitData{First: m.store.FirstOffset(l), Next: l.NextOffset(), Bytes: l.SizeBytes()}
	if req.ChecksumTo > 0 {
		d.Checksum, err = checksumRecords(l, req.From, req.ChecksumTo)
		return d, err
	}
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
