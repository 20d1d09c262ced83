package actors

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/meta"
	"github.com/braidmq/braid/routing"
	"github.com/braidmq/braid/topology"
	"github.com/braidmq/braid/wal"
)

// The topics as the storage lifecycle's runners see them (package
// lifecycle: the storage worker, the compactor). Beside what every caller
// has (Manager.All, Active, Topic, Store, ResolvePolicies; Topic.Layout,
// Policy, Bounds), they need the records of the topics whose segments this
// node holds for another node, the logs of sealed segments, reads that are
// not load, and where to count what they did.

// HeldRecord returns the record of topic name, not active here, whose
// segments this node holds (a split's child placed here, a sealed segment
// it serves reads of), read from the store at most 5 s before: the storage
// worker applies that topic's own policies to them.
func (m *Manager) HeldRecord(ctx context.Context, name routing.TopicName) (meta.TopicRecord, error) {
	return m.servedRecord(ctx, name)
}

// Incarnation is the topic's incarnation: its record's, and the name of
// the directory its logs live in.
func (t *Topic) Incarnation() string { return t.incarnation }

// RemoteOwner returns the node that owns segment s of the topic when that
// is another node, which holds its logs (reads of it go there).
func (t *Topic) RemoteOwner(s topology.Segment) (string, bool) { return t.remoteOwner(s) }

// OpenLog returns the log of unit bucket of segment s, which this node
// holds, opened with the topic's log options if it is not open (a sealed
// segment's: the idle sweeper closes it again).
func (t *Topic) OpenLog(s topology.Segment, bucket int) (*wal.Log, error) {
	return t.unitLogFor(s, bucket)()
}

// ReadUnit reads records of unit bucket of segment s from offset from: of
// the log here (and the remote tier below its local first offset), or of
// its owner's (RemoteOwner). Unlike Read it counts nothing as the
// segment's out-load: the compactor reads every unit whole.
func (t *Topic) ReadUnit(s topology.Segment, bucket int, from uint64, max, maxBytes int) ([]wal.Record, error) {
	if owner, remote := t.remoteOwner(s); remote {
		d, err := t.readRemote(owner, s, bucket, from, max, maxBytes, false)
		return d.Records, err
	}
	d, err := t.mgr.readLocal(t.unitLogFor(s, bucket), UnitRead{From: from, Max: max, MaxBytes: maxBytes})
	return d.Records, err
}

// StorageCounts is what the storage worker did to a topic's logs since the
// topic was activated here, as topic.stats shows it (Stats).
type StorageCounts struct {
	// Files rolled, files removed and their bytes (head trims' included),
	// head trims, files offloaded and their bytes, files removed from the
	// remote tier, and what failed.
	Rolled, Removed, RemovedBytes, HeadTrims, Offloaded, OffloadedBytes, TierRemoved, Errors atomic.Uint64
	// LastPass is when the worker last visited the topic's logs (unix ns;
	// 0: not yet).
	LastPass atomic.Int64
}

// StorageCounts is where the storage worker counts what it does to the
// topic's logs.
func (t *Topic) StorageCounts() *StorageCounts { return &t.storage }

// Stats is c in wire form.
func (c *StorageCounts) Stats() *api.StorageStats {
	st := &api.StorageStats{FilesRolled: c.Rolled.Load(), FilesRemoved: c.Removed.Load(), BytesRemoved: c.RemovedBytes.Load(),
		HeadTrims: c.HeadTrims.Load(), FilesOffloaded: c.Offloaded.Load(), BytesOffloaded: c.OffloadedBytes.Load(),
		TierFilesRemoved: c.TierRemoved.Load(), Errors: c.Errors.Load()}
	if ns := c.LastPass.Load(); ns != 0 {
		st.LastPass = time.Unix(0, ns).UTC().Format(time.RFC3339Nano)
	}
	return st
}
