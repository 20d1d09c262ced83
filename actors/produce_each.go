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
	type groupKey struct {
		u      unitRef
		strict bool
	}
	type group struct {
		records []wal.Record
		hashes  []uint64
		members []int
	}
	groups := make(map[groupKey]*group, 4)
	var order []groupKey
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
	for i := range recs {
		r := &recs[i]
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
		var k groupKey
		var h uint64
		keyed := len(r.Key) > 0
		if keyed {
			seg, b, hash := st.table.Route(r.Key)
			if epochs[i] != 0 && st.created[topology.SegmentID(seg)] > epochs[i] {
				refused = append(refused, refusal{i, api.StaleRouteError(epochs[i], st.layout.Epoch)})
				continue
			}
			k, h = groupKey{unitRef{topology.SegmentID(seg), b}, epochs[i] != 0}, hash
		} else {
			seg, b := t.rr.Next(st.table)
			k = groupKey{unitRef{topology.SegmentID(seg), b}, epochs[i] != 0}
		}
		g := groups[k]
		if g == nil {
			g = &group{}
			groups[k] = g
			order = append(order, k)
		}
		g.records = append(g.records, *r)
		g.members = append(g.members, i)
		if keyed {
			g.hashes = append(g.hashes, h)
		}
	}
	for _, k := range order {
		g := groups[k]
		pids := st.buckets[k.u.seg]
		if k.u.bucket >= len(pids) {
			for _, i := range g.members {
				refused = append(refused, refusal{i, api.Errorf(api.CodeInternal, "no actor for %d/%d", k.u.seg, k.u.bucket)})
			}
			continue
		}
		st.lane(k.u).send(t.mgr.system.Root, pids[k.u.bucket], appendReq{records: g.records, hashes: g.hashes, sink: e, members: g.members, strict: k.strict})
	}
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
