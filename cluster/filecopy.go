package cluster

import (
	"errors"
	"io"
	"os"
	"path/filepath"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/cluster/clusterpb"
)

// Copying a directory's files from another node, as a consumer group's
// state moves (groups.go) and a sealed unit's copy is made again
// (replicacopy.go): each file in chunks of groupChunk bytes into an
// "<dir>.incoming" directory, synced, which then takes dir's place.

// fetchFile copies one file of size bytes from the node of pid to path,
// asking for each chunk with the message chunk(offset) makes. what names
// the copy in errors.
func (n *Member) fetchFile(pid *actor.PID, path string, size int64, what string, chunk func(off int64) proto.Message) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return api.Errorf(api.CodeInternal, "%s: %v", what, err)
	}
	out, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o640)
	if err != nil {
		return api.Errorf(api.CodeInternal, "%s: %v", what, err)
	}
	defer out.Close()
	name := filepath.Base(path)
	for off := int64(0); off < size; {
		res, err := n.system.Root.RequestFuture(pid, chunk(off), remoteReadTimeout).Result()
		if err != nil {
			return api.Errorf(api.CodeUnavailable, "%s: copying %s: %v", what, name, err)
		}
		reply, ok := res.(*clusterpb.GroupFileChunkReply)
		if !ok || reply.ErrorCode != 0 || len(reply.Data) == 0 {
			return api.Errorf(api.CodeUnavailable, "%s: copying %s at %d: %v", what, name, off, replyError(res))
		}
		if _, err := out.Write(reply.Data); err != nil {
			return api.Errorf(api.CodeInternal, "%s: %v", what, err)
		}
		off += int64(len(reply.Data))
	}
	if err := out.Sync(); err != nil {
		return api.Errorf(api.CodeInternal, "%s: %v", what, err)
	}
	return out.Close()
}

// readChunk answers a request for up to max bytes of the file at path
// from off.
func readChunk(path string, off int64, max uint32) *clusterpb.GroupFileChunkReply {
	fail := func(err error) *clusterpb.GroupFileChunkReply {
		e := api.AsError(err)
		return &clusterpb.GroupFileChunkReply{ErrorCode: int32(e.Code.Number), Error: e.Message}
	}
	f, err := os.Open(path)
	if err != nil {
		return fail(api.Errorf(api.CodeNotFound, "%v", err))
	}
	defer f.Close()
	buf := make([]byte, min(int(max), groupChunk))
	k, err := f.ReadAt(buf, off)
	if err != nil && !errors.Is(err, io.EOF) {
		return fail(api.Errorf(api.CodeInternal, "%v", err))
	}
	return &clusterpb.GroupFileChunkReply{Data: buf[:k]}
}

// installDir puts the copy in incoming in dir's place (removing what dir
// held) and makes the rename durable.
func installDir(incoming, dir string) error {
	if err := os.MkdirAll(incoming, 0o750); err != nil {
		return err
	}
	syncDir(incoming)
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o750); err != nil {
		return err
	}
	if err := os.Rename(incoming, dir); err != nil {
		return err
	}
	syncDir(filepath.Dir(dir))
	return nil
}
