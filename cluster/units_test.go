package cluster

import (
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/cluster/clusterpb"
)

// A node's actor listener starts before its topics are recovered: another
// node's read that comes meanwhile waits for them and, if they take too
// long, is refused UNAVAILABLE (it read a nil topic manager and crashed
// the node, found by the cluster specs: a restarted node was read at once).
func TestUnitRequestsWaitForTheTopics(t *testing.T) {
	old := attachPatience
	attachPatience = 50 * time.Millisecond
	defer func() { attachPatience = old }()
	sys := actor.NewActorSystem()
	defer sys.Shutdown()
	n := New(Config{NodeID: "n1"}, nil, nil, sys)
	pid := sys.Root.Spawn(actor.PropsFromFunc(n.receiveUnits))
	res, err := sys.Root.RequestFuture(pid, &clusterpb.UnitRead{Topic: "topic://t/n/x"}, 10*time.Second).Result()
	if err != nil {
		t.Fatal(err)
	}
	r, ok := res.(*clusterpb.UnitReadReply)
	if !ok || r.ErrorCode != int32(api.CodeUnavailable.Number) {
		t.Fatalf("a read before the topics: %+v", res)
	}
}
