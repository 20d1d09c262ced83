package lifecycle

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/braidmq/braid/actors"
	"github.com/braidmq/braid/clock"
	"github.com/braidmq/braid/logstore"
	"github.com/braidmq/braid/meta"
	"github.com/prometheus/client_golang/prometheus"
)

// Config assembles the storage lifecycle of a node.
type Config struct {
	// Topics is the node's topic manager; Start wants it recovered
	// (actors.Manager.Recover).
	Topics *actors.Manager
	// Meta is the metadata store: the topics' compaction records, the
	// namespaces' policies.
	Meta *meta.Store
	// System runs the storage worker and the compactor.
	System *actor.ActorSystem
	// StorageTick is how often the storage worker rolls and trims the open
	// bucket logs by their topics' storage policies (storage.go); 0 or
	// negative runs none.
	StorageTick time.Duration
	// Clock is the time the storage worker runs by; nil is the real clock.
	Clock      clock.Clock
	Registerer prometheus.Registerer
	Logger     *slog.Logger
}

// Lifecycle runs the lifecycle of a node's bucket logs beside the topics
// that write them: the storage worker (storage.go, storage_tier.go) and the
// compactor (compactor.go). It is safe for concurrent use.
type Lifecycle struct {
	cfg    Config
	topics *actors.Manager
	store  *logstore.Store
	meta   *meta.Store
	system *actor.ActorSystem
	clock  clock.Clock
	log    *slog.Logger
	m      *metrics
	// storagePID is the storage worker (nil: none, or stopped); atomic,
	// since the topics re-arm it from wherever they apply their policies
	// (Rearm).
	storagePID atomic.Pointer[actor.PID]
	// compact runs the node's compactions (compactor.go).
	compact compactions
}

// New returns the storage lifecycle of cfg.Topics' logs; Start runs it.
func New(cfg Config) *Lifecycle {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	l := &Lifecycle{cfg: cfg, topics: cfg.Topics, store: cfg.Topics.Store(), meta: cfg.Meta, system: cfg.System,
		clock: clock.Or(cfg.Clock), log: cfg.Logger, m: newMetrics(cfg.Registerer)}
	l.compact.ctx, l.compact.cancel = context.WithCancel(context.Background())
	return l
}

// Start spawns the storage worker (its first pass comes within a second)
// and the compactor.
func (l *Lifecycle) Start() error {
	if err := l.startStorageWorker(); err != nil {
		return err
	}
	l.startCompactor()
	return nil
}

// Close stops the storage worker, after the pass under way, and the
// compactor, whose compactions under way stop (what they wrote is removed
// by the next): call it before the topics close. Compact then answers
// UNAVAILABLE.
func (l *Lifecycle) Close() {
	if pid := l.storagePID.Swap(nil); pid != nil {
		_ = l.system.Root.StopFuture(pid).Wait()
	}
	l.stopCompactor()
}
