package cluster

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/braidmq/braid/internal/labels"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"

	"github.com/braidmq/braid/actors"
	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/cluster/clusterpb"
	"github.com/braidmq/braid/routing"
	"github.com/braidmq/braid/topology"
	"github.com/braidmq/braid/wal"
)

// Reads across nodes. A topic's layout may name segments on other nodes
// (sealed on a node that was lost, whose successors live elsewhere). The
// node serving the topic reads their bucket logs from their owner with an
// actor message: protoactor remote carries a clusterpb.UnitRead to the
// owner's units actor (unitsActorName), which answers a
// clusterpb.UnitReadReply. Remote carries protobuf only (anything else is
// dropped silently), so these are the only messages that cross nodes.

// unitsActorName names every node's actor that serves unit reads.
const unitsActorName = "braid-units"

// startRemote starts protoactor remote on the actor listener and spawns
// the units actor; a node without a cluster runs none.
func (n *Member) StartRemote() error {
	addr := n.cfg.ActorListen
	if addr == "" {
		if n.cfg.ClusterListen == "" {
			return nil
		}
		host, _, err := net.SplitHostPort(n.cfg.ClusterListen)
		if err != nil {
			return fmt.Errorf("cluster listen %q: %w", n.cfg.ClusterListen, err)
		}
		addr = net.JoinHostPort(host, "0")
	}
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("actor listen %q: %w", addr, err)
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return fmt.Errorf("actor listen %q: bad port", addr)
	}
	if port > 0 {
		// remote.Start panics when it cannot listen: try the address first.
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("actor listener cannot listen on %s (--actor-listen): %w", addr, err)
		}
		l.Close()
	}
	r := remote.NewRemote(n.system, remote.Configure(host, port, remote.WithDialOptions(n.dialOptions()...)))
	r.Start()
	n.remote = r
	props := actor.PropsFromFunc(n.receiveUnits, actor.WithDispatcher(labels.Dispatcher("braid_actor", unitsActorName)))
	if _, err := n.system.Root.SpawnNamed(props, unitsActorName); err != nil {
		return fmt.Errorf("spawning the units actor: %w", err)
	}
	if err := n.startReplicas(); err != nil {
		return fmt.Errorf("spawning the raft actor: %w", err)
	}
	return nil
}

// dialOptions are the actor transport's: plain gRPC, each peer's address
// dialled as it is or as the configuration maps it (ActorDial).
func (n *Member) dialOptions() []grpc.DialOption {
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if len(n.cfg.ActorDial) == 0 {
		return opts
	}
	via := maps.Clone(n.cfg.ActorDial)
	var d net.Dialer
	return append(opts, grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
		if to, ok := via[addr]; ok {
			addr = to
		}
		return d.DialContext(ctx, "tcp", addr)
	}))
}

// actorAddr is the address other nodes reach this node's actors at ("":
// no remote).
func (n *Member) ActorAddr() string {
	if n.remote == nil {
		return ""
	}
	return n.system.Address()
}

// receiveUnits serves what other nodes ask of this one (unit reads, a
// group's state), each on its own goroutine (it may wait for the disk).
func (n *Member) receiveUnits(ctx actor.Context) {
	var serve func() any
	var refuse func(e *api.Error) any // the reply of its type that says e
	switch req := ctx.Message().(type) {
	case *clusterpb.UnitRead:
		serve = func() any { return n.serveUnitRead(req) }
		refuse = func(e *api.Error) any { return unitReadError(e) }
	case *clusterpb.GroupFiles:
		serve = func() any { return n.serveGroupFiles(req) }
		refuse = func(e *api.Error) any {
			return &clusterpb.GroupFilesReply{ErrorCode: int32(e.Code.Number), Error: e.Message}
		}
	case *clusterpb.GroupFileChunk:
		serve = func() any { return n.serveGroupFileChunk(req) }
		refuse = func(e *api.Error) any {
			return &clusterpb.GroupFileChunkReply{ErrorCode: int32(e.Code.Number), Error: e.Message}
		}
	case *clusterpb.GroupRelease:
		serve = func() any { return n.serveGroupRelease(req) }
		refuse = func(e *api.Error) any {
			return &clusterpb.GroupReleaseReply{ErrorCode: int32(e.Code.Number), Error: e.Message}
		}
	case *clusterpb.GroupAdopt:
		serve = func() any { return n.serveGroupAdopt(req) }
		refuse = func(e *api.Error) any {
			return &clusterpb.GroupAdoptReply{ErrorCode: int32(e.Code.Number), Error: e.Message}
		}
	case *clusterpb.UnitAppend:
		serve = func() any { return n.serveUnitAppend(req) }
		refuse = func(e *api.Error) any {
			return &clusterpb.UnitAppendReply{ErrorCode: int32(e.Code.Number), Error: e.Message}
		}
	case *clusterpb.UnitFiles:
		serve = func() any { return n.serveUnitFiles(req) }
		refuse = func(e *api.Error) any {
			return &clusterpb.GroupFilesReply{ErrorCode: int32(e.Code.Number), Error: e.Message}
		}
	case *clusterpb.UnitFileChunk:
		serve = func() any { return n.serveUnitFileChunk(req) }
		refuse = func(e *api.Error) any {
			return &clusterpb.GroupFileChunkReply{ErrorCode: int32(e.Code.Number), Error: e.Message}
		}
	case *clusterpb.ReplicaCopy:
		serve = func() any { return n.serveReplicaCopy(req) }
		refuse = func(e *api.Error) any {
			return &clusterpb.ReplicaCopyReply{ErrorCode: int32(e.Code.Number), Error: e.Message}
		}
	case *clusterpb.ReplicaDamaged:
		serve = func() any { return n.serveReplicaDamaged(req) }
		refuse = func(e *api.Error) any {
			return &clusterpb.ReplicaDamagedReply{ErrorCode: int32(e.Code.Number), Error: e.Message}
		}
	case *clusterpb.TopicDrop:
		serve = func() any { return n.serveTopicDrop(req) }
		refuse = func(e *api.Error) any {
			return &clusterpb.TopicDropReply{ErrorCode: int32(e.Code.Number), Error: e.Message}
		}
	default:
		return
	}
	sender := ctx.Sender()
	root := ctx.ActorSystem().Root
	go func() {
		// The actor listener starts before the node's topics are
		// recovered (its address goes in the lease): a request that comes
		// meanwhile waits for them, then is refused.
		var reply any
		select {
		case <-n.attached:
			reply = serve()
		case <-time.After(attachPatience):
			reply = refuse(api.Errorf(api.CodeUnavailable, "node %s is starting: its topics are not recovered yet; retry", n.nodeID))
		}
		if sender != nil {
			root.Send(sender, reply)
		}
	}()
}

func (n *Member) serveUnitRead(req *clusterpb.UnitRead) *clusterpb.UnitReadReply {
	name, err := routing.ParseTopic(req.Topic)
	if err != nil {
		return unitReadError(api.Errorf(api.CodeInvalidName, "%v", err))
	}
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	d, err := n.topics.ServeUnitRead(ctx, actors.UnitRead{Topic: name, Incarnation: req.Incarnation, Segment: topology.SegmentID(req.Segment),
		Bucket: int(req.Bucket), From: req.From, Max: int(req.Max), MaxBytes: int(req.MaxBytes), BoundsOnly: req.BoundsOnly, ChecksumTo: req.ChecksumTo,
		Sealed: req.Sealed})
	if err != nil {
		return unitReadError(err)
	}
	return &clusterpb.UnitReadReply{First: d.First, Next: d.Next, Bytes: d.Bytes, Records: toProtoRecords(d.Records), Checksum: d.Checksum}
}

func unitReadError(err error) *clusterpb.UnitReadReply {
	e := api.AsError(err)
	return &clusterpb.UnitReadReply{ErrorCode: int32(e.Code.Number), Error: e.Message}
}

// remoteUnits reads units on other nodes (actors.RemoteUnits).
type remoteUnits struct{ n *Member }

// remoteUnits returns what reads units on other nodes (nil without a
// cluster: every segment is here).
func (n *Member) RemoteUnits() actors.RemoteUnits {
	if n.remote == nil {
		return nil
	}
	return remoteUnits{n}
}

// ReadUnit asks the owner's units actor for a read. An owner whose lease
// lapsed is not asked: its data is unavailable until it returns.
func (r remoteUnits) ReadUnit(ctx context.Context, owner string, req actors.UnitRead) (actors.UnitData, error) {
	n := r.n
	addr, err := n.members.actorAddrOf(owner)
	if err != nil {
		return actors.UnitData{}, err
	}
	timeout := remoteReadTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(dl))
	}
	msg := &clusterpb.UnitRead{Topic: req.Topic.String(), Incarnation: req.Incarnation, Segment: uint64(req.Segment), Bucket: uint32(req.Bucket),
		From: req.From, Max: uint32(max(req.Max, 0)), MaxBytes: uint32(max(req.MaxBytes, 0)), BoundsOnly: req.BoundsOnly,
		ChecksumTo: req.ChecksumTo, Sealed: req.Sealed}
	res, err := n.system.Root.RequestFuture(actor.NewPID(addr, unitsActorName), msg, timeout).Result()
	if err != nil {
		if errors.Is(err, actor.ErrTimeout) {
			return actors.UnitData{}, api.Errorf(api.CodeUnavailable, "node %s did not answer a read of segment %d of %s in %s", owner, req.Segment, req.Topic, timeout)
		}
		return actors.UnitData{}, api.Errorf(api.CodeUnavailable, "reading segment %d of %s on node %s: %v", req.Segment, req.Topic, owner, err)
	}
	reply, ok := res.(*clusterpb.UnitReadReply)
	if !ok {
		return actors.UnitData{}, api.Errorf(api.CodeInternal, "node %s answered a unit read with %T", owner, res)
	}
	if reply.ErrorCode != 0 {
		return actors.UnitData{}, remoteError(owner, reply.ErrorCode, reply.Error)
	}
	return actors.UnitData{First: reply.First, Next: reply.Next, Bytes: reply.Bytes, Records: fromProtoRecords(reply.Records), Checksum: reply.Checksum}, nil
}

// remoteReadTimeout bounds a read on another node.
var remoteReadTimeout = 5 * time.Second

// AppendUnit sends an append to the owner's units actor (see
// actors.UnitAppend); done runs on a goroutine of its own. The request is
// sent before AppendUnit returns, so appends to one owner go in order.
func (r remoteUnits) AppendUnit(owner string, req actors.UnitAppend, done func(first uint64, err error)) {
	n := r.n
	addr, err := n.members.actorAddrOf(owner)
	if err != nil {
		go done(0, err)
		return
	}
	msg := &clusterpb.UnitAppend{Topic: req.Topic.String(), Incarnation: req.Incarnation, Segment: uint64(req.Segment), Bucket: uint32(req.Bucket),
		Records: toProtoRecords(req.Records), Durability: req.Options.Durability.String(),
		SyncIntervalMs: req.Options.SyncInterval.Milliseconds(), SegmentBytes: int64(req.Options.SegmentBytes)}
	if !req.Deadline.IsZero() {
		msg.DeadlineUnixMs = req.Deadline.UnixMilli()
	}
	f := n.system.Root.RequestFuture(actor.NewPID(addr, unitsActorName), msg, remoteAppendTimeout)
	go func() {
		res, err := f.Result()
		if err != nil {
			done(0, api.Errorf(api.CodeUnavailable, "node %s did not take an append to segment %d of %s: %v; resend", owner, req.Segment, req.Topic, err))
			return
		}
		reply, ok := res.(*clusterpb.UnitAppendReply)
		if !ok {
			done(0, api.Errorf(api.CodeInternal, "node %s answered an append with %T", owner, res))
			return
		}
		if reply.ErrorCode != 0 {
			done(0, remoteError(owner, reply.ErrorCode, reply.Error))
			return
		}
		done(reply.First, nil)
	}()
}

// remoteAppendTimeout bounds an append on another node.
const remoteAppendTimeout = 5 * time.Second

// DropTopic tells owner that topic was deleted.
func (r remoteUnits) DropTopic(ctx context.Context, owner string, topic routing.TopicName, incarnation string, segments []topology.SegmentID) error {
	n := r.n
	addr, err := n.members.actorAddrOf(owner)
	if err != nil {
		return err
	}
	timeout := remoteReadTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(dl))
	}
	res, err := n.system.Root.RequestFuture(actor.NewPID(addr, unitsActorName), &clusterpb.TopicDrop{Topic: topic.String(), Incarnation: incarnation, Segments: segmentIDs(segments)}, timeout).Result()
	if err != nil {
		return api.Errorf(api.CodeUnavailable, "node %s: %v", owner, err)
	}
	reply, ok := res.(*clusterpb.TopicDropReply)
	if !ok {
		return api.Errorf(api.CodeInternal, "node %s answered a topic drop with %T", owner, res)
	}
	if reply.ErrorCode != 0 {
		return remoteError(owner, reply.ErrorCode, reply.Error)
	}
	return nil
}

// remoteError is the error another node answered with.
func remoteError(owner string, code int32, msg string) error {
	c, ok := api.CodeByNumber(int(code))
	if !ok {
		c = api.CodeInternal
	}
	return api.Errorf(c, "node %s: %s", owner, msg)
}

func (n *Member) serveUnitAppend(req *clusterpb.UnitAppend) *clusterpb.UnitAppendReply {
	fail := func(err error) *clusterpb.UnitAppendReply {
		e := api.AsError(err)
		return &clusterpb.UnitAppendReply{ErrorCode: int32(e.Code.Number), Error: e.Message}
	}
	name, err := routing.ParseTopic(req.Topic)
	if err != nil {
		return fail(api.Errorf(api.CodeInvalidName, "%v", err))
	}
	durability, err := wal.ParseDurability(req.Durability)
	if err != nil {
		return fail(api.Errorf(api.CodeInvalidArgument, "%v", err))
	}
	if req.SegmentBytes < 0 || req.SyncIntervalMs < 0 {
		return fail(api.Errorf(api.CodeInvalidArgument, "negative log options"))
	}
	var deadline time.Time
	if req.DeadlineUnixMs > 0 {
		deadline = time.UnixMilli(req.DeadlineUnixMs)
	}
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	first, err := n.topics.ServeUnitAppend(ctx, actors.UnitAppend{Topic: name, Incarnation: req.Incarnation, Segment: topology.SegmentID(req.Segment),
		Bucket: int(req.Bucket), Records: fromProtoRecords(req.Records),
		Options:  wal.Options{Durability: durability, SyncInterval: time.Duration(req.SyncIntervalMs) * time.Millisecond, SegmentBytes: int(req.SegmentBytes)},
		Deadline: deadline})
	if err != nil {
		return fail(err)
	}
	return &clusterpb.UnitAppendReply{First: first}
}

func (n *Member) serveTopicDrop(req *clusterpb.TopicDrop) *clusterpb.TopicDropReply {
	name, err := routing.ParseTopic(req.Topic)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
		defer cancel()
		ids := make([]topology.SegmentID, len(req.Segments))
		for i, id := range req.Segments {
			ids[i] = topology.SegmentID(id)
		}
		err = n.topics.DropTopic(ctx, name, req.Incarnation, ids)
	}
	if err != nil {
		e := api.AsError(err)
		return &clusterpb.TopicDropReply{ErrorCode: int32(e.Code.Number), Error: e.Message}
	}
	return &clusterpb.TopicDropReply{}
}

func toProtoRecords(recs []wal.Record) []*clusterpb.Record {
	out := make([]*clusterpb.Record, len(recs))
	for i, r := range recs {
		pr := &clusterpb.Record{Timestamp: r.Timestamp, Key: r.Key, Payload: r.Payload}
		for _, h := range r.Headers {
			pr.Headers = append(pr.Headers, &clusterpb.Header{Key: h.Key, Value: h.Value})
		}
		out[i] = pr
	}
	return out
}

func fromProtoRecords(prs []*clusterpb.Record) []wal.Record {
	out := make([]wal.Record, len(prs))
	for i, pr := range prs {
		rec := wal.Record{Timestamp: pr.Timestamp, Key: pr.Key, Payload: pr.Payload}
		for _, h := range pr.Headers {
			rec.Headers = append(rec.Headers, wal.Header{Key: h.Key, Value: h.Value})
		}
		out[i] = rec
	}
	return out
}

func segmentIDs(ids []topology.SegmentID) []uint64 {
	out := make([]uint64, len(ids))
	for i, id := range ids {
		out[i] = uint64(id)
	}
	return out
}

// attachPatience bounds how long a request of another node waits for
// this one's topics while it starts (a variable for tests).
var attachPatience = 10 * time.Second
