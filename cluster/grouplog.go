package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/consumers"
	"github.com/braidmq/braid/logstore"
	"github.com/braidmq/braid/meta"
	"github.com/braidmq/braid/replica"
	"github.com/braidmq/braid/routing"
	"github.com/braidmq/braid/topology"
	"github.com/braidmq/braid/wal"
)

// Replicated consumer-group state. A group of a topic whose home segment
// (the active one covering hash 0) is replicated keeps its state log on
// the same nodes, in a raft group of its own (package replica) whose log
// is the state log: the group's home leads it, and an append (an ack, a
// change of owners...) is answered once a majority holds it. The node
// that takes the topic over when its home is lost is one of those
// replicas, so it holds the group's state too: it takes the lead and
// replays its committed log, with nothing to copy.
//
// The raft log is never cut at its head. A compaction starts a new raft
// group instead, a generation, whose first record is the snapshot (or,
// when only the replicas change, the records of the last one): its number
// and replicas are written in the group's record in the metadata store
// as Next first (so that its replicas open it when its first messages
// come), then, once the snapshot is committed in it, as the record's
// generation; the last generation is sealed and its files dropped. A
// crash between the two writes leaves the record naming the last
// generation, still whole. Replicas follow the topic: each generation
// takes its home segment's replicas at that time (the group's home
// first); a group opened on a new home whose replicas differ from them
// moves into a new generation at once.
//
// Each generation lives in its own directory, dir/r<generation>, beside
// nothing else: a group's log made before replication (in dir itself)
// moves into a generation at its next compaction.

// groupRaftPrefix begins the raft group names of consumer groups'
// state logs (those of units begin with topic://).
const groupRaftPrefix = "sub#"

// groupLeadTimeout bounds how long a group's home waits to take the lead
// of its state's raft group and see its log committed.
const groupLeadTimeout = 10 * time.Second

// groupAppendTimeout bounds how long an append to a replicated state log
// waits to be committed.
const groupAppendTimeout = 10 * time.Second

// groupEntryBytes bounds the records proposed as one entry when a
// generation starts with the last one's records.
const groupEntryBytes = 512 << 10

// groupRaftName names the raft group of generation gen of a group.
func groupRaftName(kind, topic, sub string, gen uint64) string {
	return groupRaftPrefix + kind + "#" + topic + "#" + sub + "#" + strconv.FormatUint(gen, 10)
}

// parseGroupRaftName reverses groupRaftName.
func parseGroupRaftName(name string) (kind, topic, sub string, gen uint64, err error) {
	parts := strings.Split(strings.TrimPrefix(name, groupRaftPrefix), "#")
	if !strings.HasPrefix(name, groupRaftPrefix) || len(parts) != 4 {
		return "", "", "", 0, fmt.Errorf("raft group %q: not %skind#topic#subscription#generation", name, groupRaftPrefix)
	}
	if gen, err = strconv.ParseUint(parts[3], 10, 64); err != nil || gen == 0 {
		return "", "", "", 0, fmt.Errorf("raft group %q: bad generation", name)
	}
	return parts[0], parts[1], parts[2], gen, nil
}

// generationDir is the directory of generation gen in a group's directory.
func generationDir(dir string, gen uint64) string {
	return filepath.Join(dir, "r"+strconv.FormatUint(gen, 10))
}

// replicaIndex is the raft id of node with incarnation among reps (its
// index + 1), 0 if it is not one of them.
func replicaIndex(reps []topology.Replica, node, incarnation string) uint64 {
	for i, r := range reps {
		if r.Node == node && r.Incarnation == incarnation {
			return uint64(i + 1)
		}
	}
	return 0
}

// peersOfReplicas names reps by raft id.
func peersOfReplicas(reps []topology.Replica) map[uint64]replica.Peer {
	out := make(map[uint64]replica.Peer, len(reps))
	for i, r := range reps {
		out[uint64(i+1)] = replica.Peer{Node: r.Node, Incarnation: r.Incarnation}
	}
	return out
}

// openGroupReplica is a raft group of a group's state running here.
type openGroupReplica struct {
	group   *replica.Group
	storage *replica.Storage
	dir     string
}

// groupReplicaSet is the state logs' raft groups this node runs, by name.
type groupReplicaSet struct {
	mu   sync.Mutex
	open map[string]openGroupReplica
}

// startGroupReplica runs this node's replica of raft group name over the
// log in dir (made, with its raft state, on its first start), or returns
// the one running.
func (n *Member) startGroupReplica(name, dir string, reps []topology.Replica) (openGroupReplica, error) {
	set := &n.groupReplicas
	set.mu.Lock()
	defer set.mu.Unlock()
	if r, ok := set.open[name]; ok {
		return r, nil
	}
	id := replicaIndex(reps, n.nodeID, n.cfg.Incarnation)
	if id == 0 {
		return openGroupReplica{}, fmt.Errorf("node %s (incarnation %s) is no replica of %s", n.nodeID, n.cfg.Incarnation, name)
	}
	// Made durably (a directory made without its parent synced would go
	// with a crash, its acknowledged state with it).
	if err := wal.MkdirDurable(nil, dir); err != nil {
		return openGroupReplica{}, err
	}
	l, err := wal.Open(dir, wal.Options{Durability: wal.DurabilityAlways})
	if err != nil {
		return openGroupReplica{}, err
	}
	state := filepath.Join(dir, logstore.RaftStateFile)
	if _, err := os.Stat(state); errors.Is(err, os.ErrNotExist) {
		if l.DurableOffset() != l.FirstOffset() {
			l.Close()
			return openGroupReplica{}, fmt.Errorf("%s holds records but no raft state", dir)
		}
		voters := make([]uint64, len(reps))
		for i := range voters {
			voters[i] = uint64(i + 1)
		}
		if err := replica.Bootstrap(nil, state, voters); err != nil {
			l.Close()
			return openGroupReplica{}, err
		}
	}
	st, err := replica.OpenStorageIn(n.replicas.StateJournal(), l, nil, state)
	if err != nil {
		l.Close()
		return openGroupReplica{}, err
	}
	// The first replica (the topic's home's) is meant to lead first; the
	// group's home, wherever it is, takes the lead (LeadCommitted).
	g, err := n.replicas.Start(replica.Config{Group: name, ID: id, Peers: peersOfReplicas(reps), Storage: st, FirstLeader: 1})
	if err != nil {
		l.Close()
		return openGroupReplica{}, err
	}
	if set.open == nil {
		set.open = map[string]openGroupReplica{}
	}
	r := openGroupReplica{group: g, storage: st, dir: dir}
	set.open[name] = r
	return r, nil
}

// stopGroupReplica stops this node's replica of raft group name, if it
// runs, and closes its log.
func (n *Member) stopGroupReplica(name string) {
	set := &n.groupReplicas
	set.mu.Lock()
	r, ok := set.open[name]
	delete(set.open, name)
	set.mu.Unlock()
	if ok {
		r.group.Stop()
		_ = r.storage.Log().Close()
	}
}

// dropGenerations stops and removes the generations of a group before
// gen kept in dir.
func (n *Member) dropGenerations(kind, topic, sub, dir string, gen uint64) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		g, err := strconv.ParseUint(strings.TrimPrefix(e.Name(), "r"), 10, 64)
		if !e.IsDir() || !strings.HasPrefix(e.Name(), "r") || err != nil || g >= gen {
			continue
		}
		n.stopGroupReplica(groupRaftName(kind, topic, sub, g))
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			n.log.Error("removing an old generation of a consumer group's state failed", "topic", topic, "subscription", sub,
				"generation", g, "err", err)
		}
	}
}

// openGroupFollower opens this node's replica of a group's state log that
// a raft message named, when the group's record names this node (with its
// incarnation) among the replicas of that generation or the one being
// made (replica.HostConfig.OnUnknown).
func (n *Member) openGroupFollower(name string, from replica.Peer) {
	kind, topic, sub, gen, err := parseGroupRaftName(name)
	// The node's consumer groups are given to the Member once made
	// (Attach), after its replica host starts: a message that comes
	// before waits for them (it read them unset, and crashed the node, a
	// restarted one that its peers' groups spoke to at once).
	<-n.attached
	var groups groupStore
	if err == nil {
		groups, err = n.groupsOf(kind)
	}
	var tn routing.TopicName
	if err == nil {
		tn, err = routing.ParseTopic(topic)
	}
	if err != nil {
		n.log.Error("a raft message names a consumer group that cannot be; dropped", "group", name, "from", from.String(), "err", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), remoteReadTimeout)
	defer cancel()
	rec, _, err := n.meta.GroupHome(ctx, tn, kind, sub)
	if err != nil {
		if !errors.Is(err, meta.ErrNotFound) {
			n.log.Warn("reading a consumer group's record to open its replica failed", "group", name, "err", err)
		}
		return
	}
	var reps []topology.Replica
	switch {
	case rec.Generation == gen:
		reps = rec.Replicas
	case rec.Next != nil && rec.Next.Generation == gen:
		reps = rec.Next.Replicas
	default:
		return // an old generation, or one given up
	}
	if replicaIndex(reps, n.nodeID, n.cfg.Incarnation) == 0 {
		return
	}
	dir := groups.Dir(topic, sub)
	if _, err := n.startGroupReplica(name, generationDir(dir, gen), reps); err != nil {
		n.log.Error("opening a replica of a consumer group's state failed", "group", name, "err", err)
		return
	}
	n.dropGenerations(kind, topic, sub, dir, rec.Generation)
}

// GroupLogs returns the consumers' LogOpener for groups of kind: the
// groups of topics whose home segment is replicated keep their state in a
// replicated log, the others in their own WAL.
func (n *Member) GroupLogs(kind string) consumers.LogOpener { return groupLogs{n: n, kind: kind} }

type groupLogs struct {
	n    *Member
	kind string
}

// Open implements consumers.LogOpener.
func (o groupLogs) Open(req consumers.LogRequest, apply func([]byte) error) (consumers.StateLog, int, error) {
	n := o.n
	if n.replicas == nil || n.meta == nil || n.topics == nil {
		return consumers.LocalLogs{}.Open(req, apply)
	}
	name, err := routing.ParseTopic(req.Topic)
	if err != nil {
		return nil, 0, api.Errorf(api.CodeInvalidName, "%v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), remoteReadTimeout)
	rec, _, err := n.meta.GroupHome(ctx, name, o.kind, req.Subscription)
	cancel()
	if errors.Is(err, meta.ErrNotFound) {
		// Not recorded (made on a node without a cluster before): its log
		// is this node's.
		return consumers.LocalLogs{}.Open(req, apply)
	}
	if err != nil {
		return nil, 0, api.Errorf(api.CodeUnavailable, "subscription %q of %s: its record could not be read: %v", req.Subscription, req.Topic, err)
	}
	if rec.Home != n.nodeID {
		return nil, 0, api.Errorf(api.CodeUnavailable, "subscription %q of %s is served by node %s now; retry", req.Subscription, req.Topic, rec.Home)
	}
	logger := req.Logger
	if logger == nil {
		logger = n.log
	}
	l := &groupLog{n: n, kind: o.kind, name: name, sub: req.Subscription, dir: req.Dir, logger: logger}
	if rec.Generation == 0 {
		want, err := n.groupReplicasWanted(req.Topic)
		if err != nil {
			return nil, 0, api.Errorf(api.CodeUnavailable, "subscription %q of %s: %v", req.Subscription, req.Topic, err)
		}
		if want == nil || !req.Create {
			// Unreplicated, or state made before: kept in the group's own
			// WAL until the next compaction moves it into a generation.
			local, records, err := consumers.LocalLogs{}.Open(req, apply)
			if local == nil {
				return nil, 0, err
			}
			l.local = local
			return l, records, err
		}
		if err := l.startGeneration(nil, want); err != nil {
			return nil, 0, err
		}
		return l, 0, nil
	}
	var records int
	if replicaIndex(rec.Replicas, n.nodeID, n.cfg.Incarnation) == 0 {
		records, err = l.adopt(rec, apply)
	} else {
		records, err = l.open(rec, apply)
	}
	if err != nil {
		l.Close()
		return nil, 0, err
	}
	return l, records, nil
}

// groupReplicasWanted returns the replicas a group of topic keeps its
// state on, this node first: its home segment's, nil when that one is not
// replicated. The topic's layout is the one it runs with here, or, when
// it is not active on this node, its record's; an error when that one
// cannot be read (a group is never made with fewer copies for it).
func (n *Member) groupReplicasWanted(topic string) ([]topology.Replica, error) {
	reps, active := n.topics.HomeReplicas(topic)
	if !active {
		var err error
		if reps, err = n.recordedHomeReplicas(topic); err != nil {
			return nil, err
		}
	}
	if len(reps) == 0 {
		return nil, nil
	}
	self := topology.Replica{Node: n.nodeID, Incarnation: n.cfg.Incarnation}
	out := []topology.Replica{self}
	for _, r := range reps {
		if r != self {
			out = append(out, r)
		}
	}
	return out, nil
}

// recordedHomeReplicas returns the replicas of topic's home segment as
// its record names them.
func (n *Member) recordedHomeReplicas(topic string) ([]topology.Replica, error) {
	name, err := routing.ParseTopic(topic)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), remoteReadTimeout)
	defer cancel()
	rec, _, err := n.meta.Topic(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("the replicas of %s: its record could not be read: %w", topic, err)
	}
	for _, s := range rec.Layout.Segments {
		if s.State == topology.StateActive && s.Range.Lo == 0 {
			return slices.Clone(s.Replicas), nil
		}
	}
	return nil, nil
}

// groupLog is a group's state log on its home: its own WAL (local), or
// this node's replica, as leader, of the raft group of a generation.
type groupLog struct {
	n      *Member
	kind   string
	name   routing.TopicName
	sub    string
	dir    string
	logger *slog.Logger

	local consumers.StateLog
	gen   uint64
	reps  []topology.Replica
	cur   openGroupReplica
	// checked is when Append last compared the replicas with those wanted;
	// short says they differed and no new generation could be made
	// (counted in Member.groupsShort).
	checked time.Time
	short   bool
}

// setShort records whether the group's state is short of the replicas
// wanted (node.list, braid_replica_under_replicated_groups).
func (l *groupLog) setShort(short bool) {
	if short == l.short {
		return
	}
	l.short = short
	if short {
		l.n.groupsShort.Add(1)
	} else {
		l.n.groupsShort.Add(-1)
	}
}

func (l *groupLog) raftName(gen uint64) string {
	return groupRaftName(l.kind, l.name.String(), l.sub, gen)
}

// open takes the lead of the generation rec names, replays its committed
// records into apply, and moves them into a new generation at once when
// the replicas wanted differ.
func (l *groupLog) open(rec meta.SubscriptionRecord, apply func([]byte) error) (int, error) {
	r, err := l.n.startGroupReplica(l.raftName(rec.Generation), generationDir(l.dir, rec.Generation), rec.Replicas)
	if err != nil {
		return 0, api.Errorf(api.CodeUnavailable, "subscription %q of %s: its replicated state: %v", l.sub, l.name, err)
	}
	l.gen, l.reps, l.cur = rec.Generation, rec.Replicas, r
	if err := r.group.LeadCommitted(groupLeadTimeout); err != nil {
		return 0, api.Errorf(api.CodeUnavailable, "subscription %q of %s: taking the lead of its state: %v", l.sub, l.name, err)
	}
	recs, err := l.committed()
	if err != nil {
		return 0, err
	}
	for i, rec := range recs {
		if err := apply(rec.Payload); err != nil {
			return 0, fmt.Errorf("replaying generation %d of subscription %q at record %d: %w", l.gen, l.sub, i, err)
		}
	}
	// What a generation made before a crash left (a directory of the
	// group's own log, older generations) goes.
	l.n.dropGenerations(l.kind, l.name.String(), l.sub, l.dir, l.gen)
	l.dropLocalFiles()
	if want, err := l.n.groupReplicasWanted(l.name.String()); err == nil && want != nil && !slices.Equal(want, l.reps) {
		if err := l.startGeneration(recs, want); err != nil {
			return 0, err
		}
	}
	return len(recs), nil
}

// committed reads every committed record of the running generation.
func (l *groupLog) committed() ([]wal.Record, error) {
	log := l.cur.storage.Log()
	recs, err := readStateRecords(log, log.FirstOffset(), l.cur.group.Committed())
	if err != nil {
		return nil, fmt.Errorf("reading generation %d of subscription %q: %w", l.gen, l.sub, err)
	}
	return recs, nil
}

// readStateRecords reads the records [from, to) of a state log, their
// timestamps and payloads.
func readStateRecords(log *wal.Log, from, to uint64) ([]wal.Record, error) {
	var out []wal.Record
	for from < to {
		recs, err := log.ReadRange(from, int(min(to-from, 512)), 0)
		if err == nil && len(recs) == 0 {
			err = errors.New("no record")
		}
		if err != nil {
			return nil, fmt.Errorf("at %d: %w", from, err)
		}
		for _, r := range recs {
			out = append(out, wal.Record{Timestamp: r.Timestamp, Payload: r.Payload})
		}
		from += uint64(len(recs))
	}
	return out, nil
}

// dropLocalFiles removes the files of the group's own log from its
// directory (its state is in a generation now).
func (l *groupLog) dropLocalFiles() {
	entries, err := os.ReadDir(l.dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !e.IsDir() {
			_ = os.Remove(filepath.Join(l.dir, e.Name()))
		}
	}
}

// Append implements consumers.StateLog.
func (l *groupLog) Append(rec wal.Record) (uint64, error) {
	if l.local != nil {
		return l.local.Append(rec)
	}
	if err := l.followReplicas(); err != nil {
		return 0, err
	}
	p := l.cur.group.Propose([]wal.Record{rec})
	select {
	case <-p.Done():
	case <-time.After(groupAppendTimeout):
		return 0, fmt.Errorf("subscription %q: a state record not committed on a majority of its replicas within %v", l.sub, groupAppendTimeout)
	}
	if p.Err != nil {
		return 0, p.Err
	}
	return p.First, nil
}

// followReplicas moves the log into a new generation, with the records
// of the running one, when the replicas wanted (the topic's home
// segment's) are no longer its replicas: a copy lost with a node is made
// again, on the node that replaced it. It looks at most once a second.
func (l *groupLog) followReplicas() error {
	now := l.n.clock.Now()
	if now.Sub(l.checked) < time.Second {
		return nil
	}
	l.checked = now
	want, err := l.n.groupReplicasWanted(l.name.String())
	if err != nil {
		l.logger.Warn("a consumer group's state could not compare its replicas with those wanted; looked at again later", "subscription", l.sub, "err", err)
		return nil
	}
	if want == nil || slices.Equal(want, l.reps) {
		l.setShort(false)
		return nil
	}
	recs, err := l.committed()
	if err == nil {
		err = l.startGeneration(recs, want)
	}
	l.setShort(err != nil)
	return err
}

// groupMaintainEvery is how often a running group whose state is
// replicated compares its replicas with those wanted when nothing is
// written (consumers.Maintained): a copy lost with a node is made again
// within about this long even for a group nobody writes.
const groupMaintainEvery = 10 * time.Second

var _ consumers.Maintained = (*groupLog)(nil)

// MaintainAt implements consumers.Maintained (zero for a group whose
// state is in its own WAL).
func (l *groupLog) MaintainAt() time.Time {
	if l.local != nil || l.cur.group == nil {
		return time.Time{}
	}
	return l.checked.Add(groupMaintainEvery)
}

// Maintain implements consumers.Maintained: the replicas followed.
func (l *groupLog) Maintain(time.Time) error { return l.followReplicas() }

// Compact implements consumers.StateLog: a new generation with the
// snapshot as its only record, on the replicas wanted now; the group's
// own log, when no replica is wanted.
func (l *groupLog) Compact(snapshot wal.Record) (int, error) {
	want, err := l.n.groupReplicasWanted(l.name.String())
	if err != nil {
		return 0, api.Errorf(api.CodeUnavailable, "subscription %q of %s: compacting its state: %v", l.sub, l.name, err)
	}
	if l.local != nil && want == nil {
		return l.local.Compact(snapshot)
	}
	if want == nil {
		want = []topology.Replica{{Node: l.n.nodeID, Incarnation: l.n.cfg.Incarnation}}
	}
	if err := l.startGeneration([]wal.Record{snapshot}, want); err != nil {
		return 0, err
	}
	return 1, nil
}

// Close implements consumers.StateLog: this node's replica stops (its
// followers elect another leader if they need one; the group's next start
// here takes the lead back).
func (l *groupLog) Close() error {
	l.setShort(false)
	if l.local != nil {
		return l.local.Close()
	}
	if l.cur.group != nil {
		l.n.stopGroupReplica(l.raftName(l.gen))
		l.cur = openGroupReplica{}
	}
	return nil
}

// startGeneration moves the log into a new generation on reps (this node
// first) whose first records are recs, and drops the last one.
func (l *groupLog) startGeneration(recs []wal.Record, reps []topology.Replica) error {
	n := l.n
	ctx, cancel := context.WithTimeout(context.Background(), groupLeadTimeout)
	defer cancel()
	fail := func(err error) error {
		return api.Errorf(api.CodeUnavailable, "subscription %q of %s: starting a generation of its state: %v", l.sub, l.name, err)
	}
	rec, rev, err := n.meta.GroupHome(ctx, l.name, l.kind, l.sub)
	if err != nil {
		return fail(err)
	}
	if rec.Home != n.nodeID {
		return fail(fmt.Errorf("node %s serves it now", rec.Home))
	}
	gen := rec.Generation + 1
	if rec.Generation == 0 {
		// A subscription's first generation is numbered by the clock (in
		// µs): one made again under a deleted one's name never takes a
		// number the deleted one used, so the copies other nodes still keep
		// of the deleted one's generations (a follower drops them when it
		// opens a later one) are never taken for the new one's.
		gen = max(gen, uint64(n.clock.Now().UnixMicro()))
	}
	if rec.Next != nil && rec.Next.Generation >= gen {
		gen = rec.Next.Generation + 1 // one given up: its number is not used again
	}
	rec.Next = &meta.GroupGeneration{Generation: gen, Replicas: reps}
	if rev, err = n.meta.UpdateGroupRecord(ctx, l.name, rec, rev); err != nil {
		return fail(err)
	}
	name := l.raftName(gen)
	r, err := n.startGroupReplica(name, generationDir(l.dir, gen), reps)
	if err == nil {
		err = r.group.LeadCommitted(groupLeadTimeout)
	}
	for len(recs) > 0 && err == nil {
		size, k := 0, 0
		for k < len(recs) && (k == 0 || size+len(recs[k].Payload) <= groupEntryBytes) {
			size += len(recs[k].Payload)
			k++
		}
		p := r.group.Propose(recs[:k])
		select {
		case <-p.Done():
			err = p.Err
		case <-ctx.Done():
			err = ctx.Err()
		}
		recs = recs[k:]
	}
	if err == nil {
		rec.GroupGeneration, rec.Next = meta.GroupGeneration{Generation: gen, Replicas: reps}, nil
		_, err = n.meta.UpdateGroupRecord(ctx, l.name, rec, rev)
	}
	if err != nil {
		n.stopGroupReplica(name)
		_ = os.RemoveAll(generationDir(l.dir, gen))
		return fail(err)
	}
	// The last generation is sealed (its followers stop taking records
	// from an old leader) and dropped here; its followers drop theirs
	// when they open the new one.
	if l.cur.group != nil {
		old := l.cur.group
		select {
		case <-old.Seal().Done():
		case <-time.After(time.Second):
		}
	}
	if l.local != nil {
		_ = l.local.Close()
		l.local = nil
		l.dropLocalFiles()
	}
	prev := l.gen
	l.gen, l.reps, l.cur = gen, reps, r
	n.dropGenerations(l.kind, l.name.String(), l.sub, l.dir, gen)
	l.logger.Info("consumer group state in a new generation", "generation", gen, "from", prev, "replicas", len(reps))
	return nil
}
