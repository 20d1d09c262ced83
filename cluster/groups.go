package cluster

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/cluster/clusterpb"
	"github.com/braidmq/braid/meta"
	"github.com/braidmq/braid/routing"
)

// Consumer groups follow their topic. A group runs on the node serving
// its topic and keeps its state (ack cursors, owners, drained segments)
// in a log on that node's disk. Its record in the metadata store names
// that node, its home. When the topic has moved (its owner was lost, or
// the group is started elsewhere for any reason), the node about to start
// the group finds another home in the record: it asks that node to stop
// the group and send the files of its directory (actor messages over
// protoactor remote, in chunks), writes them into its own directory,
// moves the home to itself by compare-and-swap, and tells the old home to
// drop its copy. The group then replays its log as after a restart: every
// acknowledged message stays acknowledged. While the old home is down,
// the group is UNAVAILABLE (a stream group would wait for the topic's
// sealed segments there anyway).

// Group kinds, as their records name them.
const (
	GroupStream = "stream"
	GroupQueue  = "queue"
)

// groupChunk is the most bytes of a group's file one message carries.
const groupChunk = 1 << 20

// groupMoves serializes the moves of each group on this node.
type groupMoves struct {
	mu    sync.Mutex
	doing map[string]*sync.Mutex
}

func (g *groupMoves) lock(key string) func() {
	g.mu.Lock()
	if g.doing == nil {
		g.doing = map[string]*sync.Mutex{}
	}
	l := g.doing[key]
	if l == nil {
		l = &sync.Mutex{}
		g.doing[key] = l
	}
	g.mu.Unlock()
	l.Lock()
	return l.Unlock
}

// prepareGroup returns the consumers' prepare function for groups of
// kind: it makes this node the group's home, bringing its state over
// from the old home first (nothing without a cluster).
func (n *Member) PrepareGroup(kind string) func(topic, sub, dir string) error {
	return func(topic, sub, dir string) error {
		if n.remote == nil {
			return nil
		}
		name, err := routing.ParseTopic(topic)
		if err != nil {
			return api.Errorf(api.CodeInvalidName, "%v", err)
		}
		defer n.groupMoves.lock(kind + " " + topic + " " + sub)()
		ctx, cancel := context.WithTimeout(context.Background(), 2*adminTimeout)
		defer cancel()
		for attempt := 0; ; attempt++ {
			rec, rev, err := n.meta.GroupHome(ctx, name, kind, sub)
			if errors.Is(err, meta.ErrNotFound) {
				if _, err = n.meta.CreateGroupHome(ctx, name, kind, sub, n.nodeID); err == nil || errors.Is(err, meta.ErrExists) && attempt < 3 {
					continue // look at what is recorded now
				}
			}
			if err != nil {
				return api.Errorf(api.CodeUnavailable, "subscription %q of %s: its record could not be read or made: %v", sub, topic, err)
			}
			if rec.Home == n.nodeID {
				return nil
			}
			if rec.Generation > 0 {
				return n.takeReplicatedGroup(ctx, name, kind, sub, dir, rec, rev)
			}
			return n.takeGroup(ctx, name, kind, sub, dir, rec, rev)
		}
	}
}

// takeGroup brings a group's directory over from its home and makes
// this node its home.
func (n *Member) takeGroup(ctx context.Context, name routing.TopicName, kind, sub, dir string, rec meta.SubscriptionRecord, rev uint64) error {
	from := rec.Home
	addr, err := n.members.actorAddrOf(from)
	if err != nil {
		return api.Errorf(api.CodeUnavailable, "the state of subscription %q of %s is on node %s, which is down: the subscription serves again when it returns", sub, name, from)
	}
	begin := n.clock.Now()
	pid := actor.NewPID(addr, unitsActorName)
	res, err := n.system.Root.RequestFuture(pid, &clusterpb.GroupFiles{Kind: kind, Topic: name.String(), Subscription: sub}, remoteReadTimeout).Result()
	if err != nil {
		return api.Errorf(api.CodeUnavailable, "subscription %q of %s: node %s did not send its state: %v", sub, name, from, err)
	}
	list, ok := res.(*clusterpb.GroupFilesReply)
	if !ok || list.ErrorCode != 0 {
		return api.Errorf(api.CodeUnavailable, "subscription %q of %s: node %s did not send its state: %v", sub, name, from, replyError(res))
	}
	if err := n.fetchGroupFiles(pid, name, kind, sub, dir, list.Files); err != nil {
		return err
	}
	var bytes int64
	for _, f := range list.Files {
		bytes += f.Size
	}
	if _, err := n.meta.MoveGroupHome(ctx, name, rec, n.nodeID, rev); err != nil {
		// Another node took it meanwhile: this copy is not the group's.
		_ = os.RemoveAll(dir)
		return api.Errorf(api.CodeUnavailable, "subscription %q of %s moved elsewhere meanwhile; retry: %v", sub, name, err)
	}
	n.groupMovesTotal.Inc()
	n.log.Warn("consumer group state taken over from its former home", "topic", name.String(), "subscription", sub, "kind", kind,
		"from", from, "files", len(list.Files), "bytes", bytes, "took", time.Since(begin))
	// The old home drops its copy; if it does not hear, its copy is stale
	// by the record and never used.
	n.system.Root.Send(pid, &clusterpb.GroupRelease{Kind: kind, Topic: name.String(), Subscription: sub})
	return nil
}

// takeReplicatedGroup makes this node the home of a group whose state is
// replicated (grouplog.go): a replica of it, which takes the lead when
// the group opens its log here; or, holding no copy, a node that fetches
// the committed log from one of them first (copyGeneration). The old home, if it answers, stops the
// group first; if it does not, it cannot commit anything more once this
// node leads (a higher raft term), and it finds the record naming
// another home when it opens the log again.
func (n *Member) takeReplicatedGroup(ctx context.Context, name routing.TopicName, kind, sub, dir string, rec meta.SubscriptionRecord, rev uint64) error {
	if replicaIndex(rec.Replicas, n.nodeID, n.cfg.Incarnation) == 0 {
		// No copy here: one of its replicas hands its committed log
		// over; the group opens it here into a new generation.
		if err := n.copyGeneration(ctx, name, kind, sub, dir, rec); err != nil {
			return err
		}
	}
	// A home silent on raft (paused, cut off) would not answer either.
	if addr, err := n.members.actorAddrOf(rec.Home); err == nil && !n.raftSilent(rec.Home) {
		pid := actor.NewPID(addr, unitsActorName)
		_, _ = n.system.Root.RequestFuture(pid, &clusterpb.GroupFiles{Kind: kind, Topic: name.String(), Subscription: sub}, remoteReadTimeout).Result()
	}
	if _, err := n.meta.MoveGroupHome(ctx, name, rec, n.nodeID, rev); err != nil {
		return api.Errorf(api.CodeUnavailable, "subscription %q of %s moved elsewhere meanwhile; retry: %v", sub, name, err)
	}
	n.groupMovesTotal.Inc()
	n.log.Warn("consumer group taken over from its former home: its state is replicated here", "topic", name.String(), "subscription", sub,
		"kind", kind, "from", rec.Home, "generation", rec.Generation)
	return nil
}

// replyError describes a failed or unexpected reply.
func replyError(res any) error {
	switch r := res.(type) {
	case *clusterpb.GroupFilesReply:
		return fmt.Errorf("%s (code %d)", r.Error, r.ErrorCode)
	case *clusterpb.GroupFileChunkReply:
		if r.ErrorCode == 0 {
			return errors.New("an empty chunk")
		}
		return fmt.Errorf("%s (code %d)", r.Error, r.ErrorCode)
	}
	return fmt.Errorf("unexpected reply %T", res)
}

func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
}

// groupStore is a node's groups of one kind (consumers.Manager,
// consumers.QueueManager), as moving them needs.
type groupStore interface {
	// Release stops a group and names its directory.
	Release(topic, subscription string) (string, error)
	// Dir names a group's directory.
	Dir(topic, subscription string) string
	// Subscriptions lists a topic's groups on this node's disk.
	Subscriptions(topic string) []string
}

func (n *Member) groupsOf(kind string) (groupStore, error) {
	switch kind {
	case GroupStream:
		return n.subs, nil
	case GroupQueue:
		return n.queues, nil
	}
	return nil, api.Errorf(api.CodeInvalidArgument, "no group kind %q", kind)
}

// serveGroupFiles stops a group homed here and lists its directory.
func (n *Member) serveGroupFiles(req *clusterpb.GroupFiles) *clusterpb.GroupFilesReply {
	fail := func(err error) *clusterpb.GroupFilesReply {
		e := api.AsError(err)
		return &clusterpb.GroupFilesReply{ErrorCode: int32(e.Code.Number), Error: e.Message}
	}
	groups, err := n.groupsOf(req.Kind)
	if err != nil {
		return fail(err)
	}
	dir, err := groups.Release(req.Topic, req.Subscription)
	if err != nil {
		return fail(err)
	}
	root := dir
	if req.Generation > 0 {
		// A replicated generation's files, committed to their end.
		if root, err = n.leadAndStopGeneration(req, dir); err != nil {
			return fail(err)
		}
	}
	reply := &clusterpb.GroupFilesReply{}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		sum, err := fileSHA256(path)
		if err != nil {
			return err
		}
		reply.Files = append(reply.Files, &clusterpb.GroupFile{Name: rel, Size: info.Size(), Sha256: sum})
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fail(api.Errorf(api.CodeInternal, "listing %s: %v", dir, err))
	}
	return reply
}

// serveGroupFileChunk reads a chunk of a file of a group's directory.
func (n *Member) serveGroupFileChunk(req *clusterpb.GroupFileChunk) *clusterpb.GroupFileChunkReply {
	fail := func(err error) *clusterpb.GroupFileChunkReply {
		e := api.AsError(err)
		return &clusterpb.GroupFileChunkReply{ErrorCode: int32(e.Code.Number), Error: e.Message}
	}
	groups, err := n.groupsOf(req.Kind)
	if err != nil {
		return fail(err)
	}
	if !filepath.IsLocal(req.Name) || req.Offset < 0 {
		return fail(api.Errorf(api.CodeInvalidArgument, "file %q at %d: not in the group's directory", req.Name, req.Offset))
	}
	dir, err := groups.Release(req.Topic, req.Subscription)
	if err != nil {
		return fail(err)
	}
	return readChunk(filepath.Join(dir, req.Name), req.Offset, req.Max)
}

// serveGroupRelease drops the copy of a group another node took over.
func (n *Member) serveGroupRelease(req *clusterpb.GroupRelease) *clusterpb.GroupReleaseReply {
	groups, err := n.groupsOf(req.Kind)
	if err == nil {
		var dir string
		if dir, err = groups.Release(req.Topic, req.Subscription); err == nil {
			err = os.RemoveAll(dir)
		}
	}
	if err != nil {
		e := api.AsError(err)
		return &clusterpb.GroupReleaseReply{ErrorCode: int32(e.Code.Number), Error: e.Message}
	}
	return &clusterpb.GroupReleaseReply{}
}
