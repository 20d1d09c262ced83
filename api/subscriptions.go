package api

// Subscription management (admin, JSON), served by the topic's owner:
//
//	subscription.list    TopicRequest              -> SubscriptionListReply
//	subscription.delete  SubscriptionDeleteRequest -> SubscriptionDeleteReply
//	subscription.seek    SubscriptionSeekRequest   -> SubscriptionSeekReply
//
// A unit's position is its acknowledged (committed) offset: the next offset
// not acknowledged, every offset below it is done. Its lag is next - acked,
// next being the unit's next offset to be written.
//
// A subscription with consumers attached (live ones, and for a stream
// subscription the previous owners of units it waits for after a restart)
// is neither deleted nor moved: INVALID_ARGUMENT names them, and nothing
// changes. With Force it is, and the consumers attached are told, as the
// server tells the consumers of a deleted topic: their fetches, acks, nacks
// and joins are refused — NOT_FOUND after a delete; NOT_OWNER after a seek
// of a stream subscription — until they leave (Close), or for their
// session timeout (at least a minute). A Go consumer returns that error
// from Next; the application makes a new consumer. (A stream consumer
// drops messages at offsets below those it has returned, so one kept
// across a seek would not see what the seek delivers again.) A seek of a
// queue subscription with Force keeps its consumers: what they hold of the
// units the seek moves is forgotten, and they are delivered from the new
// positions.
//
// Codes: BAD_REQUEST (malformed body, unknown field, no subscription, no
// seek target), INVALID_NAME (subscription name), INVALID_ARGUMENT (two
// seek targets, a "to" other than earliest or latest, a negative time, a
// message position of no unit or out of its range, consumers attached
// without force), SEGMENT_NOT_FOUND (a message position naming a segment
// the topic never had), NOT_FOUND (no such subscription), TOPIC_NOT_FOUND,
// UNAVAILABLE (a unit's offsets or records could not be read, the
// subscription is being deleted: retry). A refused request changes
// nothing.

// Subscription kinds, as subscription.list names them.
const (
	SubscriptionStream = "stream"
	SubscriptionQueue  = "queue"
)

// Seek positions of SubscriptionSeekRequest.To.
const (
	SeekEarliest = "earliest"
	SeekLatest   = "latest"
)

// SubscriptionListReply is the reply of subscription.list: every
// subscription of the topic, stream and queue, by kind then name.
type SubscriptionListReply struct {
	Topic         string             `json:"topic"`
	Epoch         uint64             `json:"epoch"`
	Subscriptions []SubscriptionInfo `json:"subscriptions"`
}

// SubscriptionInfo is one subscription and its positions.
type SubscriptionInfo struct {
	Name string `json:"name"`
	Kind string `json:"kind"` // SubscriptionStream or SubscriptionQueue
	// Start is where the subscription started: earliest or latest.
	Start string `json:"start,omitempty"`
	// ReadCompacted: a stream subscription reading the compacted view.
	ReadCompacted bool `json:"read_compacted,omitempty"`
	// Epoch is the layout epoch the positions were taken at.
	Epoch     uint64                 `json:"epoch"`
	Consumers []SubscriptionConsumer `json:"consumers"`
	// Backlog is the number of messages not acknowledged, over every unit:
	// the sum of their lags, less the messages of a queue subscription
	// acknowledged past their unit's acked offset.
	Backlog uint64 `json:"backlog"`
	// Units are the units of the segments neither drained nor deleted,
	// by segment then bucket.
	Units []SubscriptionUnit `json:"units"`
	// Drained lists the segments the subscription is done with, ascending.
	Drained []uint64 `json:"drained"`
	// Error says why the subscription could not be read (its state does not
	// load, its former node is down); the other fields are then empty.
	Error string `json:"error,omitempty"`
}

// SubscriptionUnit is a subscription's position in one unit.
type SubscriptionUnit struct {
	Segment uint64 `json:"segment"`
	Bucket  int    `json:"bucket"`
	// Acked is the next offset not acknowledged (a queue subscription's
	// cumulative point); offsets below the unit's first retained offset
	// count as acknowledged.
	Acked uint64 `json:"acked"`
	// Next is the unit's next offset to be written.
	Next uint64 `json:"next"`
	// Lag is Next - Acked.
	Lag uint64 `json:"lag"`
	// Withheld (stream): the ordering rule holds the unit back until its
	// segment's ancestors are drained.
	Withheld bool `json:"withheld,omitempty"`
	// Owner (stream) is the consumer the unit is given to.
	Owner string `json:"owner,omitempty"`
	// Inflight (queue) counts the unit's messages delivered and not
	// answered; AckedAhead those acknowledged past Acked.
	Inflight   int    `json:"inflight,omitempty"`
	AckedAhead uint64 `json:"acked_ahead,omitempty"`
	// Unavailable: the unit's offsets could not be read (its node is
	// down); Next and Lag are then unknown (0).
	Unavailable bool `json:"unavailable,omitempty"`
}

// SubscriptionConsumer is one consumer attached to a subscription.
type SubscriptionConsumer struct {
	Name string `json:"name"`
	// Units (stream) are the units the consumer holds, and Lag the sum of
	// their lags.
	Units []UnitID `json:"units,omitempty"`
	Lag   uint64   `json:"lag"`
	// Inflight (queue) counts the messages delivered to the consumer and
	// not answered yet.
	Inflight int `json:"inflight"`
	// SessionTimeout is the consumer's, as a Go duration ("10s").
	SessionTimeout string `json:"session_timeout,omitempty"`
}

// UnitID names one unit: a segment and one of its entry buckets.
type UnitID struct {
	Segment uint64 `json:"segment"`
	Bucket  int    `json:"bucket"`
}

// SubscriptionDeleteRequest is the body of subscription.delete: the
// subscription and its state go; a join afterwards creates a new one.
type SubscriptionDeleteRequest struct {
	Topic        string `json:"topic"`
	Subscription string `json:"subscription"`
	// Force deletes it while consumers are attached (see the top of this
	// file).
	Force bool `json:"force,omitempty"`
}

// SubscriptionDeleteReply is the reply of subscription.delete.
type SubscriptionDeleteReply struct {
	OK           bool   `json:"ok"`
	Topic        string `json:"topic"`
	Subscription string `json:"subscription"`
	Kind         string `json:"kind"`
	// Detached lists the consumers that were attached (Force), sorted.
	Detached []string `json:"detached"`
}

// SubscriptionSeekRequest is the body of subscription.seek: it moves the
// subscription's positions in every unit. It names exactly one target:
//
//   - To "earliest": every unit from its first retained offset, no segment
//     drained but the deleted ones.
//   - To "latest": every active unit at its next offset, every sealed
//     segment drained: only what is written from now on is delivered.
//   - Time (unix ms): every unit at its first offset whose time is at or
//     after Time (as read.offsets finds it); a sealed segment with nothing
//     from then on is drained.
//   - Message: its unit at its offset (that message is the next one
//     delivered; its offset may be the unit's next offset), the ancestors
//     of its segment drained (the ordering rule would withhold the segment
//     otherwise), its descendants back at their start, not drained, and the
//     other units where they were (those of its own segment at their next
//     offset if the segment was drained). A queue subscription, which has
//     no ordering rule, is moved by the same rule.
//
// The ordering rule still holds after a seek: the positions say what is
// acknowledged, and a segment is delivered once its ancestors are drained.
type SubscriptionSeekRequest struct {
	Topic        string    `json:"topic"`
	Subscription string    `json:"subscription"`
	To           string    `json:"to,omitempty"`
	Time         *int64    `json:"time,omitempty"`
	Message      *Position `json:"message,omitempty"`
	// Force moves the positions while consumers are attached (see the top
	// of this file).
	Force bool `json:"force,omitempty"`
}

// SubscriptionSeekReply is the reply of subscription.seek: the
// subscription as the seek left it, and the consumers it detached.
type SubscriptionSeekReply struct {
	SubscriptionInfo
	// Detached lists the consumers of a stream subscription that were
	// attached (Force), sorted; a queue subscription keeps its consumers.
	Detached []string `json:"detached"`
}
