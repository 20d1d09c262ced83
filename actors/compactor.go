package actors

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/compaction"
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

// compactStep, set by tests only, runs at each step of a compaction
// ("written": the compacted logs are synced; "recorded": the record is
// written); an error stops the compaction there, as a crash would.
var compactStep func(step string) error

func compactionStep(step string) error {
	if compactStep != nil {
		return compactStep(step)
	}
	return nil
}

// compactConcurrency bounds the compactions a node runs at once.
const compactConcurrency = 2

// compactBudget bounds the key map of one compaction (32 bytes a key: 2
// million keys a pass).
const compactBudget = 64 << 20

// compactStart asks the compactor to compact a topic.
type compactStart struct{ t *Topic }

// compactDone tells the compactor one compaction ended.
type compactDone struct{}

type compactorActor struct {
	m       *Manager
	running int
	queue   []*Topic
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
		go func() {
			defer root.Send(self, compactDone{})
			c.m.runCompaction(t)
		}()
	}
}

// compactions is the node's compaction state: the compactor, what runs,
// and the outcome of each topic's last run here.
type compactions struct {
	once sync.Once
	pid  *actor.PID
	mu   sync.Mutex
	runs map[string]*compactionRun
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
func (m *Manager) Compact(ctx context.Context, uri string) (api.CompactionStatus, error) {
	t, err := m.Topic(uri)
	if err != nil {
		return api.CompactionStatus{}, err
	}
	if m.system == nil {
		return api.CompactionStatus{}, api.Errorf(api.CodeUnavailable, "no actor system")
	}
	c := &m.compact
	c.once.Do(func() {
		c.pid = m.system.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return &compactorActor{m: m} }))
	})
	c.mu.Lock()
	if c.runs == nil {
		// Under mu: CompactionStatus reads runs from any goroutine.
		c.runs = map[string]*compactionRun{}
	}
	if r := c.runs[uri]; r == nil || !r.Running {
		c.runs[uri] = &compactionRun{Running: true, Started: time.Now(), Phase: "queued"}
		m.system.Root.Send(c.pid, compactStart{t: t})
	}
	c.mu.Unlock()
	return m.CompactionStatus(ctx, uri)
}

// CompactionStatus reports a topic's compaction (topic.compaction): the one
// running here, and the last one recorded.
func (m *Manager) CompactionStatus(ctx context.Context, uri string) (api.CompactionStatus, error) {
	t, err := m.Topic(uri)
	if err != nil {
		return api.CompactionStatus{}, err
	}
	st := api.CompactionStatus{Topic: uri}
	m.compact.mu.Lock()
	if r := m.compact.runs[uri]; r != nil {
		st.Running, st.Phase, st.UnitsDone, st.Units, st.Error = r.Running, r.Phase, r.UnitsDone, r.Units, r.Err
		if r.Running {
			st.Started = r.Started.UTC().Format(time.RFC3339Nano)
		}
	}
	m.compact.mu.Unlock()
	rec, _, err := m.meta.Compaction(ctx, t.Name())
	switch {
	case errors.Is(err, meta.ErrNotFound):
	case err != nil:
		return st, metaError(err)
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

func (m *Manager) setRun(uri string, f func(r *compactionRun)) {
	m.compact.mu.Lock()
	defer m.compact.mu.Unlock()
	if r := m.compact.runs[uri]; r != nil {
		f(r)
	}
}

// runCompaction compacts t and records the outcome.
func (m *Manager) runCompaction(t *Topic) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	err := m.compactTopic(ctx, t)
	if err != nil {
		m.m.compactionErrors.Inc()
		m.log.Error("compaction failed", "topic", t.Topic(), "err", err)
	}
	m.setRun(t.Topic(), func(r *compactionRun) {
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
	dir    string   // the unit's directory here, where its compacted logs go
	log    *wal.Log // nil for a unit another node owns
	owner  string   // that node
	t      *Topic   // read through: ReadUnit
	// bytes is the size of the unit's log; for a unit another node owns,
	// the key and payload bytes the writing pass read of it.
	bytes      int64
	first      uint64 // the unit's first offset: what is below went by retention
	oldHorizon uint64
	horizon    uint64
	prev       *compaction.LogReader
}

// compactTopic runs one compaction of t (steps 1 to 5).
func (m *Manager) compactTopic(ctx context.Context, t *Topic) error {
	begin := time.Now()
	uri := t.Topic()
	rec, rev, err := m.meta.Compaction(ctx, t.Name())
	if err != nil && !errors.Is(err, meta.ErrNotFound) {
		return metaError(err)
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
				dir: m.Store().UnitDir(UnitKey{Topic: t.Name(), Segment: s.ID, Bucket: b})}
			if remote {
				u.owner = owner
				if u.first, u.horizon, err = t.Bounds(s.ID, b); err != nil {
					return fmt.Errorf("the bounds of segment %d bucket %d on node %s: %w", s.ID, b, owner, err)
				}
			} else {
				if u.log, err = t.OpenLog(s, b); err != nil {
					return err
				}
				u.first, u.horizon, u.bytes = m.Store().FirstOffset(u.log), u.log.NextOffset(), u.log.SizeBytes()
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
					m.log.Warn("compaction: the previous compacted log of a unit is not on this node; reading its log again",
						"topic", uri, "segment", s.ID, "bucket", b, "generation", rec.Generation)
					u.oldHorizon = 0
				case err != nil:
					return fmt.Errorf("opening the compacted log of segment %d bucket %d: %w", s.ID, b, err)
				}
			}
			units = append(units, u)
		}
	}
	m.setRun(uri, func(r *compactionRun) { r.Phase, r.Units = "deciding", len(units) })
	cu := make([]compaction.Unit, len(units))
	for i, u := range units {
		cu[i] = compaction.Unit{Segment: uint64(u.seg.ID), Bucket: u.bucket, Rank: u.seg.CreatedEpoch}
	}
	scan := func(i int, fn func(uint64, wal.Record) error) error { return m.scanUnit(units[i], fn) }
	d, err := compaction.Decide(cu, scan, compaction.Rules{RetainNullKey: p.CompactionRetainNullKey, DeleteRetention: p.DeleteRetention,
		Lag: p.CompactionLag, Now: time.Now()}, compactBudget, os.TempDir())
	if err != nil {
		return err
	}
	defer d.Close()
	m.setRun(uri, func(r *compactionRun) { r.Phase = "writing" })
	next := meta.CompactionRecord{Topic: uri, Incarnation: t.Incarnation(), Generation: gen, Keys: d.Keys, Passes: d.Passes}
	for i, u := range units {
		dir := compaction.GenerationDir(u.dir, gen)
		w, err := compaction.CreateLog(dir)
		if err != nil {
			return err
		}
		var kept uint64
		err = m.scanUnit(u, func(off uint64, r wal.Record) error {
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
		m.setRun(uri, func(r *compactionRun) { r.UnitsDone = i + 1 })
	}
	next.Finished = time.Now().UTC()
	next.DurationMs = time.Since(begin).Milliseconds()
	if err := compactionStep("written"); err != nil {
		return err
	}
	if _, err := m.meta.PutCompaction(ctx, t.Name(), next, rev); err != nil {
		return fmt.Errorf("recording the compaction of %s: %w", uri, metaError(err))
	}
	t.CompactionRecorded(next)
	if err := compactionStep("recorded"); err != nil {
		return err
	}
	m.m.compactions.Inc()
	for _, u := range units {
		if err := removeGenerations(u.dir, gen); err != nil {
			m.log.Warn("compaction: removing an older generation's compacted log failed (the next compaction does)", "dir", u.dir, "err", err)
		}
	}
	m.removeDeletedCompacted(t, layout)
	m.log.Info("compaction done", "topic", uri, "generation", gen, "keys", next.Keys, "kept", next.Kept, "passes", next.Passes,
		"bytes_before", next.BytesBefore, "bytes_after", next.BytesAfter, "took", time.Since(begin).Round(time.Millisecond))
	return nil
}

// scanUnit calls fn for every record of u below its new horizon, in offset
// order: from its previous compacted log below the old horizon, then from
// its log (and the remote tier), never below its first offset.
func (m *Manager) scanUnit(u *compactUnit, fn func(uint64, wal.Record) error) error {
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
func (m *Manager) removeDeletedCompacted(t *Topic, l topology.Layout) {
	for _, s := range l.Segments {
		if s.State != topology.StateDeleted {
			continue
		}
		for b := 0; b < s.Buckets; b++ {
			dir := m.Store().UnitDir(UnitKey{Topic: t.Name(), Segment: s.ID, Bucket: b})
			if err := removeGenerations(dir, 0); err != nil {
				m.log.Warn("compaction: removing the compacted logs of a deleted segment failed", "dir", dir, "err", err)
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
