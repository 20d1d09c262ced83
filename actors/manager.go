package actors

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/braidmq/braid/logstore"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/meta"
	"github.com/braidmq/braid/routing"
	"github.com/braidmq/braid/scaling"
	"github.com/braidmq/braid/topology"
	"github.com/braidmq/braid/wal"
)

// Manager runs the topics of this node. It is safe for concurrent use.
type Manager struct {
	cfg    Config
	system *actor.ActorSystem
	meta   *meta.Store
	store  *logstore.Store
	log    *slog.Logger
	m      *metrics

	mu sync.RWMutex
	// topics holds every loaded topic by URI; quarantined the topics set
	// aside (see quarantine), with why.
	topics      map[string]*Topic
	quarantined map[string]string
	closed      bool
	// activating and passivating hold, by URI, the topics being started
	// or stopped, with a channel closed when that is done.
	activating  map[string]chan struct{}
	passivating map[string]chan struct{}
	stopSweeper chan struct{}
	// served holds the records of topics not active here whose sealed
	// segments this node serves to others (remote.go).
	servedMu sync.Mutex
	served   map[string]*servedTopic
	// moving holds the topics being moved away (MoveOut), with the epoch
	// the move commits; guarded by mu.
	moving map[string]uint64
	// hosted holds the bucket logs this node writes for other nodes'
	// topics (hosted.go).
	hostedMu sync.Mutex
	hosted   map[UnitKey]*hostedUnit
	// groupsMu guards groupsOpening, the starts of this node's replicas
	// under way by group name: one start a group at a time, any number of
	// groups at once (their registry is Config.Replicas': replicated.go).
	groupsMu      sync.Mutex
	groupsOpening map[string]*groupStart
	// damagedGroups holds the groups whose copy here lost entries it had
	// stored (replica.ErrDamaged), by name: refused at once, until the
	// node starts again; guarded by groupsMu.
	damagedGroups map[string]error
	// damagedHomes holds when each topic homed here whose copy of a unit
	// was found damaged was last given to MoveOffDamaged; guarded by
	// groupsMu.
	damagedHomes map[string]time.Time
	// damagedUnits holds this node's copies of units found damaged, being
	// reported to their homes; damageReports the damaged copies reported
	// to this node as their topic's home (repair.go). Guarded by groupsMu.
	damagedUnits  map[UnitKey]damageMark
	damageReports map[string]map[topology.SegmentID]damageReport
	// ownerChecks holds the topics whose ownership is being checked after
	// one of their groups was sealed by another node (checkMovedAway).
	ownerChecks sync.Map
	// afterStep, when set (by tests, before any topic starts), is called
	// by a topic's controller after each step k of a layout change's
	// plan, in the controller: a panic there crashes the controller right
	// after that step (change.go).
	afterStep func(topic string, k int, step topology.Step)
}

// NewManager returns a manager with no topics loaded; call Recover.
func NewManager(cfg Config) *Manager {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Defaults == (Defaults{}) {
		cfg.Defaults = DefaultDefaults
	}
	m := &Manager{cfg: cfg, system: cfg.System, meta: cfg.Meta, log: cfg.Logger,
		m: newMetrics(cfg.Registerer), topics: map[string]*Topic{}, quarantined: map[string]string{},
		activating: map[string]chan struct{}{}, passivating: map[string]chan struct{}{}}
	if m.cfg.IdleTimeout == 0 {
		m.cfg.IdleTimeout = DefaultIdleTimeout
	}
	if m.cfg.MaxOpenLogs == 0 {
		m.cfg.MaxOpenLogs = logstore.DefaultMaxOpenLogs()
	}
	if m.cfg.MaxOpenFiles == 0 {
		m.cfg.MaxOpenFiles = logstore.DefaultMaxOpenFiles()
	}
	m.store = logstore.New(cfg.DataDir, logstore.Options{FS: cfg.FS, Events: logstore.LogEvents{Repaired: m.repaired, Hole: m.hole},
		SyncMode: cfg.CommitSync, MaxOpenFiles: m.cfg.MaxOpenFiles, JournalDirectBytes: cfg.JournalDirectBytes,
		HoldReplies: cfg.HoldReplies, AckFence: cfg.AckFence, Tier: cfg.Tier, Logger: cfg.Logger,
		Registerer: cfg.Registerer, MaxOpenLogs: m.cfg.MaxOpenLogs})
	if m.system != nil {
		m.system.EventStream.Subscribe(m.deadLetter)
	}
	return m
}

// deadLetter answers what was sent to an actor that had stopped (a bucket
// of a segment retired or restarting with its controller, or stopping
// with the node): an append is answered UNAVAILABLE, so that no producer
// waits for ever. (Requests made with a future, seals and hand-overs,
// are answered by protoactor: the future fails with ErrDeadLetter.)
func (m *Manager) deadLetter(ev any) {
	dl, ok := ev.(*actor.DeadLetterEvent)
	if !ok {
		return
	}
	switch msg := dl.Message.(type) {
	case appendReq:
		m.m.deadLetters.Inc()
		// Not on the sender's goroutine: it may hold a topic's routeMu.
		go msg.settle(unitRef{}, 0, api.Errorf(api.CodeUnavailable, "%d records reached a stopped bucket (%s); resend", len(msg.records), dl.PID.Id))
	}
}

// IdleTimeout is how long a topic stays active unused (negative: for
// ever); consumer groups passivate after the same.
func (m *Manager) IdleTimeout() time.Duration { return m.cfg.IdleTimeout }

// Store is the node's log store.
func (m *Manager) Store() *logstore.Store { return m.store }

// Recover checks the topic directories on disk against the metadata
// store and starts the sweeper that passivates idle topics. It starts no
// topic: topics activate on first use (see activation.go), so a start
// costs the same however many idle topics the store holds. A directory
// whose record is missing fails the start (ErrOrphanLogs); one whose record
// does not read or validate quarantines that topic; a store that cannot be
// read fails it.
func (m *Manager) Recover(ctx context.Context) error {
	if m.cfg.JournalDir != "" {
		if err := m.openJournal(); err != nil {
			return err
		}
	}
	checked, err := m.checkDisk(ctx)
	if err != nil {
		return err
	}
	if m.cfg.IdleTimeout > 0 {
		m.stopSweeper = make(chan struct{})
		go m.runSweeper(m.cfg.IdleTimeout, m.stopSweeper)
	}
	m.mu.RLock()
	quarantined := len(m.quarantined)
	m.mu.RUnlock()
	m.log.Info("topics recovered: they activate on first use", "with_logs", checked, "quarantined", quarantined,
		"idle_timeout", m.cfg.IdleTimeout, "max_open_logs", m.cfg.MaxOpenLogs, "max_open_files", m.cfg.MaxOpenFiles)
	return nil
}

// CreateTopic creates a topic owned by this node. It is not started: it
// activates on first use, so creating many topics costs their records only.
func (m *Manager) CreateTopic(ctx context.Context, req api.TopicCreateRequest) (api.TopicDescription, error) {
	return m.CreateTopicOn(ctx, req, m.cfg.NodeID)
}

// CreateTopicOn creates a topic whose segments node owner will hold (it
// activates there, on first use).
func (m *Manager) CreateTopicOn(ctx context.Context, req api.TopicCreateRequest, owner string) (api.TopicDescription, error) {
	name, persistent, err := parseTopicURI(req.Topic)
	if err != nil {
		return api.TopicDescription{}, err
	}
	switch {
	case persistent && (req.Segments != 0 || req.Buckets != 0):
		return api.TopicDescription{}, api.Errorf(api.CodeInvalidArgument, "%s is a fixed topic: it takes partitions, not segments or buckets", req.Topic)
	case !persistent && req.Partitions != 0:
		return api.TopicDescription{}, api.Errorf(api.CodeInvalidArgument, "%s is a scalable topic: it takes segments and buckets, not partitions (persistent:// topics take partitions)", req.Topic)
	case persistent && (req.Partitions < 0 || req.Partitions > topology.MaxInitialSegments):
		return api.TopicDescription{}, api.Errorf(api.CodeInvalidArgument, "partitions must be in [1, %d], got %d", topology.MaxInitialSegments, req.Partitions)
	}
	if err := m.checkReplication(req.Policies); err != nil {
		return api.TopicDescription{}, err
	}
	if err := req.Policies.ValidateTopic(); err != nil {
		return api.TopicDescription{}, err
	}
	ns, err := m.namespace(ctx, name.NamespaceName())
	if err != nil {
		return api.TopicDescription{}, err
	}
	if _, err := m.ResolvePolicies(req.Policies, ns.Policies); err != nil {
		return api.TopicDescription{}, err
	}
	segments := req.Segments
	if segments == 0 {
		segments = 1
	}
	budget := req.Buckets
	if budget == 0 {
		budget = m.resolve(req.Policies, ns.Policies).EntryBucketBudget
	}
	if segments < 1 || segments > 4096 {
		return api.TopicDescription{}, api.Errorf(api.CodeInvalidArgument, "segments must be in [1, 4096], got %d", segments)
	}
	if budget < 1 {
		return api.TopicDescription{}, api.Errorf(api.CodeInvalidArgument, "buckets must be at least 1, got %d", budget)
	}
	layout, err := topology.New(segments, max(budget, segments))
	if persistent {
		layout, err = topology.NewFixed(max(req.Partitions, 1))
	}
	if err != nil {
		return api.TopicDescription{}, api.Errorf(api.CodeInvalidArgument, "%v", err)
	}
	layout = layout.WithOwner(owner)
	ids := make([]topology.SegmentID, len(layout.Segments))
	for i, s := range layout.Segments {
		ids[i] = s.ID
	}
	layout = m.withReplicas(name.String(), layout, ids, owner, m.resolve(req.Policies, ns.Policies).ReplicationFactor)
	rec := meta.TopicRecord{Layout: layout, Policies: req.Policies, EpochTimes: map[uint64]int64{layout.Epoch: time.Now().UnixMilli()},
		Incarnation: newIncarnation()}
	m.mu.RLock()
	closed := m.closed
	m.mu.RUnlock()
	if closed {
		return api.TopicDescription{}, api.Errorf(api.CodeUnavailable, "server is stopping")
	}
	_, err = m.meta.CreateTopic(ctx, name, rec)
	if errors.Is(err, meta.ErrExists) {
		return api.TopicDescription{}, api.Errorf(api.CodeAlreadyExists, "topic %s exists", name)
	}
	if err != nil {
		return api.TopicDescription{}, metaError(err)
	}
	rec.Topic = name.String()
	d, err := m.describeRecord(name, rec, ns.Policies)
	if err != nil {
		return api.TopicDescription{}, err
	}
	m.publishLayout(name, d)
	return d, nil
}

// describeRecord is the description of a topic from its record, as its
// Describe would answer once active.
func (m *Manager) describeRecord(name routing.TopicName, rec meta.TopicRecord, nsPolicies *api.Policies) (api.TopicDescription, error) {
	t := &Topic{name: name, uri: name.String(), mgr: m}
	if err := t.applyPolicies(rec.Policies, nsPolicies); err != nil {
		return api.TopicDescription{}, err
	}
	d := Describe(t.uri, rec.Layout)
	if p := rec.Policies; !p.Empty() {
		d.Policies = p
	}
	eff := t.effectivePolicies()
	d.EffectivePolicies = &eff
	return d, nil
}

// spawnTopic starts a topic's controller, which starts its segments, and
// returns once it published its first snapshot. The caller makes it
// known (m.topics).
func (m *Manager) spawnTopic(name routing.TopicName, rec meta.TopicRecord, rev uint64, nsPolicies *api.Policies) (*Topic, error) {
	t := &Topic{name: name, uri: name.String(), mgr: m, ready: make(chan struct{}), incarnation: rec.Incarnation}
	t.touch()
	m.store.SetIncarnation(name, rec.Incarnation)
	if err := t.applyPolicies(rec.Policies, nsPolicies); err != nil {
		// Stored policies that no longer resolve (the broker defaults
		// changed): serve with the broker defaults until they are fixed.
		m.log.Error("topic policies do not resolve; using the broker defaults", "topic", name.String(), "err", err)
		if err := t.applyPolicies(nil, nil); err != nil {
			return nil, err
		}
		t.policies.Store(rec.Policies)
	}
	pid, err := m.system.Root.SpawnNamed(newControllerProps(t, rec, rev), "topic/"+name.Tenant+"/"+name.Namespace+"/"+name.Name)
	if err != nil {
		return nil, api.Errorf(api.CodeInternal, "start controller of %s: %v", name, err)
	}
	t.pid = pid
	// The controller publishes the first snapshot in Started; wait for it so
	// the topic is usable as soon as it is returned.
	select {
	case <-t.ready:
	case <-time.After(10 * time.Second):
		_ = m.system.Root.StopFuture(pid).Wait()
		return nil, api.Errorf(api.CodeInternal, "controller of %s did not start", name)
	}
	return t, nil
}

// resolve merges topic policies, namespace policies and broker defaults.
func (m *Manager) resolve(topic, ns *api.Policies) Defaults {
	d := m.cfg.Defaults
	for _, p := range []*api.Policies{ns, topic} { // later levels win
		if p == nil {
			continue
		}
		if p.Durability != nil {
			d.Durability, _ = wal.ParseDurability(*p.Durability)
		}
		if p.MaxPayloadBytes != nil {
			d.MaxPayloadBytes = *p.MaxPayloadBytes
		}
		if p.EntryBucketBudget != nil {
			d.EntryBucketBudget = *p.EntryBucketBudget
		}
		if p.ReplicationFactor != nil {
			d.ReplicationFactor = *p.ReplicationFactor
		}
	}
	return d
}

func (m *Manager) namespace(ctx context.Context, ns routing.NamespaceName) (meta.NamespaceRecord, error) {
	rec, err := m.meta.Namespace(ctx, ns)
	if errors.Is(err, meta.ErrNotFound) {
		return rec, api.Errorf(api.CodeNamespaceMissing, "namespace %s does not exist", ns)
	}
	return rec, metaError(err)
}

// Topic returns a topic, activating it when it is not active. A fixed
// topic answers to both its persistent:// and its topic:// URI (the
// subjects carry no scheme); a persistent:// URI of a scalable topic is
// refused (checkScheme).
func (m *Manager) Topic(uri string) (*Topic, error) {
	name, persistent, err := parseTopicURI(uri)
	if err != nil {
		return nil, err
	}
	t, err := m.TopicByName(name)
	if err == nil && persistent {
		if err := checkScheme(name, t.Layout()); err != nil {
			return nil, err
		}
	}
	return t, err
}

// TopicByName returns a topic by its parsed name, activating it when it
// is not active (reading its record from the store; TOPIC_NOT_FOUND when
// there is none).
func (m *Manager) TopicByName(name routing.TopicName) (*Topic, error) {
	uri := name.String()
	for {
		m.mu.RLock()
		t, ok := m.topics[uri]
		closed := m.closed
		reason, quarantined := m.quarantined[uri]
		wait := m.activating[uri]
		if wait == nil {
			wait = m.passivating[uri]
		}
		m.mu.RUnlock()
		switch {
		case closed:
			return nil, api.Errorf(api.CodeUnavailable, "the server is shutting down")
		case quarantined:
			return nil, quarantinedError(uri, reason)
		case ok:
			t.touch()
			return t, nil
		case wait != nil:
			<-wait
			continue
		}
		t, err := m.activate(name)
		if err != nil || t != nil {
			if t != nil {
				t.touch()
			}
			return t, err
		}
	}
}

// activeTopics returns the topics active here.
func (m *Manager) activeTopics() []*Topic {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make([]*Topic, 0, len(m.topics))
	for _, t := range m.topics {
		out = append(out, t)
	}
	return out
}

// Active returns the topic if it is active here, without activating it.
func (m *Manager) Active(uri string) (*Topic, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	t, ok := m.topics[uri]
	return t, ok
}

// AppendedBytes is the key and payload bytes the node has made durable
// since it started, over every topic.
func (m *Manager) AppendedBytes() uint64 { return m.m.nodeBytes.Load() }

// OwnedSegments counts the active segments of the active topics that node
// owns (a segment without an owner, of a layout written before nodes had
// ids, is the node's that serves it) and, for this node, the segments of
// other nodes' topics it was written to within hostedRecent.
func (m *Manager) OwnedSegments(node string) int {
	m.mu.RLock()
	topics := make([]*Topic, 0, len(m.topics))
	for _, t := range m.topics {
		topics = append(topics, t)
	}
	m.mu.RUnlock()
	n := 0
	for _, t := range topics {
		for _, s := range t.Layout().Segments {
			if s.State == topology.StateActive && (s.Owner == node || s.Owner == "") {
				n++
			}
		}
	}
	if node == m.cfg.NodeID {
		n += m.HostedSegments(hostedRecent)
	}
	return n
}

// hostedRecent is how recently a segment of another node's topic must have
// been written here to count as one this node owns (OwnedSegments).
const hostedRecent = time.Minute

// All returns every active topic, sorted by URI.
func (m *Manager) All() []*Topic {
	m.mu.RLock()
	out := make([]*Topic, 0, len(m.topics))
	for _, t := range m.topics {
		out = append(out, t)
	}
	m.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].uri < out[j].uri })
	return out
}

// Change has the topic's controller change its layout by op (a manual
// change: split, merge, rebucket, delete, partitions, migrate, ...).
func (m *Manager) Change(ctx context.Context, uri string, op topology.Op) (api.TopicDescription, error) {
	t, err := m.Topic(uri)
	if err != nil {
		return api.TopicDescription{}, err
	}
	timeout := 30 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	res, err := m.system.Root.RequestFuture(t.pid, &changeReq{op: op, reason: string(scaling.ReasonManual)}, timeout).Result()
	if err != nil {
		return api.TopicDescription{}, api.Errorf(api.CodeTimeout, "%s of %s: %v", op.Kind, uri, err)
	}
	r := res.(*changeResp)
	return r.desc, r.err
}

// Migrate turns a fixed topic (persistent://t/ns/name) into the scalable
// topic://t/ns/name in place (topology.Layout.Migrate), in one layout
// change, the record's compare-and-swap: no log is copied or moved, the
// partitions' logs are read as the sealed parents they become.
func (m *Manager) Migrate(ctx context.Context, req api.MigrateRequest) (api.TopicDescription, error) {
	name, persistent, err := parseTopicURI(req.Topic)
	if err != nil {
		return api.TopicDescription{}, err
	}
	if !persistent {
		return api.TopicDescription{}, api.Errorf(api.CodeInvalidArgument,
			"topic.migrate names the fixed topic to migrate, persistent://%s/%s/%s, not %s", name.Tenant, name.Namespace, name.Name, req.Topic)
	}
	t, err := m.Topic(req.Topic)
	if err != nil {
		return api.TopicDescription{}, err
	}
	if n := t.partitionClients(); n > 0 && !req.Force {
		return api.TopicDescription{}, api.Errorf(api.CodeLayoutRefused,
			"%s has clients addressing its partitions explicitly (producers naming %s, readers of some partitions only, in the last %s): %d; "+
				"they would break once it is migrated; stop them, or migrate with \"force\":true", req.Topic, api.HeaderPartition, partitionClientWindow, n)
	}
	buckets := max(req.Buckets, 1)
	d, err := m.Change(ctx, req.Topic, topology.Migrate(buckets))
	if err == nil {
		m.log.Info("fixed topic migrated into a scalable topic", "from", req.Topic, "to", d.Topic, "partitions", len(t.Layout().Partitions()),
			"epoch", d.Epoch, "forced", req.Force)
	}
	return d, err
}

// DeleteTopic stops a topic, deletes its logs and its metadata. A
// quarantined topic is deleted too: its record and every file under its
// name.
func (m *Manager) DeleteTopic(ctx context.Context, uri string) error {
	name, err := parseScalable(uri)
	if err != nil {
		return err
	}
	m.mu.RLock()
	_, quarantined := m.quarantined[name.String()]
	m.mu.RUnlock()
	if quarantined {
		return m.deleteQuarantined(ctx, name)
	}
	t, err := m.Topic(uri)
	if err != nil {
		return err
	}
	// A crash from here until the logs are gone leaves the marker: the
	// next start finishes the delete instead of refusing the directory.
	if err := writeMarker(m.store.NameDir(t.name)); err != nil {
		return api.Errorf(api.CodeInternal, "delete %s: %v", uri, err)
	}
	m.mu.Lock()
	if m.topics[t.uri] == t {
		delete(m.topics, t.uri)
	}
	m.m.activeTopics.Set(float64(len(m.topics)))
	m.mu.Unlock()
	if err := m.system.Root.StopFuture(t.pid).Wait(); err != nil {
		m.log.Warn("stop controller", "topic", uri, "err", err)
	}
	st := *t.state.Load()
	st.deleted = true
	st.changed = make(chan struct{})
	t.publish(&st)
	if err := m.meta.DeleteTopic(ctx, t.name); err != nil {
		return metaError(err)
	}
	m.stopGroups(t.name, -1)
	if err := m.store.RemoveTopic(t.name); err != nil {
		return api.Errorf(api.CodeInternal, "remove logs of %s: %v", uri, err)
	}
	m.forgetSeries(uri)
	m.dropElsewhere(ctx, t)
	return nil
}

// dropElsewhere tells every other node that owns segments of deleted
// topic t to remove its logs of it; one that cannot be told (it is down)
// is logged: its logs stay until an operator removes them.
func (m *Manager) dropElsewhere(ctx context.Context, t *Topic) {
	if m.cfg.RemoteUnits == nil {
		return
	}
	var owners []string
	for _, s := range t.Layout().Segments {
		if s.Owner != "" && s.Owner != m.cfg.NodeID && !slices.Contains(owners, s.Owner) {
			owners = append(owners, s.Owner)
		}
	}
	for _, owner := range owners {
		if err := m.cfg.RemoteUnits.DropTopic(ctx, owner, t.name, t.incarnation, nil); err != nil {
			m.m.dropFailures.Inc()
			m.log.Error("a node that owns segments of a deleted topic could not be told to remove its logs; they stay on its disk",
				"topic", t.uri, "node", owner, "err", err)
		}
	}
}

// deleteQuarantined deletes the record of a quarantined topic and every
// file under its name.
func (m *Manager) deleteQuarantined(ctx context.Context, name routing.TopicName) error {
	dir := m.store.NameDir(name)
	if err := writeMarker(dir); err != nil {
		return api.Errorf(api.CodeInternal, "delete %s: %v", name, err)
	}
	if err := m.meta.DeleteTopic(ctx, name); err != nil {
		return metaError(err)
	}
	if err := m.store.RemoveLogs(dir); err != nil {
		return api.Errorf(api.CodeInternal, "remove the files of %s: %v", name, err)
	}
	m.mu.Lock()
	delete(m.quarantined, name.String())
	n := len(m.quarantined)
	m.mu.Unlock()
	m.m.quarantined.Set(float64(n))
	m.log.Info("quarantined topic deleted", "topic", name.String())
	return nil
}

// writeMarker puts the deletingMarker in a topic's name directory.
func writeMarker(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, deletingMarker), nil, 0o644)
}

// CrashBucket makes one bucket actor panic (supervision tests and chaos).
func (m *Manager) CrashBucket(uri string, seg topology.SegmentID, bucket int) error {
	t, err := m.Topic(uri)
	if err != nil {
		return err
	}
	pids, ok := t.state.Load().buckets[seg]
	if !ok || bucket < 0 || bucket >= len(pids) {
		return api.Errorf(api.CodeSegmentNotFound, "no active bucket %d/%d in %s", seg, bucket, uri)
	}
	m.system.Root.Send(pids[bucket], crashMsg{})
	return nil
}

func (m *Manager) publishLayout(name routing.TopicName, d api.TopicDescription) {
	if m.cfg.Publish == nil {
		return
	}
	b, err := json.Marshal(d)
	if err == nil {
		err = m.cfg.Publish(api.TopicSubject(api.LayoutPrefix, name.Tenant, name.Namespace, name.Name), b)
	}
	if err != nil {
		m.log.Warn("layout push failed", "topic", name.String(), "err", err)
	}
}

// Close stops every topic (their buckets flush) and closes every log.
func (m *Manager) Close() error {
	m.mu.Lock()
	m.closed = true
	if m.stopSweeper != nil {
		close(m.stopSweeper)
		m.stopSweeper = nil
	}
	topics := make([]*Topic, 0, len(m.topics))
	for _, t := range m.topics {
		topics = append(topics, t)
	}
	m.topics = map[string]*Topic{}
	m.mu.Unlock()
	for _, t := range topics {
		_ = m.system.Root.StopFuture(t.pid).Wait()
	}
	m.stopAllGroups()
	return m.store.Close()
}

// parseScalable parses a topic URI into the topic's name, in its
// topic:// form whatever the scheme: a topic is known by tenant, namespace
// and name, and a fixed topic (persistent://) keeps them when it is
// migrated into a scalable one, so subscriptions, logs and metadata stay
// where they are. persistent says the URI named the fixed scheme.
func parseScalable(uri string) (routing.TopicName, error) {
	name, _, err := parseTopicURI(uri)
	return name, err
}

func parseTopicURI(uri string) (name routing.TopicName, persistent bool, err error) {
	if uri == "" {
		return name, false, api.Errorf(api.CodeBadRequest, `missing "topic": want a topic URI, topic://tenant/namespace/name`)
	}
	name, err = routing.ParseTopic(uri)
	if err != nil {
		return name, false, api.Errorf(api.CodeInvalidName, "%v", err)
	}
	persistent = name.Scheme == routing.SchemePersistent
	name.Scheme = routing.SchemeScalable
	return name, persistent, nil
}

// checkScheme refuses a persistent:// URI naming a topic that is not a
// fixed one: TOPIC_MIGRATED when it was migrated, TOPIC_NOT_FOUND when it
// was always scalable.
func checkScheme(name routing.TopicName, l topology.Layout) error {
	if l.Fixed() {
		return nil
	}
	fixed := routing.TopicName{Scheme: routing.SchemePersistent, Tenant: name.Tenant, Namespace: name.Namespace, Name: name.Name}
	if len(l.Partitions()) > 0 {
		return api.Errorf(api.CodeTopicMigrated, "%s was migrated into the scalable topic %s: use that name", fixed, name)
	}
	return api.Errorf(api.CodeTopicNotFound, "%s does not exist: %s is a scalable topic", fixed, name)
}

func metaError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, meta.ErrNotFound):
		return api.Errorf(api.CodeNotFound, "%v", err)
	case errors.Is(err, meta.ErrExists):
		return api.Errorf(api.CodeAlreadyExists, "%v", err)
	default:
		return api.Errorf(api.CodeInternal, "%v", err)
	}
}
