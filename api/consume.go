package api

// Consume request bodies (JSON), sent to
// braid.v1.consume.<verb>.<tenant>.<namespace>.<topic>.
//
// A stream consumer joins a subscription (created on first join), then
// fetches: each fetch returns messages only from the units the group has
// assigned to this consumer, in offset order per unit, and never from a
// segment whose ancestors this subscription has not drained. Acks are
// cumulative per unit. A consumer that neither fetches nor acks for its
// session timeout is declared dead and its units move on, redelivering what
// it had not acknowledged. Leave hands its units over at once.

// Start positions of a new subscription.
const (
	StartEarliest = "earliest"
	StartLatest   = "latest"
)

// JoinRequest is the body of consume.join.
type JoinRequest struct {
	Subscription string `json:"subscription"`
	Consumer     string `json:"consumer"`
	// Start applies when the subscription is created: earliest (default) or latest.
	Start string `json:"start,omitempty"`
	// ReadCompacted applies when the subscription is created: it reads the
	// topic's compacted view (below each unit's compaction horizon only the
	// latest record of each key, at its offset; the log from there). A
	// join of an existing subscription must ask as it was created.
	ReadCompacted bool `json:"read_compacted,omitempty"`
	// SessionTimeout ("10s" default) after which a silent consumer is dead.
	SessionTimeout string `json:"session_timeout,omitempty"`
}

// JoinReply acknowledges a join.
type JoinReply struct {
	Subscription string `json:"subscription"`
	Consumer     string `json:"consumer"`
	Consumers    int    `json:"consumers"`
}

// FetchRequest is the body of consume.fetch.
type FetchRequest struct {
	Subscription string `json:"subscription"`
	Consumer     string `json:"consumer"`
	// Max messages in the reply (default 256, at most 10000).
	Max int `json:"max,omitempty"`
	// MaxBytes of payload in the reply (default 1 MiB); at least one message
	// is returned when one is available.
	MaxBytes int `json:"max_bytes,omitempty"`
	// Wait is how long the server holds an empty fetch ("0s" to "30s",
	// default "1s").
	Wait string `json:"wait,omitempty"`
	// Format "binary" (default, see the package doc) or "json".
	Format string `json:"format,omitempty"`
	// Resync (stream subscriptions) says the consumer lost the reply of an
	// earlier fetch (a timeout): the server hands out again, in each unit
	// the consumer owns, what it delivered beyond the position the consumer
	// lists in Received (the next offset it has not received), or beyond
	// the acknowledged cursor for a unit it does not list. Without it, a
	// cumulative ack after a lost reply would cover messages the
	// application never saw.
	Resync bool `json:"resync,omitempty"`
	// Received lists, with Resync, the next offset the consumer expects in
	// each unit it has received messages from (at most 10000 positions).
	Received []Position `json:"received,omitempty"`
}

// Position names one message: a unit and an offset.
type Position struct {
	Segment uint64 `json:"segment"`
	Bucket  int    `json:"bucket"`
	Offset  uint64 `json:"offset"`
}

// AckRequest is the body of consume.ack: each position acknowledges its unit
// up to and including its offset.
type AckRequest struct {
	Subscription string     `json:"subscription"`
	Consumer     string     `json:"consumer"`
	Acks         []Position `json:"acks"`
}

// LeaveRequest is the body of consume.leave.
type LeaveRequest struct {
	Subscription string `json:"subscription"`
	Consumer     string `json:"consumer"`
}

// FetchReplyHeaderAssigned carries how many units the consumer holds after
// the fetch; 0 with other consumers present means this consumer is idle
// (more consumers than units).
const FetchReplyHeaderAssigned = "Braid-Assigned"

// JSONMessage is one message of a FetchReplyJSON.
type JSONMessage struct {
	Segment    uint64            `json:"segment"`
	Bucket     int               `json:"bucket"`
	Offset     uint64            `json:"offset"`
	Deliveries uint32            `json:"deliveries"`
	Time       int64             `json:"time"`
	Key        string            `json:"key,omitempty"`
	Headers    map[string]string `json:"headers,omitempty"`
	Payload    []byte            `json:"payload"`
}

// FetchReplyJSON is the reply of a fetch with "format":"json".
type FetchReplyJSON struct {
	Messages []JSONMessage `json:"messages"`
}
