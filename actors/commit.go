package actors

import (
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/wal"
)

// Commits under DurabilityAlways are made by one groupCommitter per node
// (per LogStore), for every bucket log at once. Each bucket has a
// committer: the queue of appends it accepted, in order. The group takes
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

// groupCommitter runs the rounds. Its loop runs while there is work and
// stops when there is none; submit starts it again.
//
// Rounds overlap: while one round's sync runs, the loop writes the next
// round's appends, so that the disk and the CPU both keep busy. A log
// whose commit is in the round in flight is written only after that round
// is done (a write that rolls the log's file waits for its commit).
type groupCommitter struct {
	sync   *wal.CommitGroup
	logger *slog.Logger
	// holdReplies, when set, is called around each pass of
	// acknowledgements (see Config.HoldReplies).
	holdReplies func() (release func())
	// ackFence, when set, may refuse acknowledgements (see ackBatch).
	ackFence func() error

	mu sync.Mutex
	// Guarded by mu: ready holds the committers with appends waiting, in
	// the order they came to have some, each once (committer.queued);
	// running says the loop is running.
	ready   []*committer
	running bool

	// The loop's own. flight is the round whose sync is under way;
	// durable what it made durable, to acknowledge; written the next
	// round, being written; taken and later reused buffers.
	flight  []roundEntry
	durable []roundEntry
	written []roundEntry
	taken   []*committer
	now     []*committer
	later   []*committer
}

func newGroupCommitter(sync *wal.CommitGroup, logger *slog.Logger, holdReplies func() func(), ackFence func() error) *groupCommitter {
	return &groupCommitter{sync: sync, logger: logger, holdReplies: holdReplies, ackFence: ackFence}
}

// roundEntry is one committer's batch in a round: written to l, its
// commit pending until the round is done, then durable until
// acknowledged.
type roundEntry struct {
	c       *committer
	l       *wal.Log
	batch   writtenBatch
	pending *wal.PendingCommit
}

// enqueue puts c, which has appends waiting, in the next round.
func (g *groupCommitter) enqueue(c *committer) {
	g.mu.Lock()
	g.ready = append(g.ready, c)
	start := !g.running
	g.running = true
	g.mu.Unlock()
	if start {
		go g.run()
	}
}

// take returns the committers with appends waiting. With none, it returns
// false and the loop stops if it has nothing left to do (idle).
func (g *groupCommitter) take(idle bool) ([]*committer, bool) {
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

func (g *groupCommitter) run() {
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
func (g *groupCommitter) round(taken []*committer) {
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
func (g *groupCommitter) writeAll(cs []*committer) {
	workers := min(runtime.GOMAXPROCS(0), len(cs)/(parallelWrites/2))
	if len(cs) < parallelWrites || workers < 2 {
		for _, c := range cs {
			if e, ok := writeOne(c); ok {
				g.written = append(g.written, e)
			}
		}
		return
	}
	entries := make([]roundEntry, len(cs))
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
func writeOne(c *committer) (roundEntry, bool) {
	reqs := c.takeIncoming()
	if len(reqs) == 0 {
		return roundEntry{}, false
	}
	l, err := c.w.writable()
	if err != nil {
		c.refuse(reqs, err)
		return roundEntry{}, false
	}
	batch, err := c.write(l, reqs)
	if err != nil {
		c.refuse(reqs, c.w.failed(l, err))
		return roundEntry{}, false
	}
	return roundEntry{c: c, l: l, batch: batch}, true
}

// finishFlight waits for the round in flight: its batches are durable
// (to acknowledge) or refused.
func (g *groupCommitter) finishFlight() {
	for _, e := range g.flight {
		e.c.inFlight = false
		if _, err := e.pending.Wait(); err != nil {
			e.c.refuse(e.batch.reqs, e.c.w.failed(e.l, err))
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
func (g *groupCommitter) acknowledge() {
	if len(g.durable) == 0 {
		return
	}
	if g.holdReplies != nil {
		defer g.holdReplies()()
	}
	for _, e := range g.durable {
		ackBatch(e.c.unit(), e.batch, g.ackFence)
		if e.c.onDurable != nil {
			e.c.onDurable()
		}
		e.c.settled()
	}
	clear(g.durable)
	g.durable = g.durable[:0]
}

// committer is a bucket's queue of appends for the groupCommitter: the
// bucket submits what it accepted, in order; the group writes it, makes
// it durable and acknowledges it.
type committer struct {
	key       UnitKey
	w         *unitWriter
	logger    *slog.Logger
	group     *groupCommitter
	onDurable func() // called after each acknowledged batch
	// account, when set before the first submit, is told of each batch
	// as it is written (the bucket's metrics and load meter).
	account func(reqs []appendReq)

	mu   sync.Mutex
	cond *sync.Cond // signalled when the group is done with a batch
	// Guarded by mu: incoming holds the submitted appends the group has
	// not taken, in order; queued says the committer is in the group's
	// ready list (it is whenever incoming is not empty); batches counts
	// the batches the group took and has not yet acknowledged or
	// refused; closed is set by close.
	incoming []appendReq
	queued   bool
	batches  int
	closed   bool

	// The group's own: batch is its gather buffer for this committer;
	// inFlight says the round in flight holds a commit of its log.
	batch    []wal.Record
	inFlight bool
}

// writtenBatch is one batch written to the log and not yet acknowledged:
// the appends it holds and the offset of its first record.
type writtenBatch struct {
	reqs  []appendReq
	first uint64
}

func newCommitter(key UnitKey, w *unitWriter, group *groupCommitter, logger *slog.Logger, onDurable func()) *committer {
	c := &committer{key: key, w: w, group: group, logger: logger, onDurable: onDurable}
	c.cond = sync.NewCond(&c.mu)
	return c
}

// submit queues appends for the next round, after everything submitted
// before. A closed committer refuses them.
func (c *committer) submit(reqs []appendReq) {
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
func (c *committer) takeIncoming() []appendReq {
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
func (c *committer) settled() {
	c.mu.Lock()
	c.batches--
	c.mu.Unlock()
	c.cond.Broadcast()
}

// drain returns once every append submitted before it is answered.
func (c *committer) drain() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.incoming) > 0 || c.queued || c.batches > 0 {
		c.cond.Wait()
	}
}

// close drains the committer; appends submitted after it are refused.
func (c *committer) close() {
	c.drain()
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
}

// write writes reqs to l as one batch.
func (c *committer) write(l *wal.Log, reqs []appendReq) (writtenBatch, error) {
	recs := reqs[0].records
	if len(reqs) > 1 {
		c.batch = c.batch[:0]
		for i := range reqs {
			c.batch = append(c.batch, reqs[i].records...)
		}
		recs = c.batch
	}
	first, err := l.Write(recs...)
	clear(c.batch) // drop the references to the request buffers
	if err == nil && c.account != nil {
		c.account(reqs)
	}
	return writtenBatch{reqs: reqs, first: first}, err
}

// refuse answers a batch the group took with err (the unitWriter logged
// the failure).
func (c *committer) refuse(reqs []appendReq, err error) {
	c.answer(reqs, err)
	c.settled()
}

// answer answers reqs with err.
func (c *committer) answer(reqs []appendReq, err error) {
	for i := range reqs {
		reqs[i].settle(c.unit(), 0, err)
	}
}

func (c *committer) unit() unitRef { return unitRef{c.key.Segment, c.key.Bucket} }

// ackBatch acknowledges the appends of a durable batch of unit u with
// their offsets, unless fence (nil: none) refuses acknowledgements now:
// then each is answered with its error. A node that may have been cut
// off long enough for another to seal its segments in metadata does not
// acknowledge what it wrote meanwhile (the producer resends it; the copy
// in the sealed segment is read as well: at least once).
func ackBatch(u unitRef, b writtenBatch, fence func() error) {
	if fence != nil {
		if err := fence(); err != nil {
			for i := range b.reqs {
				b.reqs[i].settle(u, 0, err)
			}
			return
		}
	}
	off := b.first
	for i := range b.reqs {
		b.reqs[i].settle(u, off, nil)
		off += uint64(len(b.reqs[i].records))
	}
}
