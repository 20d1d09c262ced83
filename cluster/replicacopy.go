package cluster

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/braidmq/braid/actors"
	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/cluster/clusterpb"
	"github.com/braidmq/braid/routing"
	"github.com/braidmq/braid/topology"
)

// Copies of sealed replicated units made again (actors/replicated.go
// decides; this is the transport). The new node asks a live replica to
// list the unit's directory (UnitFiles: its log files and raft state,
// once its group there is sealed), copies each file in chunks
// (UnitFileChunk) into "<dir>.incoming", syncs them, and renames the
// directory into place; the home, told it is done (ReplicaCopy's reply),
// names the node in the layout. A copy that fails half-way leaves only
// the ".incoming" directory, which the next try replaces.

// replicaCopyTimeout bounds a whole ReplicaCopy (every bucket of a
// segment) as the home waits for it.
const replicaCopyTimeout = 5 * time.Minute

// CopyReplica has node copy every bucket of a sealed replicated segment
// from sources (actors.Config.CopyReplica).
func (n *Member) CopyReplica(node string, name routing.TopicName, incarnation string, seg topology.SegmentID, buckets int, sources []string) error {
	req := &clusterpb.ReplicaCopy{Topic: name.String(), Incarnation: incarnation, Segment: uint64(seg), Buckets: uint32(buckets), Sources: sources}
	if node == n.nodeID {
		reply := n.serveReplicaCopy(req)
		if reply.ErrorCode != 0 {
			return api.Errorf(api.CodeUnavailable, "%s", reply.Error)
		}
		return nil
	}
	addr, err := n.members.actorAddrOf(node)
	if err != nil {
		return err
	}
	res, err := n.system.Root.RequestFuture(actor.NewPID(addr, unitsActorName), req, replicaCopyTimeout).Result()
	if err != nil {
		return api.Errorf(api.CodeUnavailable, "node %s did not copy segment %d of %s: %v", node, seg, name, err)
	}
	reply, ok := res.(*clusterpb.ReplicaCopyReply)
	if !ok || reply.ErrorCode != 0 {
		return api.Errorf(api.CodeUnavailable, "node %s did not copy segment %d of %s: %v", node, seg, name, replyError(res))
	}
	return nil
}

// serveReplicaCopy copies every bucket of a sealed segment here.
func (n *Member) serveReplicaCopy(req *clusterpb.ReplicaCopy) *clusterpb.ReplicaCopyReply {
	fail := func(err error) *clusterpb.ReplicaCopyReply {
		e := api.AsError(err)
		return &clusterpb.ReplicaCopyReply{ErrorCode: int32(e.Code.Number), Error: e.Message}
	}
	name, err := routing.ParseTopic(req.Topic)
	if err != nil || req.Buckets == 0 || req.Buckets > topology.MaxBuckets || len(req.Sources) == 0 {
		return fail(api.Errorf(api.CodeInvalidArgument, "replica copy of %q segment %d: bad request", req.Topic, req.Segment))
	}
	var total int64
	for b := range int(req.Buckets) {
		key := actors.UnitKey{Topic: name, Segment: topology.SegmentID(req.Segment), Bucket: b}
		dir, err := n.topics.ReplicaCopyDir(key, req.Incarnation)
		if err != nil {
			return fail(err)
		}
		var copied int64
		err = errors.New("no source")
		for _, src := range req.Sources {
			if src == n.nodeID {
				continue
			}
			if copied, err = n.copyUnitFrom(src, req.Incarnation, key, dir); err == nil {
				break
			}
		}
		if err != nil {
			return fail(err)
		}
		n.topics.ReplicaCopied(key, req.Incarnation)
		total += copied
	}
	n.log.Warn("copied a sealed segment from another replica", "topic", req.Topic, "segment", req.Segment, "buckets", req.Buckets, "bytes", total)
	return &clusterpb.ReplicaCopyReply{Bytes: total}
}

// copyUnitFrom copies the directory of one unit from node src into dir.
func (n *Member) copyUnitFrom(src, incarnation string, key actors.UnitKey, dir string) (int64, error) {
	addr, err := n.members.actorAddrOf(src)
	if err != nil {
		return 0, err
	}
	pid := actor.NewPID(addr, unitsActorName)
	res, err := n.system.Root.RequestFuture(pid, &clusterpb.UnitFiles{Topic: key.Topic.String(), Incarnation: incarnation,
		Segment: uint64(key.Segment), Bucket: uint32(key.Bucket)}, remoteReadTimeout).Result()
	if err != nil {
		return 0, api.Errorf(api.CodeUnavailable, "%s: node %s did not list its copy: %v", key, src, err)
	}
	list, ok := res.(*clusterpb.GroupFilesReply)
	if !ok || list.ErrorCode != 0 {
		return 0, api.Errorf(api.CodeUnavailable, "%s: node %s did not list its copy: %v", key, src, replyError(res))
	}
	incoming := dir + ".incoming"
	if err := resumeIncoming(incoming, src+" "+n.members.liveView()[src].Incarnation, list.Files); err != nil {
		return 0, api.Errorf(api.CodeInternal, "%s: %v", key, err)
	}
	var bytes int64
	for _, f := range list.Files {
		if !filepath.IsLocal(f.Name) || strings.ContainsRune(f.Name, filepath.Separator) || f.Name == copySourceFile {
			return 0, api.Errorf(api.CodeInternal, "%s: node %s named a file outside the unit's directory: %q", key, src, f.Name)
		}
		err := n.fetchFile(pid, filepath.Join(incoming, f.Name), f.Size, f.Sha256, true, key.String(), func(off int64) proto.Message {
			return &clusterpb.UnitFileChunk{Topic: key.Topic.String(), Incarnation: incarnation, Segment: uint64(key.Segment),
				Bucket: uint32(key.Bucket), Name: f.Name, Offset: off, Max: groupChunk}
		})
		if err != nil {
			return 0, err
		}
		bytes += f.Size
	}
	if err := os.Remove(filepath.Join(incoming, copySourceFile)); err != nil {
		return 0, api.Errorf(api.CodeInternal, "%s: %v", key, err)
	}
	if err := installDir(incoming, dir); err != nil {
		return 0, api.Errorf(api.CodeInternal, "%s: %v", key, err)
	}
	return bytes, nil
}

// copySourceFile, in a copy's ".incoming" directory, names the node (and
// its incarnation) the files come from: a copy cut short is taken up
// where it ended only from the same source (another replica's files may
// differ byte for byte: their raft state, where their log files roll).
const copySourceFile = ".copy-source"

// resumeIncoming readies incoming for a copy from source of files: what a
// copy cut short left there is kept if it came from source (files not in
// the list removed), else the directory starts empty.
func resumeIncoming(incoming, source string, files []*clusterpb.GroupFile) error {
	marker := filepath.Join(incoming, copySourceFile)
	if b, err := os.ReadFile(marker); err != nil || string(b) != source {
		if err := os.RemoveAll(incoming); err != nil {
			return err
		}
		if err := os.MkdirAll(incoming, 0o750); err != nil {
			return err
		}
		return os.WriteFile(marker, []byte(source), 0o640)
	}
	entries, err := os.ReadDir(incoming)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.Name() != copySourceFile && !slices.ContainsFunc(files, func(f *clusterpb.GroupFile) bool { return f.Name == e.Name() }) {
			if err := os.RemoveAll(filepath.Join(incoming, e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}

// unitDirOf returns this node's sealed copy's directory of req's unit.
func (n *Member) unitDirOf(topic, incarnation string, seg uint64, bucket uint32) (string, error) {
	name, err := routing.ParseTopic(topic)
	if err != nil {
		return "", api.Errorf(api.CodeInvalidArgument, "%v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), remoteReadTimeout)
	defer cancel()
	return n.topics.SealedReplicaDir(ctx, actors.UnitKey{Topic: name, Segment: topology.SegmentID(seg), Bucket: int(bucket)}, incarnation)
}

// serveUnitFiles lists the files of this node's sealed copy of a unit.
func (n *Member) serveUnitFiles(req *clusterpb.UnitFiles) *clusterpb.GroupFilesReply {
	dir, err := n.unitDirOf(req.Topic, req.Incarnation, req.Segment, req.Bucket)
	if err != nil {
		e := api.AsError(err)
		return &clusterpb.GroupFilesReply{ErrorCode: int32(e.Code.Number), Error: e.Message}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return &clusterpb.GroupFilesReply{ErrorCode: int32(api.CodeInternal.Number), Error: err.Error()}
	}
	reply := &clusterpb.GroupFilesReply{}
	for _, e := range entries {
		if e.IsDir() || strings.HasSuffix(e.Name(), ".TEMP") {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue
		}
		sum, err := fileSHA256(filepath.Join(dir, e.Name()))
		if err != nil {
			return &clusterpb.GroupFilesReply{ErrorCode: int32(api.CodeInternal.Number), Error: err.Error()}
		}
		reply.Files = append(reply.Files, &clusterpb.GroupFile{Name: e.Name(), Size: info.Size(), Sha256: sum})
	}
	return reply
}

// serveUnitFileChunk reads a chunk of a file of this node's sealed copy.
func (n *Member) serveUnitFileChunk(req *clusterpb.UnitFileChunk) *clusterpb.GroupFileChunkReply {
	fail := func(err error) *clusterpb.GroupFileChunkReply {
		e := api.AsError(err)
		return &clusterpb.GroupFileChunkReply{ErrorCode: int32(e.Code.Number), Error: e.Message}
	}
	if !filepath.IsLocal(req.Name) || strings.ContainsRune(req.Name, filepath.Separator) || req.Offset < 0 {
		return fail(api.Errorf(api.CodeInvalidArgument, "file %q at %d: not in the unit's directory", req.Name, req.Offset))
	}
	dir, err := n.unitDirOf(req.Topic, req.Incarnation, req.Segment, req.Bucket)
	if err != nil {
		return fail(err)
	}
	return readChunk(filepath.Join(dir, req.Name), req.Offset, req.Max)
}
