// Package placement decides where things go in a cluster and who holds
// what, as pure functions of plain data and the time: which node a new
// topic or segment goes to (Choose), which nodes rebalancing moves topics
// between and which topics it moves (Rebalance, PickTopics), whether a
// node must give up its segments (Evict), and the state machines of a
// node's membership lease (Lease) and of the cluster's entry role
// (Entry). Every function that depends on the time takes now.
//
// What it owns: the choices and the rules. What it does not own: reading
// or writing leases (meta), the renewal loop, the messages between nodes
// and the moves themselves (cluster), and the segments' DAG (topology).
//
// It imports nothing of Braid's: no actor, NATS, timer or disk code.
package placement
