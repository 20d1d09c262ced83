package logstore

import (
	"context"
	"log/slog"
	"runtime"
	"runtime/pprof"
	"sync"
	"sync/atomic"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/wal"
)

// Commits under DurabilityAlways are made by one Group per node (per
// Store), for every bucket log at once. Each bucket has a Committer: the
// queue of appends it accepted, in order. The group takes
// every committer with appends waiting, writes each one's appends to its
// log as one batch, adds every log's commit to one round of a
// wal.CommitGroup (one syncfs for all of them, or their fdatasyncs
// submitted together), starts the round, acknowledges the previous round
// while the disk works, and waits. What arrives during a round is the next
// round. So a node pays one write per log and one sync per round, however
// many logs are written at once: load spread over a thousand topics costs
// about what the same load on one topic costs, and a bucket needs no
// goroutine of its own.
//
// The order within a round keeps the group from holding a log's sync lock
// while it does anything that may wait for the log store: it writes every
// log first (a failed log reopens through the store), then starts their
// commits, then acknowledges.

// committerLabels are the pprof labels of the group's goroutine.
var committerLabels = pprof.WithLabels(context.Background(), pprof.Labels("braid_committer", "bucket logs"))

// Request is an append a Committer makes durable: its records, and its
// answer, Settle, once the batch that holds it is durable (first: the
// offset of its first record in unit's log) or refused (err). Settle is
// called once per request, from the group's goroutine.
type Request interface {
	Records() []wal.Record
	Settle(unit UnitKey, first uint64, err error)
}

// A Group runs the rounds. Its loop runs while there is work and stops
// when there is none; Submit starts it again.
//
// Rounds overlap: while one round's sync runs, the loop writes the next
// round's appends, so that the disk and the CPU both keep busy. A log
// whose commit is in the round in flight is written only after that round
// is done (a write that rolls the log's file waits for its commit).
type Group[R Request] struct {
	sync   *wal.CommitGroup
	logger *slog.Logger
	// holdReplies, when set, is called around each pass of
	// acknowledgements (see Config.HoldReplies).
	holdReplies func() (release func())
	// ackFence, when set, may refuse acknowledgements (see Ack).
	ackFence func() error

	mu sync.Mutex
	// Guarded by mu: ready holds the committers with appends waiting, in
	// the order they came to have some, each once (committer.queued);
	// running says the loop is running.
	ready   []*Committer[R]
	running bool

	// The loop's own. flight is the round whose sync is under way;
	// durable what it made durable, to acknowledge; written the next
	// round, being written; taken and later reused buffers.
	flight  []roundEntry[R]
	durable []roundEntry[R]
	written []roundEntry[R]
	taken   []*Committer[R]
	now     []*Committer[R]
	later   []*Committer[R]
}

func newGroup[R Request](sync *wal.CommitGroup, logger *slog.Logger, holdReplies func() func(), ackFence func() error) *Group[R] {
	return &Group[R]{sync: sync, logger: logger, holdReplies: holdReplies, ackFence: ackFence}
}

// roundEntry is one committer's batch in a round: written to l, its
// commit pending until the round is done, then durable until
// acknowledged.
type roundEntry[R Request] struct {
	c       *Committer[R]
	l       *wal.Log
	batch   written[R]
	pending *wal.PendingCommit
}

// enqueue puts c, which has appends waiting, in the next round.
func (g *Group[R]) enqueue(c *Committer[R]) {
	g.mu.Lock()
	g.ready = append(g.ready, c)
	start := !g.running
	g.running = true
	g.mu.Unlock()
	if start {
		go func() {
			pprof.SetGoroutineLabels(committerLabels) // profiles say where the node's commit rounds go
			g.run()
		}()
	}
}

// take returns the committers with appends waiting. With none, it returns
// false and the loop stops if it has nothing left to do (idle).
func (g *Group[R]) take(idle bool) ([]*Committer[R], bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.ready) == 0 {
		if idle {
			g.running = false
			return nil, false
		}
		return nil, true
	}
	g.taken, g.ready = g.ready, g.taken[:0]
	return g.taken, true
}

func (g *Group[R]) run() {
	for {
		taken, ok := g.take(len(g.flight) == 0)
		if !ok {
			return
		}
		g.round(taken)
	}
}

// round writes what the taken committers hold while the round in flight
// syncs, waits for that round, starts the sync of the new one, and
// acknowledges what the old one made durable while the disk works.
func (g *Group[R]) round(taken []*Committer[R]) {
	g.written = g.written[:0]
	g.later = g.later[:0]
	g.now = g.now[:0]
	for _, c := range taken {
		if c.inFlight {
			g.later = append(g.later, c)
		} else {
			g.now = append(g.now, c)
		}
	}
	clear(taken)
	g.writeAll(g.now)
	clear(g.now)
	g.finishFlight()
	g.writeAll(g.later)
	clear(g.later)
	if len(g.written) > 0 {
		round := g.sync.NewRound()
		for i := range g.written {
			e := &g.written[i]
			e.pending = e.l.StartCommitIn(round)
			e.c.inFlight = true
		}
		round.Start()
	}
	g.flight, g.written = g.written, g.flight[:0]
	g.acknowledge()
}

// parallelWrites is the least number of logs a round writes from several
// goroutines: a write is a system call of a few microseconds, and a round
// over a thousand logs is milliseconds of them.
const parallelWrites = 32

// writeAll writes what each of cs holds to its log, for the next round:
// from this goroutine, or, for many logs, from as many goroutines as
// there are CPUs (each log from one of them).
func (g *Group[R]) writeAll(cs []*Committer[R]) {
	workers := min(runtime.GOMAXPROCS(0), len(cs)/(parallelWrites/2))
	if len(cs) < parallelWrites || workers < 2 {
		for _, c := range cs {
			if e, ok := writeOne(c); ok {
				g.written = append(g.written, e)
			}
		}
		return
	}
	entries := make([]roundEntry[R], len(cs))
	written := make([]bool, len(cs))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < len(cs); i = int(next.Add(1) - 1) {
				entries[i], written[i] = writeOne(cs[i])
			}
		}()
	}
	wg.Wait()
	for i := range entries {
		if written[i] {
			g.written = append(g.written, entries[i])
		}
	}
}

// writeOne writes what c holds to its log as one batch, for the next
// round; false when there was nothing, or the log could not be written
// (its appends are answered with why). The log may reopen through the
// store here: writeOne is never called while the round in flight holds
// this log's commit.
func writeOne[R Request](c *Committer[R]) (roundEntry[R], bool) {
	reqs := c.takeIncoming()
	if len(reqs) == 0 {
		return roundEntry[R]{}, false
	}
	l, err := c.w.Writable()
	if err != nil {
		c.refuse(reqs, err)
		return roundEntry[R]{}, false
	}
	batch, err := c.write(l, reqs)
	if err != nil {
		c.refuse(reqs, c.w.Failed(l, err))
		return roundEntry[R]{}, false
	}
	return roundEntry[R]{c: c, l: l, batch: batch}, true
}

// finishFlight waits for the round in flight: its batches are durable
// (to acknowledge) or refused.
func (g *Group[R]) finishFlight() {
	for _, e := range g.flight {
		e.c.inFlight = false
		if _, err := e.pending.Wait(); err != nil {
			e.c.refuse(e.batch.reqs, e.c.w.Failed(e.l, err))
			continue
		}
		e.pending = nil
		g.durable = append(g.durable, e)
	}
	clear(g.flight)
	g.flight = g.flight[:0]
}

// acknowledge answers the appends made durable, with their replies held
// so that they go out together.
func (g *Group[R]) acknowledge() {
	if len(g.durable) == 0 {
		return
	}
	if g.holdReplies != nil {
		defer g.holdReplies()()
	}
	for _, e := range g.durable {
		Ack(e.c.key, e.batch.reqs, e.batch.first, g.ackFence)
		if e.c.onDurable != nil {
			e.c.onDurable()
		}
		e.c.settled()
	}
	clear(g.durable)
	g.durable = g.durable[:0]
}

// A Committer is a bucket's queue of appends for the Group: the bucket
// submits what it accepted, in order; the group writes it, makes it
// durable and acknowledges it.
type Committer[R Request] struct {
	key       UnitKey
	w         *Writer
	logger    *slog.Logger
	group     *Group[R]
	onDurable func() // called after each acknowledged batch
	// account, when set, is told of each batch as it is written.
	account func(reqs []R)

	mu   sync.Mutex
	cond *sync.Cond // signalled when the group is done with a batch
	// Guarded by mu: incoming holds the submitted appends the group has
	// not taken, in order; queued says the committer is in the group's
	// ready list (it is whenever incoming is not empty); batches counts
	// the batches the group took and has not yet acknowledged or
	// refused; closed is set by close.
	incoming []R
	queued   bool
	batches  int
	closed   bool

	// The group's own: batch is its gather buffer for this committer;
	// inFlight says the round in flight holds a commit of its log.
	batch    []wal.Record
	inFlight bool
}

// written[R] is one batch written to the log and not yet acknowledged:
// the appends it holds and the offset of its first record.
type written[R Request] struct {
	reqs  []R
	first uint64
}

// NewCommitter returns the committer of unit key, written through w,
// committed in rounds of group (GroupOf). onDurable, when set, is called
// after each acknowledged batch; account, when set, is told of each batch
// as it is written (the bucket's metrics and load meter).
func NewCommitter[R Request](key UnitKey, w *Writer, group *Group[R], logger *slog.Logger, onDurable func(), account func(reqs []R)) *Committer[R] {
	c := &Committer[R]{key: key, w: w, group: group, logger: logger, onDurable: onDurable, account: account}
	c.cond = sync.NewCond(&c.mu)
	return c
}

// Submit queues appends for the next round, after everything submitted
// before. A closed committer refuses them.
func (c *Committer[R]) Submit(reqs []R) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		c.answer(reqs, api.Errorf(api.CodeUnavailable, "%s: bucket stopped; resend", c.key))
		return
	}
	c.incoming = append(c.incoming, reqs...)
	enqueue := !c.queued
	c.queued = true
	c.mu.Unlock()
	if enqueue {
		c.group.enqueue(c)
	}
}

// takeIncoming hands the group what was submitted; the group answers
// every append of it (settled or refuse).
func (c *Committer[R]) takeIncoming() []R {
	c.mu.Lock()
	defer c.mu.Unlock()
	reqs := c.incoming
	c.incoming = nil
	c.queued = false
	if len(reqs) > 0 {
		c.batches++
	}
	return reqs
}

// settled says the group has answered a batch it took.
func (c *Committer[R]) settled() {
	c.mu.Lock()
	c.batches--
	c.mu.Unlock()
	c.cond.Broadcast()
}

// Drain returns once every append submitted before it is answered.
func (c *Committer[R]) Drain() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.incoming) > 0 || c.queued || c.batches > 0 {
		c.cond.Wait()
	}
}

// Close drains the committer; appends submitted after it are refused.
func (c *Committer[R]) Close() {
	c.Drain()
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
}

// write writes reqs to l as one batch.
func (c *Committer[R]) write(l *wal.Log, reqs []R) (written[R], error) {
	recs := reqs[0].Records()
	if len(reqs) > 1 {
		c.batch = c.batch[:0]
		for i := range reqs {
			c.batch = append(c.batch, reqs[i].Records()...)
		}
		recs = c.batch
	}
	first, err := l.Write(recs...)
	clear(c.batch) // drop the references to the request buffers
	if err == nil && c.account != nil {
		c.account(reqs)
	}
	return written[R]{reqs: reqs, first: first}, err
}

// refuse answers a batch the group took with err (the unitWriter logged
// the failure).
func (c *Committer[R]) refuse(reqs []R, err error) {
	c.answer(reqs, err)
	c.settled()
}

// answer answers reqs with err.
func (c *Committer[R]) answer(reqs []R, err error) {
	for i := range reqs {
		reqs[i].Settle(c.key, 0, err)
	}
}

// Ack acknowledges reqs, a durable batch of unit key whose first record
// is at offset first, with their offsets, unless fence (nil: none) refuses
// acknowledgements now: then each is answered with its error. A node that
// may have been cut off long enough for another to seal its segments in
// metadata does not acknowledge what it wrote meanwhile (the producer
// resends it; the copy in the sealed segment is read as well: at least
// once).
func Ack[R Request](key UnitKey, reqs []R, first uint64, fence func() error) {
	if fence != nil {
		if err := fence(); err != nil {
			for i := range reqs {
				reqs[i].Settle(key, 0, err)
			}
			return
		}
	}
	off := first
	for i := range reqs {
		reqs[i].Settle(key, off, nil)
		off += uint64(len(reqs[i].Records()))
	}
}
