package cluster

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/braidmq/braid/cluster/clusterpb"
)

// chunkServer serves chunks of one file, counting the requests; with
// failAt > 0 it answers nothing at or past that offset (the source lost
// mid-copy), and corrupt flips a byte of what it sends.
func chunkServer(t *testing.T, sys *actor.ActorSystem, path string, failAt int64, corrupt bool, asked *atomic.Int64) *actor.PID {
	t.Helper()
	return sys.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		req, ok := ctx.Message().(*clusterpb.UnitFileChunk)
		if !ok {
			return
		}
		asked.Add(1)
		if failAt > 0 && req.Offset >= failAt {
			return // no answer: the copy times out here
		}
		reply := readChunk(path, req.Offset, req.Max)
		if corrupt && len(reply.Data) > 0 {
			reply.Data[0] ^= 0xff
		}
		ctx.Respond(reply)
	}))
}

// A copy checks every file against its source's SHA-256 (a copy that
// differs is removed and refused, and counted); a copy cut short is taken
// up where it ended, from the same source, without fetching again what it
// has; it is paced by the copy rate and counted as it goes.
func TestFetchFileChecksumResumePace(t *testing.T) {
	oldTimeout := remoteReadTimeout
	remoteReadTimeout = 300 * time.Millisecond
	defer func() { remoteReadTimeout = oldTimeout }()
	sys := actor.NewActorSystem()
	defer sys.Shutdown()
	n := New(Config{NodeID: "n1", ReplicaCopyRate: 4 << 20}, nil, nil, sys)
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	data := make([]byte, 3*groupChunk+12345)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	if err := os.WriteFile(src, data, 0o640); err != nil {
		t.Fatal(err)
	}
	sum, err := fileSHA256(src)
	if err != nil {
		t.Fatal(err)
	}
	size := int64(len(data))
	chunk := func(off int64) proto.Message {
		return &clusterpb.UnitFileChunk{Name: "src", Offset: off, Max: groupChunk}
	}
	dst := filepath.Join(dir, "incoming", "copy")

	// Corrupted on the way: refused, removed, counted.
	var asked atomic.Int64
	if err := n.fetchFile(chunkServer(t, sys, src, 0, true, &asked), dst, size, sum, true, "test", chunk); err == nil {
		t.Fatal("a copy that does not match its checksum was taken")
	}
	if _, err := os.Stat(dst); !os.IsNotExist(err) {
		t.Fatalf("the mismatched copy was left: %v", err)
	}
	if n.copies.mismatched.Load() != 1 || n.copies.left.Load() != 0 {
		t.Fatalf("mismatches %d, bytes left %d", n.copies.mismatched.Load(), n.copies.left.Load())
	}

	// Cut short after two chunks: the two stay.
	asked.Store(0)
	if err := n.fetchFile(chunkServer(t, sys, src, 2*groupChunk, false, &asked), dst, size, sum, true, "test", chunk); err == nil {
		t.Fatal("a copy whose source stopped answering succeeded")
	}
	if st, err := os.Stat(dst); err != nil || st.Size() != 2*groupChunk {
		t.Fatalf("after the cut: %v, %v", st, err)
	}
	// Taken up: only what is missing is asked for, and the whole matches.
	asked.Store(0)
	copiedBefore := n.copies.copied.Load()
	if err := n.fetchFile(chunkServer(t, sys, src, 0, false, &asked), dst, size, sum, true, "test", chunk); err != nil {
		t.Fatal(err)
	}
	if asked.Load() != 2 {
		t.Fatalf("the resumed copy asked for %d chunks, want the 2 it lacked", asked.Load())
	}
	got, err := os.ReadFile(dst)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("the copy differs from its source (%v)", err)
	}
	if c := n.copies.copied.Load() - copiedBefore; c != size-2*groupChunk {
		t.Fatalf("counted %d bytes copied, want %d", c, size-2*groupChunk)
	}
	if n.copies.left.Load() != 0 {
		t.Fatalf("%d bytes left after the copies ended", n.copies.left.Load())
	}
	// Paced by the node's copy rate.
	if r := n.copyLimiter(); r == nil || r.Limit() != 4<<20 {
		t.Fatalf("copy pacing %v", r)
	}
}

// What a copy cut short left is kept only for the same source, and only
// the files the source lists.
func TestResumeIncoming(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "unit.incoming")
	files := []*clusterpb.GroupFile{{Name: "a"}, {Name: "b"}}
	if err := resumeIncoming(dir, "n2 i1", files); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"a", "stale"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	if err := resumeIncoming(dir, "n2 i1", files); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "a")); err != nil {
		t.Fatalf("the partial file of the same source was dropped: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "stale")); !os.IsNotExist(err) {
		t.Fatalf("a file the source does not list was kept: %v", err)
	}
	if err := resumeIncoming(dir, "n3 i7", files); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "a")); !os.IsNotExist(err) {
		t.Fatalf("a partial file of another source was kept: %v", err)
	}
}
