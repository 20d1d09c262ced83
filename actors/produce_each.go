package actors

import (
	"time"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/topology"
	"github.com/braidmq/braid/wal"
)

// ProduceSink learns the outcome of the records of a ProduceEach call, a
// group at a time, as soon as each group is durable or refused: from an
// actor's goroutine, a committer's, or the caller's (a record refused
// before it was sent). Calls for different groups may run concurrently.
type ProduceSink interface {
	// Produced reports that the records members (indexes into the call's
	// records) are at offsets first, first+1, ... of unit (seg, bucket),
	// or that they failed with err.
	Produced(members []int, seg uint64, bucket int, first uint64, err error)
}

// ProduceEach appends recs, each of them its own request, as a front-end
// that read many single-record requests off the wire at once passes them
// on: each record is validated alone, record i was routed by the layout
// at epochs[i] (0: unknown, the plain-client contract of Produce; see
// ProduceAt), a record with a zero Timestamp gets the server's time, and
// the records bound for one unit go to its bucket as one append, in the
// order given. The records must stay unchanged until sink has been told
// of them. It never blocks.
func (t *Topic) ProduceEach(recs []wal.Record, epochs []uint64, sink ProduceSink) {
	t.touch()
	now := time.Now().UnixMilli()
	e := &eachCall{t: t, sink: sink}
	maxPayload := int(t.maxPayload.Load())
	var refused []refusal
	// Refusals are reported after the lock is released: the sink may
	// block (a full reply buffer), and a layout change waits for routeMu.
	defer func() {
		for _, r := range refused {
			e.refuse(r.i, r.err)
		}
	}()
	t.routeMu.RLock()
	st := t.state.Load()
	if st.passivated {
		// The topic stopped for idleness: send to it as it is now.
		t.routeMu.RUnlock()
		if nt, err := t.againForAppend(); err != nil {
			for i := range recs {
				refused = append(refused, refusal{i, err})
			}
		} else {
			nt.ProduceEach(recs, epochs, sink)
		}
		return
	}
	defer t.routeMu.RUnlock()
	// Two passes: the first routes every record to its group (groupOf,
	// -1 when refused) and counts each group's records; the second lays
	// the groups out in one array each for records, members and hashes,
	// sized exactly (growing them record by record was most of what
	// this call allocated).
	var groups eachGroups
	var smallGroupOf [256]int32
	var smallHashOf [256]uint64
	groupOf, hashOf := smallGroupOf[:0], smallHashOf[:]
	if len(recs) > len(smallGroupOf) {
		groupOf, hashOf = make([]int32, 0, len(recs)), make([]uint64, len(recs))
	}
	taken, keyedTaken := 0, 0
	for i := range recs {
		r := &recs[i]
		groupOf = append(groupOf, -1)
		if err := validRecord(r, maxPayload); err != nil {
			refused = append(refused, refusal{i, err})
			continue
		}
		if st.deleted {
			refused = append(refused, refusal{i, api.Errorf(api.CodeTopicDeleted, "topic %s was deleted", t.uri)})
			continue
		}
		if r.Timestamp == 0 {
			r.Timestamp = now
		}
		var k eachGroupKey
		keyed := len(r.Key) > 0
		if keyed {
			seg, b, hash := st.table.Route(r.Key)
			if epochs[i] != 0 && st.created[topology.SegmentID(seg)] > epochs[i] {
				refused = append(refused, refusal{i, api.StaleRouteError(epochs[i], st.layout.Epoch)})
				continue
			}
			k, hashOf[i] = eachGroupKey{unitRef{topology.SegmentID(seg), b}, epochs[i] != 0}, hash
			keyedTaken++
		} else {
			seg, b := t.rr.Next(st.table)
			k = eachGroupKey{unitRef{topology.SegmentID(seg), b}, epochs[i] != 0}
		}
		groupOf[i] = int32(groups.of(k, keyed))
		taken++
	}
	if taken == 0 {
		return
	}
	records := make([]wal.Record, taken)
	members := make([]int, taken)
	var hashes []uint64
	if keyedTaken > 0 {
		hashes = make([]uint64, keyedTaken)
	}
	at, keyedAt := 0, 0
	for gi := range groups.list {
		g := &groups.list[gi]
		n, kn := g.n, g.keyed
		g.records, g.members = records[at:at:at+n], members[at:at:at+n]
		if kn > 0 {
			g.hashes = hashes[keyedAt : keyedAt : keyedAt+kn]
		}
		at, keyedAt = at+n, keyedAt+kn
	}
	for i, gi := range groupOf {
		if gi < 0 {
			continue
		}
		g := &groups.list[gi]
		g.records = append(g.records, recs[i])
		g.members = append(g.members, i)
		if len(recs[i].Key) > 0 {
			g.hashes = append(g.hashes, hashOf[i])
		}
	}
	for gi := range groups.list {
		g := &groups.list[gi]
		pids := st.buckets[g.key.u.seg]
		if g.key.u.bucket >= len(pids) {
			for _, i := range g.members {
				refused = append(refused, refusal{i, api.Errorf(api.CodeInternal, "no actor for %d/%d", g.key.u.seg, g.key.u.bucket)})
			}
			continue
		}
		st.lane(g.key.u).send(t.mgr.system.Root, pids[g.key.u.bucket], appendReq{records: g.records, hashes: g.hashes, sink: e, members: g.members, strict: g.key.strict})
	}
}

// eachGroupKey names the append a record of ProduceEach joins: one per
// unit, and per contract (strict: the producer named its epoch).
type eachGroupKey struct {
	u      unitRef
	strict bool
}

// eachGroup is one append of ProduceEach: n records (keyed of them keyed)
// in the first pass, then the records themselves.
type eachGroup struct {
	key      eachGroupKey
	n, keyed int
	records  []wal.Record
	hashes   []uint64
	members  []int
}

// eachGroups are the groups of a ProduceEach call in the order they were
// first met; index finds one by key once there are many.
type eachGroups struct {
	list  []eachGroup
	index map[eachGroupKey]int
}

// eachGroupsScanned is how many groups are looked up by a scan before an
// index is made.
const eachGroupsScanned = 8

// of counts a record (keyed or not) in the group of k and returns its
// index in list.
func (gs *eachGroups) of(k eachGroupKey, keyed bool) int {
	gi := -1
	if gs.index != nil {
		if i, ok := gs.index[k]; ok {
			gi = i
		}
	} else {
		for i := range gs.list {
			if gs.list[i].key == k {
				gi = i
				break
			}
		}
	}
	if gi < 0 {
		gi = len(gs.list)
		gs.list = append(gs.list, eachGroup{key: k})
		if gs.index != nil {
			gs.index[k] = gi
		} else if len(gs.list) > eachGroupsScanned {
			gs.index = make(map[eachGroupKey]int, 2*len(gs.list))
			for i := range gs.list {
				gs.index[gs.list[i].key] = i
			}
		}
	}
	gs.list[gi].n++
	if keyed {
		gs.list[gi].keyed++
	}
	return gi
}

// validRecord checks one record against the topic's limits.
func validRecord(r *wal.Record, maxPayload int) error {
	if n := len(r.Payload); n > maxPayload {
		return api.Errorf(api.CodePayloadTooLarge, "payload of %d bytes is over the limit of %d (max_payload_bytes)", n, maxPayload)
	}
	if n := len(r.Key); n > MaxKeyBytes {
		return api.Errorf(api.CodeInvalidArgument, "key of %d bytes is over the limit of %d", n, MaxKeyBytes)
	}
	if r.Timestamp < 0 {
		return api.Errorf(api.CodeBadRequest, "time %d: want unix milliseconds, or 0 for the server's time", r.Timestamp)
	}
	return nil
}

// eachCall is the appendSink of a ProduceEach call: it passes every
// group's outcome to the caller's sink as it lands.
type eachCall struct {
	t    *Topic
	sink ProduceSink
}

func (e *eachCall) landed(u unitRef, members []int, first uint64, err error) {
	if err != nil {
	}
	e.sink.Produced(members, uint64(u.seg), u.bucket, first, err)
}

// splitInto needs no bookkeeping: every part reports for itself.
func (e *eachCall) splitInto(int) {}

type refusal struct {
	i   int
	err error
}

func (e *eachCall) refuse(i int, err error) {
	e.sink.Produced([]int{i}, 0, 0, 0, err)
}
