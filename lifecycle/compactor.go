package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/braidmq/braid/actors"
	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/compaction"
	"github.com/braidmq/braid/internal/labels"
	"github.com/braidmq/braid/logstore"
	"github.com/braidmq/braid/meta"
	"github.com/braidmq/braid/topology"
	"github.com/braidmq/braid/wal"
)

// The compactor: one actor per node that runs the compactions of the
// topics active here, at most compactConcurrency at once (each in a
// goroutine of its own, the rest queued in its mailbox order). A
// compaction of a topic:
//
//  1. takes every unit's next offset as its new horizon;
//  2. decides, across the units of the whole DAG (package compaction),
//     which record of each key is its latest, reading each unit's previous
//     compacted log below its old horizon and its raw log (and the remote
//     tier) from there to the new one — never what retention removed;
//  3. writes each unit's kept records to "compacted-<generation+1>" in the
//     unit's directory, offsets unchanged, and syncs them — on this node,
//     the topic's home, also for a unit another node owns (a split's
//     child placed there): its records are read from its owner, and the
//     home serves the compacted view (reads of such units pass through it
//     anyway);
//  4. records the new generation and horizons in the topic's compaction
//     record (compare-and-swap): the commit point;
//  5. removes every other generation's directory.
//
// A crash before 4 leaves the old record and a directory of the next
// generation, which the next compaction removes before it writes its own;
// after 4, the old generation's directories, removed by the next. Readers
// only ever open the recorded generation: the old view or the new one.

// compactConcurrency bounds the compactions a node runs at once.
const compactConcurrency = 2

// compactBudget bounds the key map of one compaction (32 bytes a key: 2
// million keys a pass).
const compactBudget = 64 << 20

// compactStart asks the compactor to compact a topic.
type compactStart struct{ t *actors.Topic }

// compactDone tells the compactor one compaction ended.
type compactDone struct{}

type compactorActor struct {
	l       *Lifecycle
	running int
	queue   []*actors.Topic
}

func (c *compactorActor) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case compactStart:
		c.queue = append(c.queue, msg.t)
	case compactDone:
		c.running--
	}
	for c.running < compactConcurrency && len(c.queue) > 0 {
		t := c.queue[0]
		c.queue = c.queue[1:]
		c.running++
		self, root := ctx.Self(), ctx.ActorSystem().Root
		c.l.compact.running.Add(1)
		labels.Go(func() {
			defer c.l.compact.running.Done()
			defer root.Send(self, compactDone{})
			c.l.runCompaction(t)
		}, "braid_actor", compactorName, "braid_topic", t.Topic())
	}
}

// compactorName names the compactor in profiles.
const compactorName = "braid-compactor"

// compactions is the node's compaction state: the compactor, what runs,
// and the outcome of each topic's last run here.
type compactions struct {
	// ctx is the compactions' context: Close cancels it, and waits for
	// the running ones (running) to end.
	ctx     context.Context
	cancel  context.CancelFunc
	running sync.WaitGroup
	// step, set by tests before a compaction starts, runs at each step of
	// a compaction ("written": the compacted logs are synced; "recorded":
	// the record is written); an error stops the compaction there, as a
	// crash would.
	step func(step string) error

	mu sync.Mutex
	// pid is the compactor (nil before Start and after Close); runs the
	// compaction of each topic, running or the last one, by URI.
	pid  *actor.PID
	runs map[string]*compactionRun
}

// compactionStep runs the test's step hook, if any.
func (c *compactions) compactionStep(step string) error {
	if c.step != nil {
		return c.step(step)
	}
	return nil
}

// startCompactor spawns the node's compactor.
func (l *Lifecycle) startCompactor() {
	props := actor.PropsFromProducer(func() actor.Actor { return &compactorActor{l: l} },
		actor.WithDispatcher(labels.Dispatcher("braid_actor", compactorName)))
	pid := l.system.Root.Spawn(props)
	l.compact.mu.Lock()
	l.compact.pid = pid
	l.compact.mu.Unlock()
}

// stopCompactor stops the compactor, has the compactions under way stop
// (what they wrote is removed by the next) and waits for them.
func (l *Lifecycle) stopCompactor() {
	l.compact.mu.Lock()
	pid := l.compact.pid
	l.compact.pid = nil
	l.compact.mu.Unlock()
	if pid != nil {
		_ = l.system.Root.StopFuture(pid).Wait()
	}
	l.compact.cancel()
	l.compact.running.Wait()
}

// compactionRun is one topic's compaction as it goes.
type compactionRun struct {
	Running   bool
	Started   time.Time
	Phase     string
	UnitsDone int
	Units     int
	Err       string
}

// Compact starts a compaction of topic uri (topic.compact); a topic whose
// compaction runs is not queued again.
func (l *Lifecycle) Compact(ctx context.Context, uri string) (api.CompactionStatus, error) {
	t, err := l.topics.Topic(uri)
	if err != nil {
		return api.CompactionStatus{}, err
	}
	c := &l.compact
	c.mu.Lock()
	if c.pid == nil {
		c.mu.Unlock()
		return api.CompactionStatus{}, api.Errorf(api.CodeUnavailable, "the compactor is not running (the node is starting or stopping)")
	}
	if c.runs == nil {
		// Under mu: CompactionStatus reads runs from any goroutine.
		c.runs = map[string]*compactionRun{}
	}
	if r := c.runs[uri]; r == nil || !r.Running {
		c.runs[uri] = &compactionRun{Running: true, Started: time.Now(), Phase: "queued"}
		l.system.Root.Send(c.pid, compactStart{t: t})
	}
	c.mu.Unlock()
	return l.CompactionStatus(ctx, uri)
}

// CompactionStatus reports a topic's compaction (topic.compaction): the one
// running here, and the last one recorded.
func (l *Lifecycle) CompactionStatus(ctx context.Context, uri string) (api.CompactionStatus, error) {
	t, err := l.topics.Topic(uri)
	if err != nil {
		return api.CompactionStatus{}, err
	}
	st := api.CompactionStatus{Topic: uri}
	l.compact.mu.Lock()
	if r := l.compact.runs[uri]; r != nil {
		st.Running, st.Phase, st.UnitsDone, st.Units, st.Error = r.Running, r.Phase, r.UnitsDone, r.Units, r.Err
		if r.Running {
			st.Started = r.Started.UTC().Format(time.RFC3339Nano)
		}
	}
	l.compact.mu.Unlock()
	rec, _, err := l.meta.Compaction(ctx, t.Name())
	switch {
	case errors.Is(err, meta.ErrNotFound):
	case err != nil:
		return st, meta.APIError(err, "the compaction record of "+uri)
	case rec.Incarnation == t.Incarnation():
		st.Generation, st.Keys, st.Kept, st.Read = rec.Generation, rec.Keys, rec.Kept, rec.Read
		st.BytesBefore, st.BytesAfter, st.DurationMs, st.Passes = rec.BytesBefore, rec.BytesAfter, rec.DurationMs, rec.Passes
		if !rec.Finished.IsZero() {
			st.Finished = rec.Finished.UTC().Format(time.RFC3339Nano)
		}
		for _, u := range rec.Units {
			st.Horizons = append(st.Horizons, api.CompactionUnit{Segment: u.Segment, Bucket: u.Bucket, Horizon: u.Horizon, Kept: u.Kept})
		}
	}
	return st, nil
}

func (l *Lifecycle) setRun(uri string, f func(r *compactionRun)) {
	l.compact.mu.Lock()
	defer l.compact.mu.Unlock()
	if r := l.compact.runs[uri]; r != nil {
		f(r)
	}
}

// runCompaction compacts t and records the outcome.
func (l *Lifecycle) runCompaction(t *actors.Topic) {
	ctx, cancel := context.WithTimeout(l.compact.ctx, time.Hour)
	defer cancel()
	err := l.compactTopic(ctx, t)
	switch {
	case err != nil && l.compact.ctx.Err() != nil:
		l.log.Info("compaction stopped: the node is stopping (the next one starts over)", "topic", t.Topic())
	case err != nil:
		l.m.compactionErrors.Inc()
		l.log.Error("compaction failed", "topic", t.Topic(), "err", err)
	}
	l.setRun(t.Topic(), func(r *compactionRun) {
		r.Running, r.Phase = false, "done"
		if err != nil {
			r.Phase, r.Err = "failed", err.Error()
		}
	})
}

// compactUnit is one unit of a compaction.
type compactUnit struct {
	seg    topology.Segment
	bucket int
	dir    string        // the unit's directory here, where its compacted logs go
	log    *wal.Log      // nil for a unit another node owns
	owner  string        // that node
	t      *actors.Topic // read through: ReadUnit
	// bytes is the size of the unit's log; for a unit another node owns,
	// the key and payload bytes the writing pass read of it.
	bytes      int64
	first      uint64 // the unit's first offset: what is below went by retention
	oldHorizon uint64
	horizon    uint64
	prev       *compaction.LogReader
}

// compactTopic runs one compaction of t (steps 1 to 5).
func (l *Lifecycle) compactTopic(ctx context.Context, t *actors.Topic) error {
	begin := time.Now()
	uri := t.Topic()
	rec, rev, err := l.meta.Compaction(ctx, t.Name())
	if err != nil && !errors.Is(err, meta.ErrNotFound) {
		return meta.APIError(err, "the compaction record of "+uri)
	}
	if rec.Incarnation != t.Incarnation() {
		rec = meta.CompactionRecord{} // of an earlier topic of the name
	}
	old := map[[2]uint64]uint64{}
	for _, u := range rec.Units {
		old[[2]uint64{u.Segment, uint64(u.Bucket)}] = u.Horizon
	}
	gen := rec.Generation + 1
	p := t.Policy()
	var units []*compactUnit
	defer func() {
		for _, u := range units {
			if u.prev != nil {
				u.prev.Close()
			}
		}
	}()
	layout := t.Layout()
	for _, s := range layout.Segments {
		if s.State == topology.StateDeleted {
			continue
		}
		owner, remote := t.RemoteOwner(s)
		for b := 0; b < s.Buckets; b++ {
			u := &compactUnit{seg: s, bucket: b, t: t, oldHorizon: old[[2]uint64{uint64(s.ID), uint64(b)}],
				dir: l.store.UnitDir(logstore.UnitKey{Topic: t.Name(), Segment: s.ID, Bucket: b})}
			if remote {
				u.owner = owner
				if u.first, u.horizon, err = t.Bounds(s.ID, b); err != nil {
					return fmt.Errorf("the bounds of segment %d bucket %d on node %s: %w", s.ID, b, owner, err)
				}
			} else {
				if u.log, err = t.OpenLog(s, b); err != nil {
					return err
				}
				u.first, u.horizon, u.bytes = l.store.FirstOffset(u.log), u.log.NextOffset(), u.log.SizeBytes()
			}
			if err := removeGenerations(u.dir, rec.Generation); err != nil {
				return err
			}
			if rec.Generation > 0 && u.oldHorizon > 0 {
				u.prev, err = compaction.OpenLog(compaction.GenerationDir(u.dir, rec.Generation))
				switch {
				case errors.Is(err, os.ErrNotExist):
					// Not here (the topic's home moved): what it kept is
					// read again from the log.
					l.log.Warn("compaction: the previous compacted log of a unit is not on this node; reading its log again",
						"topic", uri, "segment", s.ID, "bucket", b, "generation", rec.Generation)
					u.oldHorizon = 0
				case err != nil:
					return fmt.Errorf("opening the compacted log of segment %d bucket %d: %w", s.ID, b, err)
				}
			}
			units = append(units, u)
		}
	}
	l.setRun(uri, func(r *compactionRun) { r.Phase, r.Units = "deciding", len(units) })
	cu := make([]compaction.Unit, len(units))
	for i, u := range units {
		cu[i] = compaction.Unit{Segment: uint64(u.seg.ID), Bucket: u.bucket, Rank: u.seg.CreatedEpoch}
	}
	scan := func(i int, fn func(uint64, wal.Record) error) error { return l.scanUnit(ctx, units[i], fn) }
	d, err := compaction.Decide(cu, scan, compaction.Rules{RetainNullKey: p.CompactionRetainNullKey, DeleteRetention: p.DeleteRetention,
		Lag: p.CompactionLag, Now: time.Now()}, compactBudget, os.TempDir())
	if err != nil {
		return err
	}
	defer d.Close()
	l.setRun(uri, func(r *compactionRun) { r.Phase = "writing" })
	next := meta.CompactionRecord{Topic: uri, Incarnation: t.Incarnation(), Generation: gen, Keys: d.Keys, Passes: d.Passes}
	for i, u := range units {
		dir := compaction.GenerationDir(u.dir, gen)
		w, err := compaction.CreateLog(dir)
		if err != nil {
			return err
		}
		var kept uint64
		err = l.scanUnit(ctx, u, func(off uint64, r wal.Record) error {
			next.Read++
			if u.log == nil {
				u.bytes += int64(len(r.Key) + len(r.Payload))
			}
			keep, err := d.Keep(i, off, r)
			if err != nil || !keep {
				return err
			}
			kept++
			return w.Append(off, r)
		})
		if err == nil {
			err = w.Finish()
		} else {
			w.Abort()
		}
		if err != nil {
			return fmt.Errorf("writing the compacted log of segment %d bucket %d: %w", u.seg.ID, u.bucket, err)
		}
		next.Units = append(next.Units, meta.CompactionUnit{Segment: uint64(u.seg.ID), Bucket: u.bucket, Horizon: u.horizon, Kept: kept})
		next.Kept += kept
		next.BytesAfter += dirBytes(dir)
		next.BytesBefore += u.bytes
		l.setRun(uri, func(r *compactionRun) { r.UnitsDone = i + 1 })
	}
	next.Finished = time.Now().UTC()
	next.DurationMs = time.Since(begin).Milliseconds()
	if err := l.compact.compactionStep("written"); err != nil {
		return err
	}
	if _, err := l.meta.PutCompaction(ctx, t.Name(), next, rev); err != nil {
		return fmt.Errorf("recording the compaction of %s: %w", uri, meta.APIError(err, "the compaction record"))
	}
	t.CompactionRecorded(next)
	if err := l.compact.compactionStep("recorded"); err != nil {
		return err
	}
	l.m.compactions.Inc()
	for _, u := range units {
		if err := removeGenerations(u.dir, gen); err != nil {
			l.log.Warn("compaction: removing an older generation's compacted log failed (the next compaction does)", "dir", u.dir, "err", err)
		}
	}
	l.removeDeletedCompacted(t, layout)
	l.log.Info("compaction done", "topic", uri, "generation", gen, "keys", next.Keys, "kept", next.Kept, "passes", next.Passes,
		"bytes_before", next.BytesBefore, "bytes_after", next.BytesAfter, "took", time.Since(begin).Round(time.Millisecond))
	return nil
}

// scanUnit calls fn for every record of u below its new horizon, in offset
// order: from its previous compacted log below the old horizon, then from
// its log (and the remote tier), never below its first offset. It stops
// when ctx is done (the node stopping).
func (l *Lifecycle) scanUnit(ctx context.Context, u *compactUnit, fn func(uint64, wal.Record) error) error {
	from := u.first
	if u.prev != nil {
		for {
			kept, _, err := u.prev.ReadFrom(from, 4096, 4<<20)
			if err != nil {
				return err
			}
			n := 0
			for _, k := range kept {
				if k.Offset >= u.oldHorizon {
					break
				}
				if err := fn(k.Offset, k.Record); err != nil {
					return err
				}
				n++
			}
			if n == 0 || n < len(kept) {
				break
			}
			from = kept[n-1].Offset + 1
		}
	}
	for off := max(u.oldHorizon, u.first); off < u.horizon; {
		if err := ctx.Err(); err != nil {
			return err
		}
		recs, err := u.t.ReadUnit(u.seg, u.bucket, off, 4096, 4<<20)
		var hole *wal.HoleError
		switch {
		case errors.As(err, &hole):
			off = hole.To // lost to damage: nothing to keep
			continue
		case err != nil:
			return err
		case len(recs) == 0:
			return fmt.Errorf("no record at offset %d below the horizon %d", off, u.horizon)
		}
		for _, r := range recs {
			if off >= u.horizon {
				break
			}
			if err := fn(off, r); err != nil {
				return err
			}
			off++
		}
	}
	return nil
}

// removeDeletedCompacted removes the compacted logs this node keeps of
// deleted segments (those of segments other nodes held: a segment's own
// directory goes with its logs), and their directories once empty.
func (l *Lifecycle) removeDeletedCompacted(t *actors.Topic, layout topology.Layout) {
	for _, s := range layout.Segments {
		if s.State != topology.StateDeleted {
			continue
		}
		for b := 0; b < s.Buckets; b++ {
			dir := l.store.UnitDir(logstore.UnitKey{Topic: t.Name(), Segment: s.ID, Bucket: b})
			if err := removeGenerations(dir, 0); err != nil {
				l.log.Warn("compaction: removing the compacted logs of a deleted segment failed", "dir", dir, "err", err)
				continue
			}
			os.Remove(dir)               // only when empty: the segment's log may be there
			os.Remove(filepath.Dir(dir)) // the same
		}
	}
}

// removeGenerations removes the compacted logs in a unit's directory but
// that of generation keep.
func removeGenerations(unitDir string, keep uint64) error {
	entries, err := os.ReadDir(unitDir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
	for _, e := range entries {
		g, ok := compaction.GenerationOf(e.Name())
		if !ok || !e.IsDir() || g == keep {
			continue
		}
		if err := os.RemoveAll(filepath.Join(unitDir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

func dirBytes(dir string) int64 {
	var n int64
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if info, err := e.Info(); err == nil && info.Mode().IsRegular() {
			n += info.Size()
		}
	}
	return n
}
