package consumers

import (
	"time"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/topology"
)

// The messages a group actor handles. They are local Go values, never sent
// across nodes (protoactor remote would drop them silently: they are not
// protobuf). Each carries a Reply callback that the group calls exactly once,
// from its own goroutine, so that a NATS handler can hand a request over and
// return at once. A Reply must not block for long; a nil Reply is allowed.
//
// Manager validates requests before it sends them; a group trusts the
// ranges of Max, MaxBytes and Wait, and the consumer name.

// Join adds a consumer to the group, or refreshes one already there. The
// first join creates the subscription, reading from Start.
type Join struct {
	Consumer string
	// Start is api.StartEarliest ("" too) or api.StartLatest; it is used
	// only by the join that creates the subscription.
	Start string
	// ReadCompacted: the subscription reads the topic's compacted view;
	// it is set by the join that creates it, and a join that asks
	// otherwise is refused.
	ReadCompacted bool
	// SessionTimeout after which a silent consumer is dead; 0 means the
	// manager's default (10s).
	SessionTimeout time.Duration
	Reply          func(api.JoinReply, error)
}

// Fetch asks for messages of the units assigned to Consumer. When there is
// nothing and Wait > 0, the group holds the fetch until something arrives or
// Wait expires (then the reply is empty). assigned is how many units the
// consumer is assigned after the fetch (see api.FetchReplyHeaderAssigned).
type Fetch struct {
	Consumer string
	Max      int // messages, >= 1
	MaxBytes int // of payload, >= 1; at least one message when one is available
	Wait     time.Duration
	// Resync rewinds delivery to Received (the next offset the consumer
	// expects, per unit) or to the ack cursor of the units not listed; see
	// api.FetchRequest. Stream subscriptions only.
	Resync   bool
	Received map[topology.Unit]uint64
	Reply    func(msgs []api.Message, assigned int, err error)
}

// Ack acknowledges, for each position, its unit up to and including its
// offset. The reply comes once the acknowledgement is durable. An invalid
// position rejects the whole request and changes nothing.
type Ack struct {
	Consumer string
	Acks     []api.Position
	Reply    func(error)
}

// Leave removes a consumer at once: what it was delivered and did not
// acknowledge is redelivered to the consumers that take its units. A
// previous owner awaited since a restart that leaves releases its units at
// once. Leaving twice, or as an unknown consumer, succeeds.
type Leave struct {
	Consumer string
	Reply    func(error)
}

// GetStats asks for a Stats of the group.
type GetStats struct {
	Reply func(Stats, error)
}

// Stats describes one subscription at one moment.
type Stats struct {
	Topic        string
	Subscription string
	// Created is false until the first join.
	Created bool
	Start   string // "earliest" or "latest"
	// ReadCompacted: the subscription reads the topic's compacted view.
	ReadCompacted bool
	// Epoch is the layout epoch the figures were computed at.
	Epoch     uint64
	Consumers []ConsumerStats // sorted by name
	// Backlog is the number of messages not yet acknowledged, summed over
	// the units of every segment that is neither drained nor deleted.
	Backlog uint64
	// Drained lists the segments this subscription has drained, ascending.
	Drained []topology.SegmentID
	// Readable lists the units the ordering rule lets the group assign now.
	Readable []topology.Unit
	// Withheld lists the units the ordering rule holds back until their
	// ancestors are drained.
	Withheld []topology.Unit
	// PendingHandoffs counts units assigned to a new consumer that still
	// wait for their previous owner to acknowledge what it was given.
	PendingHandoffs int
	// AwaitedOwners lists, sorted, the consumers that owned units before
	// the group restarted and have not joined again: their units wait for
	// them until their session timeout has passed since the restart.
	AwaitedOwners []string
}

// ConsumerStats describes one consumer of a group.
type ConsumerStats struct {
	Name string
	// Assigned is the number of units assigned to the consumer, including
	// those still being handed over to it.
	Assigned int
	// Idle is true when the consumer is assigned nothing (more consumers
	// than units).
	Idle           bool
	SessionTimeout time.Duration
	LastSeen       time.Time
	// Parked is true while a fetch of the consumer waits for data.
	Parked bool
}

// Internal messages. Those sent from the timer and watcher goroutines
// carry the incarnation of the actor that armed them, so that a restarted
// actor ignores what its predecessor left behind.
type (
	// flushNow asks the group to write its pending batch; everything the
	// mailbox held before it is part of the batch.
	flushNow struct{}
	// appendedWake says Source.Appended fired: retry the parked fetches.
	appendedWake struct{ incarnation uint64 }
	// deadlineCheck says the group's timer fired: the earliest of its
	// deadlines (deadlines.go) has come.
	deadlineCheck struct{ incarnation uint64 }
)
