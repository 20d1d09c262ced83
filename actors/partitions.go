package actors

import (
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/routing"
	"github.com/braidmq/braid/topology"
)

// Clients that address a fixed topic's partitions explicitly: producers
// naming Braid-Partition, readers of some of its partitions only. A
// migration would break them (the partitions stop taking appends), so
// topic.migrate refuses while any was seen lately, unless forced.

// partitionClientWindow is how long a client that addressed a partition
// counts as attached.
const partitionClientWindow = 30 * time.Second

// partitionClients remembers when each client last addressed a partition.
type partitionClients struct {
	mu   sync.Mutex
	seen map[string]time.Time
}

// NotePartitionClient records that a client (its reply subject: clients
// are told apart by their inbox prefix) addressed a partition explicitly.
func (t *Topic) NotePartitionClient(reply string) {
	id := clientOf(reply)
	if id == "" {
		return
	}
	pc := &t.partClients
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if pc.seen == nil {
		pc.seen = map[string]time.Time{}
	}
	pc.seen[id] = time.Now()
}

// partitionClients counts the clients seen addressing partitions within
// the window, forgetting the others.
func (t *Topic) partitionClients() int {
	pc := &t.partClients
	pc.mu.Lock()
	defer pc.mu.Unlock()
	for id, at := range pc.seen {
		if time.Since(at) > partitionClientWindow {
			delete(pc.seen, id)
		}
	}
	return len(pc.seen)
}

// clientOf is the inbox prefix of a reply subject ("_INBOX.<id>" of
// "_INBOX.<id>.<token>"), or the subject itself.
func clientOf(reply string) string {
	if i := strings.IndexByte(reply, '.'); i >= 0 {
		if j := strings.IndexByte(reply[i+1:], '.'); j >= 0 {
			return reply[:i+1+j]
		}
	}
	return reply
}

// ProduceFrom is ProduceAt for a produce request whose reply subject is
// reply and that may name a partition (Braid-Partition; -1 when it does
// not): then the records go to it (ProduceToPartition), and the client
// counts as addressing partitions.
func (t *Topic) ProduceFrom(recs []api.Record, epoch uint64, partition int, reply string, done func([]api.Result)) {
	if partition < 0 {
		t.ProduceAt(recs, epoch, done)
		return
	}
	t.NotePartitionClient(reply)
	t.ProduceToPartition(recs, partition, done)
}

// ProduceToPartition is Produce for records a producer sends to one
// partition of a fixed topic by name (Braid-Partition), whatever their
// keys: INVALID_ARGUMENT for a partition the topic does not have, and for
// a topic that is not fixed (a migrated one has no partitions to append
// to).
func (t *Topic) ProduceToPartition(recs []api.Record, partition int, done func([]api.Result)) {
	l := t.Layout()
	seg, ok := partitionSegment(l, partition)
	if !ok {
		err := api.Errorf(api.CodeInvalidArgument, "%s: %s %d: %s", t.uri, api.HeaderPartition, partition, partitionRefusal(l))
		done(errResults(len(recs), err))
		return
	}
	t.produceRouted(recs, 0, func(key []byte) (unitRef, uint64) {
		if len(key) == 0 {
			return unitRef{seg.ID, 0}, 0
		}
		h := routing.KeyHash(key)
		return unitRef{seg.ID, routing.Bucket(h, seg.Buckets)}, h
	}, done)
}

// PartitionOf returns the partition segment seg continues in a fixed
// topic, or -1 (a scalable topic, a migrated one: its segments are no
// partitions any more to the producers).
//
// It never waits: a produce's completion asks it, and the topic's stop
// waits for every completion. It reads the handle's own layout, or, for a
// segment that layout does not know (routed by a newer one), the layout
// of the topic active here now; it does not activate the topic.
func (t *Topic) PartitionOf(seg uint64) int {
	id := topology.SegmentID(seg)
	l := t.state.Load().layout
	if _, ok := l.Segment(id); !ok {
		if cur, ok := t.mgr.Active(t.uri); ok {
			l = cur.state.Load().layout
		}
	}
	if l.Fixed() {
		return l.PartitionOf(id)
	}
	return -1
}

// partitionSegment returns the active segment of a fixed topic's
// partition.
func partitionSegment(l topology.Layout, partition int) (topology.Segment, bool) {
	if !l.Fixed() {
		return topology.Segment{}, false
	}
	if parts := l.Partitions(); partition < len(parts) {
		return parts[partition], true // the tip: the active segment of its chain
	}
	return topology.Segment{}, false
}

func partitionRefusal(l topology.Layout) string {
	if !l.Fixed() {
		return "the topic has no partitions to append to (it is scalable, or was migrated)"
	}
	return "no such partition: the topic has partitions 0 to " + strconv.Itoa(len(l.Partitions())-1)
}
