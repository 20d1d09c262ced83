package actors

import (
	"sync/atomic"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/logstore"
	"github.com/braidmq/braid/topology"
	"github.com/braidmq/braid/wal"
)

// Validate checks a produce request against the topic's limits. Nothing is
// appended when it fails.
func (t *Topic) Validate(recs []api.Record) error {
	if len(recs) == 0 {
		return api.Errorf(api.CodeBadRequest, "empty produce batch")
	}
	for i := range recs {
		if n := len(recs[i].Payload); n > int(t.maxPayload.Load()) {
			return api.Errorf(api.CodePayloadTooLarge, "record %d: payload of %d bytes is over the limit of %d (max_payload_bytes)", i, n, t.maxPayload.Load())
		}
		if n := len(recs[i].Key); n > MaxKeyBytes {
			return api.Errorf(api.CodeInvalidArgument, "record %d: key of %d bytes is over the limit of %d", i, n, MaxKeyBytes)
		}
		if ts := recs[i].Time; ts < 0 {
			return api.Errorf(api.CodeBadRequest, "record %d: time %d: want unix milliseconds, or 0 for the server's time", i, ts)
		}
	}
	return nil
}

// Produce appends records and calls done once with one result per record,
// in request order. Records of one key keep their order, across layout
// changes too: a record that reaches a segment after its seal is appended
// to the successor that owns its key, ahead of the records routed there
// directly (bucketActor). It never blocks: done runs on an actor's
// goroutine or a helper goroutine.
func (t *Topic) Produce(recs []api.Record, done func([]api.Result)) {
	t.ProduceAt(recs, 0, done)
}

// ProduceAt is Produce for records the producer routed by the layout at
// epoch (0: unknown, the plain-client contract of Produce). With an epoch,
// the producer re-routes by itself what a seal refuses (the Go client's
// contract): a record that reaches a sealed segment fails with
// SEGMENT_SEALED and the new layout's epoch, and a keyed record whose
// segment in the current layout was created after epoch fails the same
// way: the producer's layout is stale for its key, and it may have earlier
// records of the key in flight to the segment it believes in, which a seal
// will refuse; taking this one would let it overtake them.
func (t *Topic) ProduceAt(recs []api.Record, epoch uint64, done func([]api.Result)) {
	t.produceRouted(recs, epoch, nil, done)
}

// produceRouted is ProduceAt; route, when not nil, gives each record's
// unit (and key hash) instead of the layout's routing.
func (t *Topic) produceRouted(recs []api.Record, epoch uint64, route func(key []byte) (unitRef, uint64), done func([]api.Result)) {
	t.touch()
	if err := t.Validate(recs); err != nil {
		done(errResults(len(recs), err))
		return
	}
	now := time.Now().UnixMilli()
	p := &produceCall{t: t, epoch: epoch, route: route, results: make([]api.Result, len(recs)), done: done, recs: make([]wal.Record, len(recs))}
	for i := range recs {
		ts := recs[i].Time
		if ts == 0 {
			ts = now
		}
		w := wal.Record{Timestamp: ts, Key: recs[i].Key, Payload: recs[i].Payload}
		if len(recs[i].Headers) > 0 {
			w.Headers = make([]wal.Header, len(recs[i].Headers))
			for j, h := range recs[i].Headers {
				w.Headers[j] = wal.Header{Key: h.Name, Value: h.Value}
			}
		}
		p.recs[i] = w
	}
	idx := make([]int, len(recs))
	for i := range idx {
		idx[i] = i
	}
	p.pending.Store(1)
	// Route and send under routeMu: a layout change publishes its
	// snapshot under the write lock, so once it holds it, every append
	// routed by the older snapshot is in its bucket's mailbox (see
	// controller.change).
	for {
		t := p.t
		t.routeMu.RLock()
		if !t.state.Load().passivated {
			p.dispatch(idx)
			t.routeMu.RUnlock()
			break
		}
		// The topic stopped for idleness: send to it as it is now.
		t.routeMu.RUnlock()
		nt, err := t.againForAppend()
		if err != nil {
			for _, i := range idx {
				p.results[i] = errResult(err)
			}
			break
		}
		p.t = nt
	}
	p.finish()
}

// produceCall tracks one produce request across its bucket groups. It is
// the appendSink of the appends it sends.
type produceCall struct {
	t       *Topic
	epoch   uint64 // the producer's layout epoch, 0 when unknown
	route   func(key []byte) (unitRef, uint64)
	recs    []wal.Record
	results []api.Result
	done    func([]api.Result)
	// pending counts groups in flight plus one held by whoever is
	// dispatching; results is complete when it reaches zero.
	pending atomic.Int64
}

func (p *produceCall) finish() {
	if p.pending.Add(-1) == 0 {
		p.done(p.results)
	}
}

type unitRef struct {
	seg    topology.SegmentID
	bucket int
}

// dispatch routes the records idx by the current snapshot and sends one
// append per unit, keeping their order within each unit.
func (p *produceCall) dispatch(idx []int) {
	st := p.t.state.Load()
	if st.deleted {
		for _, i := range idx {
			p.results[i] = errResult(api.Errorf(api.CodeTopicDeleted, "topic %s was deleted", p.t.uri))
		}
		return
	}
	if p.route == nil && p.dispatchOne(st, idx) {
		return
	}
	groups := map[unitRef][]int{}
	hashes := map[unitRef][]uint64{}
	var order []unitRef
	for _, i := range idx {
		var u unitRef
		if p.route != nil {
			var h uint64
			u, h = p.route(p.recs[i].Key)
			if len(p.recs[i].Key) > 0 {
				hashes[u] = append(hashes[u], h)
			}
		} else if key := p.recs[i].Key; len(key) > 0 {
			seg, b, h := st.table.Route(key)
			if p.epoch != 0 && st.created[topology.SegmentID(seg)] > p.epoch {
				p.results[i] = errResult(api.StaleRouteError(p.epoch, st.layout.Epoch))
				continue
			}
			u = unitRef{topology.SegmentID(seg), b}
			hashes[u] = append(hashes[u], h)
		} else {
			seg, b := p.t.rr.Next(st.table)
			u = unitRef{topology.SegmentID(seg), b}
		}
		if _, ok := groups[u]; !ok {
			order = append(order, u)
		}
		groups[u] = append(groups[u], i)
	}
	for _, u := range order {
		members := groups[u]
		batch := make([]wal.Record, len(members))
		for j, i := range members {
			batch[j] = p.recs[i]
		}
		p.send(st, u, members, batch, hashes[u])
	}
}

// dispatchOne sends the records idx as one append when they are all keyed
// and route to one unit, as the Go producer's batches do (it batches per
// unit): no grouping, and the records go as they are. It reports false,
// having sent nothing, for any other request (found at its first record
// that routes elsewhere, is unkeyed or is refused).
func (p *produceCall) dispatchOne(st *topicState, idx []int) bool {
	if len(idx) != len(p.recs) {
		return false
	}
	var first unitRef
	hashes := make([]uint64, len(idx))
	for k, i := range idx {
		key := p.recs[i].Key
		if len(key) == 0 {
			return false
		}
		seg, b, h := st.table.Route(key)
		u := unitRef{topology.SegmentID(seg), b}
		if k == 0 {
			if p.epoch != 0 && st.created[u.seg] > p.epoch {
				return false
			}
			first = u
		} else if u != first {
			return false
		}
		hashes[k] = h
	}
	p.send(st, first, idx, p.recs, hashes)
	return true
}

// send hands the records of unit u (members: their indexes in the request)
// to its bucket actor.
func (p *produceCall) send(st *topicState, u unitRef, members []int, batch []wal.Record, hashes []uint64) {
	pids := st.buckets[u.seg]
	if u.bucket >= len(pids) {
		for _, i := range members {
			p.results[i] = errResult(api.Errorf(api.CodeInternal, "no actor for %d/%d", u.seg, u.bucket))
		}
		return
	}
	p.pending.Add(1)
	st.lane(u).send(p.t.mgr.system.Root, pids[u.bucket], appendReq{records: batch, hashes: hashes, sink: p, members: members, strict: p.epoch != 0})
}

// landed records a group's outcome (appendSink). A strict group refused
// by a seal gets SEGMENT_SEALED with the epoch of the new layout: its
// producer re-routes it (the producer rule of DESIGN.md §1).
func (p *produceCall) landed(u unitRef, members []int, first uint64, err error) {
	for j, i := range members {
		if err != nil {
			p.results[i] = errResult(err)
			continue
		}
		p.results[i] = api.Result{Segment: uint64(u.seg), Bucket: u.bucket, Offset: first + uint64(j)}
	}
	p.finish()
}

// splitInto accounts for a group handed on in parts (appendSink).
func (p *produceCall) splitInto(parts int) { p.pending.Add(int64(parts - 1)) }

func errResult(err error) api.Result {
	e := api.AsError(err)
	return api.Result{Code: e.Code.Number, Epoch: e.Epoch, Message: e.Message}
}

func errResults(n int, err error) []api.Result {
	out := make([]api.Result, n)
	for i := range out {
		out[i] = errResult(err)
	}
	return out
}

// UnitKey names one bucket log (logstore.UnitKey).
type UnitKey = logstore.UnitKey

// Records and Settle make an appendReq a logstore.Request: the committer
// writes its records and answers it through its sink.
func (q appendReq) Records() []wal.Record { return q.records }

// Settle answers the append, of unit key, once durable at first or refused.
func (q appendReq) Settle(key UnitKey, first uint64, err error) {
	q.sink.landed(unitRef{seg: key.Segment, bucket: key.Bucket}, q.members, first, err)
}
