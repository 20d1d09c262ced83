package api

// Queue consumers (DESIGN.md §2): shared dispatch of every unit of a topic
// across the consumers of a queue subscription, individual acks, negative
// acks with a redelivery delay, an ack timeout, and a dead-letter topic after
// too many deliveries. There is no per-key order promise.
//
// Requests go to braid.v1.queue.<verb>.<tenant>.<namespace>.<topic>, JSON in:
//
//	join   QueueJoinRequest   -> JoinReply
//	fetch  FetchRequest       -> the binary fetch reply (or FetchReplyJSON); Deliveries counts every delivery
//	ack    AckRequest         -> OKReply   each position acknowledges that one message
//	nack   NackRequest        -> OKReply   each position is delivered again after a delay
//	leave  LeaveRequest       -> OKReply   what the consumer held is delivered again at once
//
// A subscription name is either a stream or a queue subscription of its
// topic, never both (a join of the other kind gets ALREADY_EXISTS).

// Queue verbs: braid.v1.queue.<verb>.<tenant>.<namespace>.<topic>.
const (
	QueuePrefix = Prefix + ".queue"
	QueueJoin   = "join"
	QueueFetch  = "fetch"
	QueueAck    = "ack"
	QueueNack   = "nack"
	QueueLeave  = "leave"
)

// QueueSubject is braid.v1.queue.<verb>.<tenant>.<namespace>.<topic>.
func QueueSubject(verb, tenant, namespace, topic string) string {
	return TopicSubject(QueuePrefix+"."+verb, tenant, namespace, topic)
}

// QueueJoinRequest is the body of queue.join. The first join creates the
// subscription at Start. The policy fields are the subscription's: a join
// that sets one changes it for every consumer (the last join wins, and the
// change is durable); a field left out keeps its current value.
type QueueJoinRequest struct {
	Subscription string `json:"subscription"`
	Consumer     string `json:"consumer"`
	// Start applies when the subscription is created: earliest (default) or latest.
	Start string `json:"start,omitempty"`
	// SessionTimeout ("10s" default) after which a silent consumer is dead
	// and what it held is delivered again.
	SessionTimeout string `json:"session_timeout,omitempty"`
	// AckTimeout ("30s" default; "0s" disables it) after which a delivered
	// message that is neither acked nor nacked is delivered again.
	AckTimeout string `json:"ack_timeout,omitempty"`
	// MaxDeliveries (default 0: unlimited) is how often a message may be
	// delivered; when it would be delivered once more it goes to the
	// dead-letter topic instead, and is acknowledged.
	MaxDeliveries *int `json:"max_deliveries,omitempty"`
	// DeadLetterTopic (default "topic://<tenant>/<namespace>/<name>-dlq") is
	// created on first use.
	DeadLetterTopic string `json:"dead_letter_topic,omitempty"`
	// NackDelay ("1s" default) is the redelivery delay of a nack that names
	// none. With NackBackoff above 1 the delay of the n-th delivery is
	// NackDelay * NackBackoff^(n-1), at most MaxNackDelay ("60s" default).
	NackDelay    string   `json:"nack_delay,omitempty"`
	NackBackoff  *float64 `json:"nack_backoff,omitempty"`
	MaxNackDelay string   `json:"max_nack_delay,omitempty"`
}

// NackRequest is the body of queue.nack: the positions are delivered again
// after Delay, or after the subscription's backoff when Delay is empty.
type NackRequest struct {
	Subscription string     `json:"subscription"`
	Consumer     string     `json:"consumer"`
	Nacks        []Position `json:"nacks"`
	Delay        string     `json:"delay,omitempty"`
}

// Headers of a message in a dead-letter topic.
const (
	HeaderDLQOrigin       = "Braid-DLQ-Origin"       // the topic URI the message came from
	HeaderDLQSubscription = "Braid-DLQ-Subscription" // the queue subscription that gave up on it
	HeaderDLQPosition     = "Braid-DLQ-Position"     // segment/bucket/offset in the origin topic
	HeaderDLQReason       = "Braid-DLQ-Reason"       // why, e.g. DLQReasonMaxDeliveries
	HeaderDLQDeliveries   = "Braid-DLQ-Deliveries"   // how often it was delivered
)

// DLQReasonMaxDeliveries is the Braid-DLQ-Reason of a message that reached
// the subscription's max deliveries.
const DLQReasonMaxDeliveries = "max deliveries exceeded"
