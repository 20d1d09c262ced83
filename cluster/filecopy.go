package cluster

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"golang.org/x/time/rate"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/cluster/clusterpb"
)

// Copying a directory's files from another node, as a consumer group's
// state moves (groups.go) and a sealed unit's copy is made again
// (replicacopy.go): each file in chunks of groupChunk bytes into an
// "<dir>.incoming" directory, synced, which then takes dir's place.

// copyMeter paces the copies of sealed units this node makes (a token
// bucket of Config.ReplicaCopyRate bytes a second, shared by all of them)
// and counts what is left of those under way, what they copied, and the
// files that did not match their checksum.
type copyMeter struct {
	once       sync.Once
	limiter    *rate.Limiter // nil: unbounded
	left       atomic.Int64
	copied     atomic.Int64
	mismatched atomic.Int64
}

// copyLimiter returns the node's copy pacing (nil: unbounded).
func (n *Member) copyLimiter() *rate.Limiter {
	n.copies.once.Do(func() {
		if r := n.cfg.ReplicaCopyRate; r > 0 {
			n.copies.limiter = rate.NewLimiter(rate.Limit(r), int(max(r, groupChunk)))
		}
	})
	return n.copies.limiter
}

// fetchFile copies one file of size bytes from the node of pid to path,
// asking for each chunk with the message chunk(offset) makes. what names
// the copy in errors. A file already at path (a copy cut short, from the
// same source: the caller sees to that) is taken up where it ends. With
// sum (the file's SHA-256, as the source computed it) a copy that does not
// match is removed and refused. paced: the copy is a sealed unit's, paced
// by the node's copy rate and counted.
func (n *Member) fetchFile(pid *actor.PID, path string, size int64, sum []byte, paced bool, what string, chunk func(off int64) proto.Message) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return api.Errorf(api.CodeInternal, "%s: %v", what, err)
	}
	out, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o640)
	if err != nil {
		return api.Errorf(api.CodeInternal, "%s: %v", what, err)
	}
	defer out.Close()
	name := filepath.Base(path)
	h := sha256.New()
	have, err := io.Copy(h, out)
	if err != nil {
		return api.Errorf(api.CodeInternal, "%s: %v", what, err)
	}
	if have > size {
		// Not a beginning of this file: start it again.
		if err := out.Truncate(0); err != nil {
			return api.Errorf(api.CodeInternal, "%s: %v", what, err)
		}
		if _, err := out.Seek(0, io.SeekStart); err != nil {
			return api.Errorf(api.CodeInternal, "%s: %v", what, err)
		}
		h.Reset()
		have = 0
	}
	var limiter *rate.Limiter
	if paced {
		limiter = n.copyLimiter()
		n.copies.left.Add(size - have)
		defer func() { n.copies.left.Add(-(size - have)) }()
	}
	for have < size {
		if limiter != nil {
			if err := limiter.WaitN(context.Background(), int(min(size-have, groupChunk))); err != nil {
				return api.Errorf(api.CodeInternal, "%s: pacing: %v", what, err)
			}
		}
		res, err := n.system.Root.RequestFuture(pid, chunk(have), remoteReadTimeout).Result()
		if err != nil {
			return api.Errorf(api.CodeUnavailable, "%s: copying %s: %v", what, name, err)
		}
		reply, ok := res.(*clusterpb.GroupFileChunkReply)
		if !ok || reply.ErrorCode != 0 || len(reply.Data) == 0 {
			return api.Errorf(api.CodeUnavailable, "%s: copying %s at %d: %v", what, name, have, replyError(res))
		}
		if _, err := out.Write(reply.Data); err != nil {
			return api.Errorf(api.CodeInternal, "%s: %v", what, err)
		}
		h.Write(reply.Data)
		k := int64(len(reply.Data))
		have += k
		if paced {
			n.copies.left.Add(-k)
			n.copies.copied.Add(k)
		}
	}
	if len(sum) > 0 && !bytes.Equal(h.Sum(nil), sum) {
		n.copies.mismatched.Add(1)
		out.Close()
		_ = os.Remove(path)
		n.log.Error("a copied file does not match its source's checksum: removed, to be copied again", "what", what, "file", name, "bytes", size)
		return api.Errorf(api.CodeUnavailable, "%s: the copy of %s does not match its checksum; copy again", what, name)
	}
	if err := out.Sync(); err != nil {
		return api.Errorf(api.CodeInternal, "%s: %v", what, err)
	}
	return out.Close()
}

// fileSHA256 is the SHA-256 of the file at path.
func fileSHA256(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return nil, err
	}
	return h.Sum(nil), nil
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
