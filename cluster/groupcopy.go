package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/cluster/clusterpb"
	"github.com/braidmq/braid/meta"
	"github.com/braidmq/braid/routing"
	"github.com/braidmq/braid/topology"
	"github.com/braidmq/braid/wal"
)

// A replicated group served by a node that holds no copy of its state (a
// topic moved outside its replicas, a node back with an empty disk as the
// group's home): one of its replicas takes the lead of the group's
// generation, so that its log is committed to its end, stops its replica
// and sends the generation's files (GroupFiles with a generation, over
// the same chunked copy as a group's move); the node opens them as the
// group's log and moves it at once into a new generation on the replicas
// it wants (itself among them), whose first records are those.

// leadAndStopGeneration serves a request for the files of generation
// req.Generation of a group on one of its replicas: it takes the lead,
// waits for its log to be committed to its end, stops its replica and
// returns the generation's directory.
func (n *Member) leadAndStopGeneration(req *clusterpb.GroupFiles, dir string) (string, error) {
	tn, err := routing.ParseTopic(req.Topic)
	if err != nil {
		return "", api.Errorf(api.CodeInvalidName, "%v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), remoteReadTimeout)
	rec, _, err := n.meta.GroupHome(ctx, tn, req.Kind, req.Subscription)
	cancel()
	if err != nil {
		return "", api.Errorf(api.CodeUnavailable, "subscription %q of %s: its record could not be read: %v", req.Subscription, req.Topic, err)
	}
	if rec.Generation != req.Generation {
		return "", api.Errorf(api.CodeUnavailable, "subscription %q of %s is at generation %d, not %d", req.Subscription, req.Topic, rec.Generation, req.Generation)
	}
	name := groupRaftName(req.Kind, req.Topic, req.Subscription, req.Generation)
	gdir := generationDir(dir, req.Generation)
	r, err := n.startGroupReplica(name, gdir, rec.Replicas)
	if err != nil {
		return "", api.Errorf(api.CodeUnavailable, "subscription %q of %s: %v", req.Subscription, req.Topic, err)
	}
	err = r.group.LeadCommitted(groupLeadTimeout)
	if err == nil {
		// Its raft state reaches its state file from the node's state
		// journal: the copy carries it.
		err = r.storage.SaveState()
	}
	n.stopGroupReplica(name)
	if err != nil {
		return "", api.Errorf(api.CodeUnavailable, "subscription %q of %s: %v", req.Subscription, req.Topic, err)
	}
	return gdir, nil
}

// copyGeneration fetches the files of the generation rec names from the
// first of its replicas that sends them, into dir.
func (n *Member) copyGeneration(ctx context.Context, name routing.TopicName, kind, sub, dir string, rec meta.SubscriptionRecord) error {
	lastErr := errors.New("none of them is live")
	for _, r := range rec.Replicas {
		if r.Node == n.nodeID {
			continue
		}
		addr, err := n.members.actorAddrOf(r.Node)
		if err != nil {
			lastErr = err
			continue
		}
		pid := actor.NewPID(addr, unitsActorName)
		res, err := n.system.Root.RequestFuture(pid, &clusterpb.GroupFiles{Kind: kind, Topic: name.String(), Subscription: sub,
			Generation: rec.Generation}, groupLeadTimeout+remoteReadTimeout).Result()
		if err != nil {
			lastErr = fmt.Errorf("node %s: %w", r.Node, err)
			continue
		}
		list, ok := res.(*clusterpb.GroupFilesReply)
		if !ok || list.ErrorCode != 0 {
			lastErr = fmt.Errorf("node %s: %w", r.Node, replyError(res))
			continue
		}
		if err := n.fetchGroupFiles(pid, name, kind, sub, dir, list.Files); err != nil {
			lastErr = fmt.Errorf("node %s: %w", r.Node, err)
			continue
		}
		n.log.Warn("consumer group state copied from one of its replicas: this node held none", "topic", name.String(),
			"subscription", sub, "kind", kind, "from", r.Node, "generation", rec.Generation, "files", len(list.Files))
		return nil
	}
	return api.Errorf(api.CodeUnavailable, "subscription %q of %s keeps its state on other nodes, and none sent it: %v", sub, name, lastErr)
}

// fetchGroupFiles copies files of a group's directory on another node
// (pid) into dir, through dir.incoming.
func (n *Member) fetchGroupFiles(pid *actor.PID, name routing.TopicName, kind, sub, dir string, files []*clusterpb.GroupFile) error {
	incoming := dir + ".incoming"
	if err := os.RemoveAll(incoming); err != nil {
		return api.Errorf(api.CodeInternal, "subscription %q: %v", sub, err)
	}
	for _, f := range files {
		if !filepath.IsLocal(f.Name) {
			return api.Errorf(api.CodeInternal, "subscription %q: a file outside the group's directory: %q", sub, f.Name)
		}
		err := n.fetchFile(pid, filepath.Join(incoming, f.Name), f.Size, f.Sha256, false, fmt.Sprintf("subscription %q", sub), func(off int64) proto.Message {
			return &clusterpb.GroupFileChunk{Kind: kind, Topic: name.String(), Subscription: sub, Name: f.Name, Offset: off, Max: groupChunk}
		})
		if err != nil {
			return err
		}
	}
	if err := installDir(incoming, dir); err != nil {
		return api.Errorf(api.CodeInternal, "subscription %q: %v", sub, err)
	}
	return nil
}

// adopt opens the copy of generation rec names that copyGeneration
// fetched (this node is none of its replicas), moves its records into a
// new generation on the replicas wanted, and replays them into apply.
func (l *groupLog) adopt(rec meta.SubscriptionRecord, apply func([]byte) error) (int, error) {
	gdir := generationDir(l.dir, rec.Generation)
	if _, err := os.Stat(gdir); err != nil {
		return 0, api.Errorf(api.CodeUnavailable, "subscription %q of %s keeps its state on other nodes, and this node holds no copy of generation %d",
			l.sub, l.name, rec.Generation)
	}
	log, err := wal.Open(gdir, wal.Options{Durability: wal.DurabilityAlways})
	if err != nil {
		return 0, err
	}
	recs, err := readStateRecords(log, log.FirstOffset(), log.NextOffset())
	log.Close()
	if err != nil {
		return 0, fmt.Errorf("reading the copy of generation %d of subscription %q: %w", rec.Generation, l.sub, err)
	}
	want, err := l.n.groupReplicasWanted(l.name.String())
	if err != nil {
		return 0, err
	}
	if want == nil {
		want = []topology.Replica{{Node: l.n.nodeID, Incarnation: l.n.cfg.Incarnation}}
	}
	l.gen = rec.Generation
	if err := l.startGeneration(recs, want); err != nil {
		return 0, err
	}
	for i, r := range recs {
		if err := apply(r.Payload); err != nil {
			return 0, fmt.Errorf("replaying the copy of generation %d of subscription %q at record %d: %w", rec.Generation, l.sub, i, err)
		}
	}
	return len(recs), nil
}
