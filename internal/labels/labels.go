// Package labels puts pprof labels on actors, so that a CPU or goroutine
// profile of a node says which topic, segment, unit or subscription the
// time went to (wal labels its logs' sync goroutines the same way).
//
// protoactor runs an actor's mailbox in a goroutine its dispatcher
// starts for each run (of up to Throughput messages), and a goroutine
// inherits the labels of the one that starts it: the sender's. Dispatcher
// sets the actor's own labels first, from a context made once, which
// costs no allocation per run.
package labels

import (
	"context"
	"runtime/pprof"

	"github.com/asynkron/protoactor-go/actor"
)

// throughput is protoactor's default: the messages a mailbox run handles
// before it yields.
const throughput = 300

// dispatcher runs mailboxes in goroutines labelled with ctx's labels.
type dispatcher struct{ ctx context.Context }

// Dispatcher returns a protoactor dispatcher whose mailbox runs carry the
// pprof labels kv (key, value, ...).
func Dispatcher(kv ...string) actor.Dispatcher {
	return dispatcher{ctx: pprof.WithLabels(context.Background(), pprof.Labels(kv...))}
}

func (d dispatcher) Schedule(fn func()) {
	go func() {
		pprof.SetGoroutineLabels(d.ctx)
		fn()
	}()
}

func (d dispatcher) Throughput() int { return throughput }

// Go runs f in a new goroutine carrying the pprof labels kv.
func Go(f func(), kv ...string) {
	go pprof.Do(context.Background(), pprof.Labels(kv...), func(context.Context) { f() })
}
