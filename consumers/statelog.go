package consumers

import (
	"log/slog"
	"time"

	"github.com/braidmq/braid/wal"
)

// A group's state log: where its records go (ack cursors, owners, drained
// segments...), and the snapshot that replaces them once there are many.
// By default it is the group's own WAL in its directory (LocalLogs); in a
// cluster it may be replicated on several nodes (WithLogs: package
// cluster's raft-backed logs), where an append is answered once a majority
// holds it.

// StateLog is an open state log of one group. Its methods are called from
// the group's actor only.
type StateLog interface {
	// Append writes rec durably and returns its offset.
	Append(rec wal.Record) (uint64, error)
	// Compact makes snapshot the log's only record (the ones before are
	// dropped once it is durable) and returns the records the log holds.
	Compact(snapshot wal.Record) (records int, err error)
	// Close closes the log.
	Close() error
}

// A Maintained state log has work of its own to do now and then, which
// the group does from its actor, at its timer: a replicated log follows
// its topic's replicas (a copy lost with a node is made again) without
// waiting for the group's next write.
type Maintained interface {
	// MaintainAt is when the log next wants Maintain (zero: never).
	MaintainAt() time.Time
	// Maintain does that work; an error is logged, and the log asks
	// again through MaintainAt.
	Maintain(now time.Time) error
}

// LogRequest names the state log a group opens.
type LogRequest struct {
	Topic, Subscription string
	// Dir is the group's directory on this node.
	Dir string
	// Create says the subscription is being made (its first join): the
	// log is made if there is none. Without it, a group with no state gets
	// no log.
	Create     bool
	Durability wal.Durability
	Logger     *slog.Logger
}

// LogOpener opens groups' state logs: it hands every record's payload to
// apply, in order, and returns the log and the records it holds; a nil log
// without error when the group has no state and the request does not
// create it.
type LogOpener interface {
	Open(req LogRequest, apply func([]byte) error) (StateLog, int, error)
}

// WithLogs sets how the manager's groups open their state logs (default
// LocalLogs).
func WithLogs(open LogOpener) Option {
	return func(o *managerOptions) { o.logs = open }
}

// LocalLogs opens each group's log as a WAL in its own directory.
type LocalLogs struct{}

// Open implements LogOpener.
func (LocalLogs) Open(req LogRequest, apply func([]byte) error) (StateLog, int, error) {
	if !req.Create {
		// No state yet: no log in the group's directory. (The directory
		// may exist, holding only the replicated generations a deleted
		// subscription of the same name left on this node: a log opened
		// there would keep a new subscription's state on this node alone.)
		if has, err := wal.HasLog(nil, req.Dir); err != nil || !has {
			return nil, 0, err
		}
	}
	l, records, err := openAndReplay(req.Dir, req.Durability, nil, req.Logger, apply)
	if l == nil {
		return nil, 0, err
	}
	return LocalLog{l}, records, err
}

// LocalLog is a state log kept in one WAL.
type LocalLog struct{ Log *wal.Log }

// Append implements StateLog.
func (l LocalLog) Append(rec wal.Record) (uint64, error) { return l.Log.Append(rec) }

// Compact implements StateLog (compactLog).
func (l LocalLog) Compact(snapshot wal.Record) (int, error) { return compactRecord(l.Log, snapshot) }

// Close implements StateLog.
func (l LocalLog) Close() error { return l.Log.Close() }
