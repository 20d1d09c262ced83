package frontend

import (
	"slices"
	"testing"

	"github.com/braidmq/braid/api"
)

// The subscription operations are topic operations: served by the owner
// of the topic, forwarded there from the other nodes.
func TestSubscriptionOpsAreServedByTheTopicsOwner(t *testing.T) {
	ops := (&Frontend{}).adminOps()
	for _, op := range []string{api.AdminSubscriptionList, api.AdminSubscriptionDelete, api.AdminSubscriptionSeek} {
		if ops[op] == nil || !slices.Contains(topicAdminOps, op) {
			t.Errorf("%s: registered %v, a topic operation %v", op, ops[op] != nil, slices.Contains(topicAdminOps, op))
		}
	}
}

// Group records name their kind before the subscription; a name may hold
// the other kind's prefix.
func TestGroupRecordNames(t *testing.T) {
	stream, queue := groupRecordNames([]string{"stream-audit", "queue-work", "stream-queue-x", "queue-stream-y", "orders", "stream-", "queue-a.b"})
	if !slices.Equal(stream, []string{"audit", "queue-x"}) || !slices.Equal(queue, []string{"work", "stream-y"}) {
		t.Fatalf("stream %v queue %v", stream, queue)
	}
}
