package lifecycle

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/braidmq/braid/actors"
	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/clock"
	"github.com/braidmq/braid/internal/labels"
	"github.com/braidmq/braid/logstore"
	"github.com/braidmq/braid/routing"
	"github.com/braidmq/braid/scaling"
	"github.com/braidmq/braid/topology"
	"github.com/braidmq/braid/wal"
	"github.com/braidmq/braid/wal/tier"
)

// The storage worker: one actor per node (not a goroutine per log) that,
// every Config.StorageTick (or a namespace's storage_tick, for its
// topics: the worker then ticks at the shortest), visits every open bucket
// log and applies its topic's storage policies:
//
//   - roll: the log's open file rolls past segment_bytes as it is written
//     (the worker sets the size on the log when the policy changes), and
//     the worker rolls it once it is older than segment_ms. The age is
//     checked at each tick, so a burst inside one tick makes one file
//     bigger than segment_bytes only by what the frame crossing it holds,
//     and a file lives up to segment_ms plus a tick;
//   - retention by time: closed files whose newest record is older than
//     retention (when positive) are removed from the head of the log;
//   - retention by bytes: while a topic's logs hold more than
//     retention_bytes, the oldest closed file among them is removed;
//   - progressive head trim: the oldest closed file of a log, when it is
//     oversized (over segment_bytes: a legacy single file adopted, or one
//     that grew before a tick rolled it), gives back its expired records
//     (or, by bytes, the excess) in place a step at a time (wal.TrimHead:
//     a record of its new start, then a hole punched in its head), rather
//     than all at once when the whole file expires. A step is at least
//     headTrimStep bytes, so that a file is not re-recorded every tick.
//
// It never removes the open file and rewrites nothing: a removal takes the
// log's write lock for the unlinks only. Readers and consumers see the
// log's first offset move on, as after any retention (OFFSET_GONE for a
// read below it; subscriptions skip what is gone). Logs that are not open
// (the topic idle) are visited when they are opened again; the logs a node
// holds of another node's topic by that topic's policies (storageView).

// storageTick asks the worker to visit the logs. gen is the schedule it
// was armed by: a tick of an older schedule (one a re-arm replaced) is
// dropped, so that passes never overlap or come twice as often.
type storageTick struct{ gen uint64 }

// storageRearm tells the worker a topic's storage_tick is tick (a policy
// change, or a topic loaded with it): when the pass armed comes later than
// tick from now, the worker arms one at tick instead. Without it a
// namespace's short tick took effect only at the broker's next pass (a
// minute by default), while the topic's logs grew past its retention.
type storageRearm struct{ tick time.Duration }

type storageWorker struct {
	l    *Lifecycle
	tick time.Duration
	// segmentBytes remembers the size set on each log (SetSegmentBytes).
	segmentBytes map[*wal.Log]int64
	// next is the delay to the next pass: the tick, or the shortest
	// storage_tick of the namespaces whose topics it visited.
	next time.Duration
	// held counts what the worker does to the logs it holds of other
	// nodes' topics (their stats are their home's).
	held map[routing.TopicName]*actors.StorageCounts
	// series holds the topics whose per-topic series (disk and tier
	// bytes) the worker set: they go once it finds none of their logs
	// open (the topic passivated, deleted or moved).
	series map[routing.TopicName]bool
	// swept is when the tier was last swept (sweepTier), sealedVisited
	// when the sealed segments' logs were last opened (run).
	swept, sealedVisited time.Time
	// gen is the schedule armed last and due when its pass comes
	// (schedule); a storageTick of another gen is stale.
	gen   uint64
	due   time.Time
	timer clock.Timer
}

// storageView is what the worker knows of a topic whose logs it visits:
// its resolved policy, its layout, and where it counts what it does.
type storageView struct {
	policy scaling.Policy
	layout topology.Layout
	counts *actors.StorageCounts
}

// sealed returns the sealed segments of the view's layout.
func (v storageView) sealed() map[topology.SegmentID]bool {
	out := map[topology.SegmentID]bool{}
	for _, s := range v.layout.Segments {
		if s.State == topology.StateSealed {
			out[s.ID] = true
		}
	}
	return out
}

// storageView returns the view of topic name: from the topic when it is
// active here; else, for the segments this node holds of another node's
// topic, from the topic's record (actors.Manager.HeldRecord) and
// its namespace's policies, so that the home's policies apply to them
// (the broker default's could remove what a topic keeps for longer). A
// topic whose record cannot be read, or is of another incarnation than
// the logs, is not visited this pass.
func (w *storageWorker) storageView(name routing.TopicName, namespaces map[routing.NamespaceName]*api.Policies) (storageView, bool) {
	l := w.l
	if t, ok := l.topics.Active(name.String()); ok {
		return storageView{policy: t.Policy(), layout: t.Layout(), counts: t.StorageCounts()}, true
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rec, err := l.topics.HeldRecord(ctx, name)
	if err != nil || rec.Incarnation != l.store.Incarnation(name) {
		return storageView{}, false
	}
	nsName := name.NamespaceName()
	ns, ok := namespaces[nsName]
	if !ok {
		nsRec, err := l.meta.Namespace(ctx, nsName)
		if err != nil {
			return storageView{}, false
		}
		ns, namespaces[nsName] = nsRec.Policies, nsRec.Policies
	}
	p, err := l.topics.ResolvePolicies(rec.Policies, ns)
	if err != nil {
		l.m.storageErrors.Inc()
		l.log.Error("storage worker: the policies of a topic whose segments this node holds do not resolve; its logs are left as they are",
			"topic", name.String(), "err", err)
		return storageView{}, false
	}
	if w.held == nil {
		w.held = map[routing.TopicName]*actors.StorageCounts{}
	}
	c := w.held[name]
	if c == nil {
		c = &actors.StorageCounts{}
		w.held[name] = c
	}
	return storageView{policy: p, layout: rec.Layout, counts: c}, true
}

// addSealed adds to byTopic the logs of the sealed segments this node
// holds of the topics active here whose policies act on them (retention
// or offload), opening those that are not open (the idle sweeper closes
// them again).
func (w *storageWorker) addSealed(byTopic map[routing.TopicName][]storageLog, open map[logstore.UnitKey]*wal.Log) {
	for _, t := range w.l.topics.All() {
		if p := t.Policy(); p.Retention <= 0 && !p.Offload {
			continue
		}
		for _, s := range t.Layout().Segments {
			if s.State != topology.StateSealed {
				continue
			}
			if _, remote := t.RemoteOwner(s); remote {
				continue
			}
			for b := 0; b < s.Buckets; b++ {
				key := logstore.UnitKey{Topic: t.Name(), Segment: s.ID, Bucket: b}
				if open[key] != nil {
					continue
				}
				l, err := t.OpenLog(s, b)
				if err != nil {
					w.l.m.storageErrors.Inc()
					w.l.log.Error("storage worker: opening a sealed segment's log failed", "unit", key.String(), "err", err)
					continue
				}
				byTopic[key.Topic] = append(byTopic[key.Topic], storageLog{key: key, log: l})
			}
		}
	}
}

// startStorageWorker spawns the node's storage worker (not without a tick).
func (l *Lifecycle) startStorageWorker() error {
	if l.cfg.StorageTick <= 0 {
		return nil
	}
	props := actor.PropsFromProducer(func() actor.Actor {
		return &storageWorker{l: l, tick: l.cfg.StorageTick, segmentBytes: map[*wal.Log]int64{}}
	}, actor.WithDispatcher(labels.Dispatcher("braid_actor", storageWorkerName)))
	pid, err := l.system.Root.SpawnNamed(props, storageWorkerName)
	if err != nil {
		return err
	}
	l.storagePID.Store(pid)
	return nil
}

// storageWorkerName is the storage worker's actor name.
const storageWorkerName = "braid-storage"

func (w *storageWorker) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		// The first pass comes within a second, whatever the tick: it
		// learns the namespaces' ticks (next).
		w.next = min(w.tick, time.Second)
		w.schedule(ctx, w.next)
	case storageTick:
		if msg.gen != w.gen {
			return // a re-arm replaced this schedule
		}
		w.run(w.l.clock.Now())
		d := w.tick
		if w.next > 0 {
			d = w.next
		}
		w.schedule(ctx, d)
	case storageRearm:
		if msg.tick > 0 && w.l.clock.Now().Add(msg.tick).Before(w.due) {
			w.schedule(ctx, msg.tick)
		}
	case *actor.Stopping:
		if w.timer != nil {
			w.timer.Stop()
		}
	}
}

// schedule arms the next pass d from now, replacing the one armed before:
// the next pass comes d after this one ends, so passes never overlap.
func (w *storageWorker) schedule(ctx actor.Context, d time.Duration) {
	self, root := ctx.Self(), ctx.ActorSystem().Root
	if w.timer != nil {
		w.timer.Stop()
	}
	w.gen++
	w.due = w.l.clock.Now().Add(d)
	tick := storageTick{gen: w.gen}
	w.timer = w.l.clock.AfterFunc(d, func() { root.Send(self, tick) })
}

// Rearm tells the storage worker, if there is one, that a topic's
// storage_tick is tick (see storageRearm): the topics call it as they
// apply their policies (actors.Config.OnStorageTick).
func (l *Lifecycle) Rearm(tick time.Duration) {
	if tick <= 0 {
		return
	}
	if pid := l.storagePID.Load(); pid != nil {
		l.system.Root.Send(pid, storageRearm{tick: tick})
	}
}

// storageLog is an open log of a topic, as the worker visits it, and
// where it counts what it does to the topic.
type storageLog struct {
	key    logstore.UnitKey
	log    *wal.Log
	counts *actors.StorageCounts
}

// sealedVisitEvery is how often the worker opens the logs of sealed
// segments that are not open, to apply retention and offload to them: a
// minute, or 50 ticks when that is sooner.
func (w *storageWorker) sealedVisitEvery() time.Duration { return min(time.Minute, 50*w.tick) }

// run visits every open log once, and, every sealedVisitEvery, the logs
// of the sealed segments of the topics active here.
func (w *storageWorker) run(now time.Time) {
	begin := time.Now()
	byTopic := map[routing.TopicName][]storageLog{}
	open := w.l.store.Logs()
	for key, l := range open {
		byTopic[key.Topic] = append(byTopic[key.Topic], storageLog{key: key, log: l})
	}
	if now.Sub(w.sealedVisited) >= w.sealedVisitEvery() {
		w.sealedVisited = now
		w.addSealed(byTopic, open)
	}
	seen := map[*wal.Log]bool{}
	next := w.tick
	namespaces := map[routing.NamespaceName]*api.Policies{}
	for name, logs := range byTopic {
		v, ok := w.storageView(name, namespaces)
		if !ok {
			continue
		}
		p := v.policy
		if p.StorageTick > 0 {
			next = min(next, p.StorageTick)
			if last := v.counts.LastPass.Load(); last != 0 && now.Sub(time.Unix(0, last)) < p.StorageTick {
				continue // its namespace's tick has not come
			}
		}
		sealed := v.sealed()
		for i := range logs {
			logs[i].counts = v.counts
			seen[logs[i].log] = true
			w.visit(logs[i], p, now, sealed[logs[i].key.Segment])
		}
		v.counts.LastPass.Store(now.UnixNano())
		held := w.trimBytes(name, logs, p)
		if p.CompactionThresholdBytes > 0 {
			w.maybeCompact(name, held, p.CompactionThresholdBytes)
		}
	}
	for name := range w.held {
		if _, ok := byTopic[name]; !ok {
			delete(w.held, name) // no log of it open any more
		}
	}
	for name := range w.series {
		if _, ok := byTopic[name]; !ok {
			w.l.m.forgetTopic(name)
			delete(w.series, name)
		}
	}
	for l := range w.segmentBytes {
		if !seen[l] {
			delete(w.segmentBytes, l) // closed since
		}
	}
	w.next = next
	w.sweepTier(now)
	w.l.m.storageTickSeconds.Observe(time.Since(begin).Seconds())
}

// visit rolls one log by age (a sealed segment's at once: it takes no
// more appends, and its last file then expires by its records' time like
// any other), offloads it and drops its local copies (offload), and trims
// it by time.
func (w *storageWorker) visit(sl storageLog, p scaling.Policy, now time.Time, sealed bool) {
	lg, l := sl.log, w.l
	if set, ok := w.segmentBytes[lg]; !ok || set != p.SegmentBytes {
		lg.SetSegmentBytes(p.RollBytes())
		w.segmentBytes[lg] = p.SegmentBytes
	}
	if sealed && (p.Retention > 0 || p.Offload) || p.SegmentMs > 0 && now.Sub(lg.TailStarted()) >= time.Duration(p.SegmentMs)*time.Millisecond {
		rolled, err := lg.Roll()
		switch {
		case err != nil:
			l.m.storageErrors.Inc()
			sl.counts.Errors.Add(1)
			l.log.Error("storage worker: rolling a log by age failed", "unit", sl.key.String(), "err", err)
		case rolled:
			l.m.storageRolled.Inc()
			sl.counts.Rolled.Add(1)
		}
	}
	tiered := l.store.Tier() != nil && (p.Offload || l.store.Tier().Bytes(lg.Dir()) > 0)
	if p.Retention <= 0 && !tiered {
		// Forever; or 0, which removes sealed segments once drained
		// (the scaler's rule) and leaves live logs to retention_bytes.
		return
	}
	files, err := lg.ClosedFiles()
	if err != nil {
		l.m.storageErrors.Inc()
		sl.counts.Errors.Add(1)
		l.log.Error("storage worker: listing a log's files failed", "unit", sl.key.String(), "err", err)
		return
	}
	if tiered && p.Offload {
		files = w.offload(sl, p, now, files)
	}
	if p.Retention <= 0 {
		return
	}
	cutoff := now.Add(-p.Retention).UnixMilli()
	if tiered {
		w.expireTier(sl, func(e tier.Entry) bool { return e.Newest < cutoff }, "retention")
	}
	k := 0
	for k < len(files) && olderThan(lg, &files[k], cutoff) {
		k++
	}
	if k > 0 && !w.drop(sl, files[:k], "retention") {
		return
	}
	if k < len(files) && oversized(files[k], p) {
		before, err := lg.ExpiredBefore(cutoff)
		if err != nil {
			l.m.storageErrors.Inc()
			sl.counts.Errors.Add(1)
			l.log.Error("storage worker: finding a log's expired records failed", "unit", sl.key.String(), "err", err)
			return
		}
		if before > files[k].First {
			w.trimHead(sl, before, headTrimStep(p), "retention")
		}
	}
}

// oversized says whether a closed file is trimmed a part at a time.
func oversized(f wal.FileInfo, p scaling.Policy) bool {
	if p.SegmentBytes > 0 {
		return f.Bytes > p.SegmentBytes
	}
	return f.Bytes > maxHeadTrimStep
}

// maxHeadTrimStep bounds headTrimStep.
const maxHeadTrimStep = 16 << 20

// headTrimStep is the least a progressive head trim gives back: an eighth
// of segment_bytes, at least a file system block, at most 16 MiB.
func headTrimStep(p scaling.Policy) int64 {
	if p.SegmentBytes <= 0 {
		return maxHeadTrimStep
	}
	return min(max(p.SegmentBytes/8, 4096), maxHeadTrimStep)
}

// trimHead trims the head of a log's oldest closed file to before (see
// wal.TrimHead), when that gives back at least minBytes; it returns the
// bytes given back.
func (w *storageWorker) trimHead(sl storageLog, before uint64, minBytes int64, why string) int64 {
	l := w.l
	freed, err := sl.log.TrimHead(before, minBytes)
	if err != nil {
		l.m.storageErrors.Inc()
		sl.counts.Errors.Add(1)
		l.log.Error("storage worker: trimming the head of a log's oldest file failed", "unit", sl.key.String(), "before", before, "why", why, "err", err)
		return 0
	}
	if freed > 0 {
		l.m.storageHeadTrims.Inc()
		l.m.storageRemovedBytes.Add(float64(freed))
		sl.counts.HeadTrims.Add(1)
		sl.counts.RemovedBytes.Add(uint64(freed))
		l.log.Debug("storage worker: head trimmed", "unit", sl.key.String(), "bytes", freed, "why", why, "first_offset", sl.log.FirstOffset())
	}
	return freed
}

// trimBytes bounds the bytes of a topic's logs: the tier and the disk
// together by retention_bytes (the tier's oldest files first, then the
// disk's), and, with offload, the disk by local_retention_bytes (only
// files the tier holds go). It records what they hold.
func (w *storageWorker) trimBytes(name routing.TopicName, logs []storageLog, p scaling.Policy) int64 {
	var local, tiered int64
	for _, sl := range logs {
		local += sl.log.SizeBytes()
		if tr := w.l.store.Tier(); tr != nil {
			tiered += tr.Bytes(sl.log.Dir())
		}
	}
	if p.RetentionBytes >= 0 && local+tiered > p.RetentionBytes && tiered > 0 {
		tiered = w.trimTierBytes(logs, local+tiered-p.RetentionBytes, tiered)
	}
	if p.RetentionBytes >= 0 && local+tiered > p.RetentionBytes {
		local = w.dropOldest(logs, p, local+tiered, p.RetentionBytes, nil, "retention_bytes") - tiered
	}
	if bound := p.LocalBytes(); p.Offload && w.l.store.Tier() != nil && bound >= 0 && local > bound {
		tr := w.l.store.Tier()
		held := func(sl storageLog, f wal.FileInfo) bool { return tr.Holds(sl.log.Dir(), f.First) }
		local = w.dropOldest(logs, p, local, bound, held, "local_retention_bytes")
	}
	w.l.m.topicDiskBytes.WithLabelValues(name.Tenant, name.Namespace, name.Name).Set(float64(local))
	if w.l.store.Tier() != nil {
		w.l.m.topicTierBytes.WithLabelValues(name.Tenant, name.Namespace, name.Name).Set(float64(tiered))
	}
	if w.series == nil {
		w.series = map[routing.TopicName]bool{}
	}
	w.series[name] = true
	return local + tiered
}

// maybeCompact starts a compaction of a topic active here whose logs hold
// threshold bytes more than when it was last compacted (its whole logs the
// first time): compaction_threshold_bytes.
func (w *storageWorker) maybeCompact(name routing.TopicName, held, threshold int64) {
	t, ok := w.l.topics.Active(name.String())
	if !ok {
		return
	}
	var before int64
	if rec := t.CompactionRecord(); rec != nil {
		before = rec.BytesBefore
	}
	if held-before < threshold {
		return
	}
	if _, err := w.l.Compact(context.Background(), t.Topic()); err != nil {
		w.l.log.Error("storage worker: starting a compaction over compaction_threshold_bytes failed", "topic", t.Topic(), "err", err)
	}
}

// dropOldest removes the oldest closed file among the topic's logs (of
// those eligible allows; nil: any) while total is above bound, and returns
// total less what went. An oversized file (see oversized) gives back just
// its head when that is enough.
func (w *storageWorker) dropOldest(logs []storageLog, p scaling.Policy, total, bound int64, eligible func(storageLog, wal.FileInfo) bool, why string) int64 {
	type head struct {
		sl    storageLog
		files []wal.FileInfo
	}
	var heads []*head
	for _, sl := range logs {
		if files, err := sl.log.ClosedFiles(); err == nil && len(files) > 0 {
			heads = append(heads, &head{sl: sl, files: files})
		}
	}
	for total > bound && len(heads) > 0 {
		// The log whose oldest closed file is the oldest of all.
		i := 0
		for j := range heads {
			if cmp.Less(heads[j].files[0].Newest, heads[i].files[0].Newest) {
				i = j
			}
		}
		h := heads[i]
		f := h.files[0]
		if eligible != nil && !eligible(h.sl, f) {
			heads = slices.Delete(heads, i, i+1) // its older files must go first
			continue
		}
		if eligible == nil && oversized(f, p) && f.Bytes > total-bound {
			// Part of the file is enough: its head goes.
			if before, err := h.sl.log.HeadOffsetPast(total - bound); err == nil && before < f.Next {
				total -= w.trimHead(h.sl, before, 0, why)
				break
			}
		}
		if !w.drop(h.sl, h.files[:1], why) {
			break
		}
		total -= f.Bytes
		h.files = h.files[1:]
		if len(h.files) == 0 {
			heads = slices.Delete(heads, i, i+1)
		}
	}
	return total
}

// drop removes the closed files gone (the first ones) of a log, for why;
// it reports whether it did. With a remote tier, the object an offload cut
// short may have left of a file the tier does not hold goes first.
func (w *storageWorker) drop(sl storageLog, gone []wal.FileInfo, why string) bool {
	l := w.l
	if tr := l.store.Tier(); tr != nil {
		ctx, cancel := context.WithTimeout(context.Background(), tierForgetTimeout)
		defer cancel()
		for _, f := range gone {
			if err := tr.Forget(ctx, sl.log.Dir(), f.First); err != nil {
				l.m.tierErrors.Inc()
				sl.counts.Errors.Add(1)
				l.log.Error("storage worker: removing what an offload left in the remote tier failed; the local file stays", "unit", sl.key.String(), "first", f.First, "err", err)
				return false
			}
		}
	}
	before := gone[len(gone)-1].Next
	var bytes int64
	for _, f := range gone {
		bytes += f.Bytes
	}
	if err := sl.log.DropFilesBefore(before); err != nil {
		l.m.storageErrors.Inc()
		sl.counts.Errors.Add(1)
		l.log.Error("storage worker: removing a log's expired files failed", "unit", sl.key.String(), "before", before, "why", why, "err", err)
		return false
	}
	l.m.storageRemovedFiles.Add(float64(len(gone)))
	l.m.storageRemovedBytes.Add(float64(bytes))
	sl.counts.Removed.Add(uint64(len(gone)))
	sl.counts.RemovedBytes.Add(uint64(bytes))
	l.log.Debug("storage worker: files removed", "unit", sl.key.String(), "files", len(gone), "bytes", bytes, "why", why, "first_offset", before)
	return true
}

// tierForgetTimeout bounds the removal of what an offload cut short left
// of the files a drop removes.
const tierForgetTimeout = 30 * time.Second

// olderThan reports whether every record of *f is older than cutoff (unix
// ms). A listed file's time may be a lower bound of its newest (its last
// record's, producers setting times in any order): one that looks old is
// read through first (once), and *f updated, so that a file is never
// removed or offloaded by the time of its last record alone.
func olderThan(l *wal.Log, f *wal.FileInfo, cutoff int64) bool {
	if f.Newest >= cutoff {
		return false
	}
	*f = l.ExactNewest(*f)
	return f.Newest < cutoff
}
