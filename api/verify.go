package api

// TopicVerification answers topic.verify (TopicRequest): whether every
// replica of every bucket log of a replicated topic holds the same
// committed records. Each unit's replicas are compared over the records
// all of them hold committed ([From, To): a follower may trail its
// leader), by a SHA-256 of those records (offset, timestamp, key,
// headers, payload) that each replica computes on its own node.
type TopicVerification struct {
	Topic string `json:"topic"`
	Epoch uint64 `json:"epoch"`
	// Agree: every unit checked agrees and every replica answered.
	Agree bool `json:"agree"`
	// Units counts the units checked; Disagree those whose replicas'
	// checksums differ; Unanswered those with a replica that did not
	// answer (its node down, or its copy not made yet).
	Units      int         `json:"units"`
	Disagree   int         `json:"disagree"`
	Unanswered int         `json:"unanswered"`
	Checks     []UnitCheck `json:"checks"`
}

// UnitCheck is one bucket log of a replicated segment, compared.
type UnitCheck struct {
	Segment uint64 `json:"segment"`
	Bucket  int    `json:"bucket"`
	State   string `json:"state"`
	// From and To bound the records compared: the committed records
	// every replica that answered holds.
	From  uint64 `json:"from"`
	To    uint64 `json:"to"`
	Agree bool   `json:"agree"`
	// Replicas are the segment's copies, as its layout names them.
	Replicas []ReplicaCheck `json:"replicas"`
}

// ReplicaCheck is one copy's answer.
type ReplicaCheck struct {
	Node        string `json:"node"`
	Incarnation string `json:"incarnation"`
	// First and Next bound its committed records.
	First uint64 `json:"first"`
	Next  uint64 `json:"next"`
	// Checksum is the hex SHA-256 of the records [From, To) of the unit.
	Checksum string `json:"checksum,omitempty"`
	// Error says why it did not answer.
	Error string `json:"error,omitempty"`
}
