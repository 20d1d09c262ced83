package actors

import (
	"errors"
	"log/slog"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/wal"
)

// appendReq asks a bucket to append records, in order. done is called once,
// from the bucket actor or its committer, after the batch holding them is
// durable (per the durability mode) or refused. hashes holds the key hashes of the keyed
// records, for the load meter.
type appendReq struct {
	records []wal.Record
	hashes  []uint64
	done    func(first uint64, err error)
}

// sealReq seals a bucket at a layout epoch: what it accepted before is
// flushed, what comes after is refused with SEGMENT_SEALED. Unseal reverts a
// seal whose layout change failed to persist. done reports the final next
// offset of the bucket.
type sealReq struct {
	epoch  uint64
	unseal bool
	done   func(next uint64, err error)
}

// flushMsg is the message a bucket sends itself to commit its queue.
type flushMsg struct{}

// crashMsg makes a bucket panic; tests use it to prove supervision restarts
// a bucket with nothing acknowledged lost.
type crashMsg struct{}

// bucketActor owns one bucket log.
type bucketActor struct {
	key   UnitKey
	store *LogStore
	opts  wal.Options
	log   *slog.Logger
	m     *metrics
	meter *bucketMeter

	wal *wal.Log
	// sealedAt is the layout epoch of the seal; 0 while accepting appends.
	sealedAt uint64
	sealedIn func() uint64
	// queue holds appends received since the last flush; flushQueued says a
	// flushMsg is in the mailbox behind them.
	queue       []appendReq
	flushQueued bool
	// batch is the reused slice the queue's records are gathered into.
	batch []wal.Record
	// commit acknowledges written batches once durable; nil unless the
	// durability is DurabilityAlways (the others acknowledge on write).
	commit *committer
}

// newBucketProps makes the props of a bucket actor. sealedIn reports the
// epoch at which the current layout, or the layout change under way, seals
// the bucket's segment (0 while it is active): a bucket restarted by its
// supervisor takes its seal from there, not from the memory it lost.
func newBucketProps(key UnitKey, store *LogStore, opts wal.Options, log *slog.Logger, m *metrics, meter *bucketMeter, sealedIn func() uint64) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor {
		return &bucketActor{key: key, store: store, opts: opts, log: log, m: m, meter: meter, sealedIn: sealedIn}
	})
}

func (b *bucketActor) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		l, err := b.store.Reopen(b.key, b.opts)
		if err != nil {
			// Without its log the bucket cannot serve; the supervisor
			// restarts it and the open is tried again.
			panic(err)
		}
		b.wal = l
		if b.opts.Durability == wal.DurabilityAlways {
			topic := b.key.Topic.String()
			b.commit = startCommitter(b.key, l, func() { b.store.Signal(topic) })
		}
		if b.sealedIn != nil {
			b.sealedAt = b.sealedIn()
		}
	case appendReq:
		if b.sealedAt != 0 {
			msg.done(0, api.SealedError(uint64(b.key.Segment), b.sealedAt))
			return
		}
		b.queue = append(b.queue, msg)
		if !b.flushQueued {
			b.flushQueued = true
			ctx.Send(ctx.Self(), flushMsg{})
		}
	case flushMsg:
		b.flushQueued = false
		b.flush()
	case sealReq:
		b.flush()
		b.drain()
		if msg.unseal {
			b.sealedAt = 0
		} else {
			b.sealedAt = msg.epoch
		}
		msg.done(b.wal.NextOffset(), nil)
	case crashMsg:
		panic("braid/actors: crash requested for " + b.key.String())
	case *actor.Restarting:
		b.failQueue(errors.New("bucket restarting"))
		b.stopCommitter()
	case *actor.Stopping:
		b.flush()
		b.stopCommitter()
	}
}

// drain waits until every written batch is durable and acknowledged.
func (b *bucketActor) drain() {
	if b.commit != nil {
		b.commit.drain()
	}
}

// stopCommitter acknowledges what is written, once durable, and stops the
// committer.
func (b *bucketActor) stopCommitter() {
	if b.commit != nil {
		b.commit.close()
		b.commit = nil
	}
}

// flush writes the queue as one batch and acknowledges it once durable:
// at once unless the durability is DurabilityAlways, else through the
// committer, which syncs it (with whatever else is written by then).
func (b *bucketActor) flush() {
	if len(b.queue) == 0 {
		return
	}
	payloadBytes := 0
	for _, q := range b.queue {
		for i := range q.records {
			payloadBytes += len(q.records[i].Key) + len(q.records[i].Payload)
		}
	}
	// One request (the usual case) is written as it came; several are
	// gathered into the reused batch slice.
	recs := b.queue[0].records
	if len(b.queue) > 1 {
		b.batch = b.batch[:0]
		for _, q := range b.queue {
			b.batch = append(b.batch, q.records...)
		}
		recs = b.batch
	}
	n := len(recs)
	first, err := b.wal.Write(recs...)
	clear(b.batch) // drop the references to the request buffers
	queue := b.queue
	b.queue = nil
	if err != nil {
		b.log.Error("append failed", "unit", b.key.String(), "records", n, "err", err)
		for _, q := range queue {
			q.done(0, api.Errorf(api.CodeInternal, "append to %s: %v", b.key, err))
		}
		return
	}
	b.m.appended(b.key, n, payloadBytes)
	if b.meter != nil {
		b.meter.appended(queue, n, payloadBytes)
	}
	written := writtenBatch{reqs: queue, first: first, end: first + uint64(n)}
	if b.commit != nil {
		b.commit.add(written)
		return
	}
	ackBatch(written)
	b.store.Signal(b.key.Topic.String())
}

func (b *bucketActor) failQueue(err error) {
	for _, q := range b.queue {
		q.done(0, api.Errorf(api.CodeUnavailable, "%s: %v; resend", b.key, err))
	}
	b.queue = nil
}
