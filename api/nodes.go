package api

// AdminNodeList lists the cluster's nodes: the members with a lease in the
// metadata store, live or lapsed, with their load.
const AdminNodeList = "node.list"

// NodeInfo is one node in node.list.
type NodeInfo struct {
	ID string `json:"id"`
	// Incarnation is the node's data directory's: a random id made when
	// the directory was first used. The same id with another incarnation
	// is the node back with another (an empty) directory.
	Incarnation string `json:"incarnation,omitempty"`
	// NATSURL is the node's client URL (its embedded NATS server).
	NATSURL string `json:"nats_url,omitempty"`
	// Live says its lease holds: the node renewed it within the lease
	// time. A lapsed node is gone (stopped, killed or cut off).
	Live bool `json:"live"`
	// Entry says the node takes the clients' requests (and forwards those
	// of topics other nodes own); one node at a time.
	Entry bool `json:"entry"`
	// Serving says the node serves the topics whose layouts name no owner
	// (written before nodes had ids): the first node of the cluster.
	Serving bool `json:"serving"`
	// Started, Renewed and Expires are its lease's times (RFC 3339).
	Started string `json:"started"`
	Renewed string `json:"renewed"`
	Expires string `json:"expires"`
	// Segments is the active segments it owns (of its active topics) and
	// BytesPerSec the bytes/s it made durable, at its last renewal.
	Segments    int     `json:"segments"`
	BytesPerSec float64 `json:"bytes_per_sec"`
	// UnderReplicated counts the segments of the topics it is the home of
	// (active there) with fewer live copies than their replication factor,
	// and CopyBytesLeft the bytes left of the copies of sealed units it is
	// making again, at its last renewal (docs/replication.md).
	UnderReplicated int   `json:"under_replicated"`
	CopyBytesLeft   int64 `json:"copy_bytes_left"`
	// GroupsShort counts the consumer groups homed on it (running there)
	// whose replicated state is not on the replicas of their topic's home
	// segment at their last look (every 10 s): a lost copy not made again
	// yet.
	GroupsShort int `json:"groups_short"`
	// Draining says the node is being drained (node.drain): it takes no
	// new topics.
	Draining bool `json:"draining,omitempty"`
	// Starting says the node holds its lease but does not serve yet (it is
	// recovering its topics from disk): it takes no new topics until it
	// does.
	Starting bool `json:"starting,omitempty"`
}

// NodeListReply is the reply of node.list.
type NodeListReply struct {
	Nodes []NodeInfo `json:"nodes"`
	// Entry is the id of the node that takes the clients' requests ("" when
	// none holds the role).
	Entry string `json:"entry"`
	// Serving is the id of the node that serves the topics whose layouts
	// name no owner ("" before the first node has claimed it).
	Serving string `json:"serving"`
}

// AdminNodeDrain moves every active segment a node owns to other nodes
// (sealing them in metadata, no data copied) and the consumer groups it
// holds, so that it can stop; it takes no new topics afterwards.
const AdminNodeDrain = "node.drain"

// NodeDrainRequest names the node to drain.
type NodeDrainRequest struct {
	Node string `json:"node"`
}

// NodeDrainReply reports a drain.
type NodeDrainReply struct {
	Node string `json:"node"`
	// Topics and Segments moved, consumer Groups handed over.
	Topics   int `json:"topics"`
	Segments int `json:"segments"`
	Groups   int `json:"groups"`
	// Failed lists the topics that could not be moved, with why.
	Failed  []string `json:"failed,omitempty"`
	Seconds float64  `json:"seconds"`
}
