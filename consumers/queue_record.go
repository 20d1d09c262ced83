package consumers

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/braidmq/braid/topology"
)

// The WAL records of a queue subscription. Each is the payload of one
// wal.Record (framed by the wal with a version byte and a CRC32C):
//
//	| version (1B) = 1 | kind (1B) | kind-specific |
//
//	kind 1 created:  | start (1B) | policy | units | drained |
//	kind 2 update:   | units | drained |
//	kind 3 snapshot: | start (1B) | policy | units | drained |
//	kind 4 policy:   | policy |
//
//	policy  = | uvarint ackTimeoutMs | uvarint maxDeliveries | uvarint nackDelayMs
//	          | uvarint maxNackDelayMs | uvarint nackBackoff*1000 | uvarint len | deadLetterTopic |
//	units   = | uvarint count | unit * count |
//	unit    = | uvarint segment | uvarint bucket | uvarint floor | uvarint read
//	          | uvarint entryCount | entry * entryCount |
//	entry   = | uvarint offset | state (1B) | uvarint deliveries | state 2 only: varint dueUnixMs |
//	state   = 0 ready | 1 acked | 2 delayed
//	drained = | uvarint count | uvarint segment * count |
//
// A unit's floor is its cumulative point: every offset below it is
// acknowledged. read is the next offset never delivered; the offsets in
// [floor, read) form the unit's window, and each of them is "ready, delivered
// once" unless an entry says otherwise: acked, delayed (nacked, to deliver
// again at due), or ready with another delivery count. Floors and reads only
// grow: applying a unit takes the larger of each. A message handed to a
// consumer and not yet answered is recorded as ready: after a restart it is
// delivered again, its count carried on.
//
// created and snapshot replace the whole state, update merges into it, policy
// replaces the policy. Units are sorted by (segment, bucket), entries by
// offset within [floor, read), drained ids ascending, without duplicates;
// nothing trails. So the encoding is canonical.

// entryState is the state of one offset in a unit's window.
type entryState uint8

const (
	entryReady    entryState = 0 // to deliver (again)
	entryAcked    entryState = 1
	entryDelayed  entryState = 2 // nacked: ready again at due
	entryInflight entryState = 3 // with a consumer until due; recorded as ready
	entryDead     entryState = 4 // on its way to the dead-letter topic; recorded as ready
)

// queuePolicy is the subscription's redelivery and dead-letter policy.
type queuePolicy struct {
	AckTimeout      time.Duration // 0: no ack timeout
	MaxDeliveries   uint32        // 0: unlimited
	NackDelay       time.Duration
	MaxNackDelay    time.Duration
	NackBackoff     float64 // >= 1; 1 is a fixed delay
	DeadLetterTopic string
}

// delayFor is the redelivery delay after the n-th delivery was nacked.
func (p queuePolicy) delayFor(n uint32) time.Duration {
	d := float64(p.NackDelay)
	if p.NackBackoff > 1 && n > 1 {
		d *= math.Pow(p.NackBackoff, float64(n-1))
	}
	if p.MaxNackDelay > 0 && d > float64(p.MaxNackDelay) {
		return p.MaxNackDelay
	}
	return time.Duration(d)
}

// queueEntryRecord is the recorded state of one offset.
type queueEntryRecord struct {
	Offset     uint64
	State      entryState // ready, acked or delayed
	Deliveries uint32
	Due        int64 // unix ms, delayed only
}

// queueUnitRecord is the recorded state of one unit: its floor and read
// cursors and the entries that differ from "ready, delivered once".
type queueUnitRecord struct {
	Unit        topology.Unit
	Floor, Read uint64
	Entries     []queueEntryRecord
}

// queueRecord is one record of a queue subscription's WAL.
type queueRecord struct {
	Kind    recordKind
	Start   startPosition // created and snapshot
	Policy  queuePolicy   // created, snapshot and policy
	Units   []queueUnitRecord
	Drained []topology.SegmentID
}

const kindPolicy recordKind = 4

// normalize sorts r's lists so that it encodes canonically. Entries of one
// unit are unique by construction.
func (r *queueRecord) normalize() {
	slices.SortFunc(r.Units, func(a, b queueUnitRecord) int { return compareUnits(a.Unit, b.Unit) })
	for i := range r.Units {
		slices.SortFunc(r.Units[i].Entries, func(a, b queueEntryRecord) int {
			switch {
			case a.Offset < b.Offset:
				return -1
			case a.Offset > b.Offset:
				return 1
			}
			return 0
		})
	}
	slices.Sort(r.Drained)
	r.Drained = slices.Compact(r.Drained)
}

func encodeQueueRecord(dst []byte, r *queueRecord) []byte {
	dst = append(dst, recordVersion, byte(r.Kind))
	if r.Kind == kindCreated || r.Kind == kindSnapshot {
		dst = append(dst, byte(r.Start))
	}
	if r.Kind != kindUpdate {
		dst = appendPolicy(dst, r.Policy)
	}
	if r.Kind == kindPolicy {
		return dst
	}
	dst = binary.AppendUvarint(dst, uint64(len(r.Units)))
	for _, u := range r.Units {
		dst = binary.AppendUvarint(dst, uint64(u.Unit.Segment))
		dst = binary.AppendUvarint(dst, uint64(u.Unit.Bucket))
		dst = binary.AppendUvarint(dst, u.Floor)
		dst = binary.AppendUvarint(dst, u.Read)
		dst = binary.AppendUvarint(dst, uint64(len(u.Entries)))
		for _, e := range u.Entries {
			dst = binary.AppendUvarint(dst, e.Offset)
			dst = append(dst, byte(e.State))
			dst = binary.AppendUvarint(dst, uint64(e.Deliveries))
			if e.State == entryDelayed {
				dst = binary.AppendVarint(dst, e.Due)
			}
		}
	}
	dst = binary.AppendUvarint(dst, uint64(len(r.Drained)))
	for _, id := range r.Drained {
		dst = binary.AppendUvarint(dst, uint64(id))
	}
	return dst
}

func appendPolicy(dst []byte, p queuePolicy) []byte {
	dst = binary.AppendUvarint(dst, uint64(p.AckTimeout.Milliseconds()))
	dst = binary.AppendUvarint(dst, uint64(p.MaxDeliveries))
	dst = binary.AppendUvarint(dst, uint64(p.NackDelay.Milliseconds()))
	dst = binary.AppendUvarint(dst, uint64(p.MaxNackDelay.Milliseconds()))
	dst = binary.AppendUvarint(dst, uint64(math.Round(p.NackBackoff*1000)))
	dst = binary.AppendUvarint(dst, uint64(len(p.DeadLetterTopic)))
	return append(dst, p.DeadLetterTopic...)
}

// maxPolicyMs bounds the durations of a recorded policy (about 292 years
// in nanoseconds would overflow time.Duration).
const maxPolicyMs = 1 << 40

// decodeQueueRecord decodes a body made by encodeQueueRecord. It never
// panics and accepts only canonical bodies.
func decodeQueueRecord(b []byte) (queueRecord, error) {
	d := recordDecoder{b: b}
	var r queueRecord
	if v := d.byte("version"); v != recordVersion && d.err == nil {
		return r, fmt.Errorf("%w: unsupported version %d", ErrBadRecord, v)
	}
	r.Kind = recordKind(d.byte("kind"))
	switch r.Kind {
	case kindCreated, kindSnapshot:
		r.Start = startPosition(d.byte("start"))
		if r.Start != startEarliest && r.Start != startLatest {
			d.fail("unknown start position")
		}
	case kindUpdate, kindPolicy:
	default:
		d.fail(fmt.Sprintf("unknown kind %d", r.Kind))
	}
	if r.Kind != kindUpdate {
		r.Policy = d.policy()
	}
	if r.Kind != kindPolicy {
		// A unit takes at least five bytes, an entry three, a drained id one.
		n := d.count("unit count", 5)
		if n > 0 {
			r.Units = make([]queueUnitRecord, n)
		}
		for i := 0; i < n && d.err == nil; i++ {
			u := &r.Units[i]
			u.Unit.Segment = topology.SegmentID(d.uvarint("segment"))
			bucket := d.uvarint("bucket")
			if bucket >= topology.MaxBuckets {
				d.fail("bucket out of range")
			}
			u.Unit.Bucket = int(bucket)
			u.Floor = d.uvarint("floor")
			u.Read = d.uvarint("read")
			if u.Read < u.Floor {
				d.fail("read below floor")
			}
			if i > 0 && compareUnits(r.Units[i-1].Unit, u.Unit) >= 0 {
				d.fail("units not sorted")
			}
			m := d.count("entry count", 3)
			if m > 0 {
				u.Entries = make([]queueEntryRecord, m)
			}
			for j := 0; j < m && d.err == nil; j++ {
				e := &u.Entries[j]
				e.Offset = d.uvarint("offset")
				e.State = entryState(d.byte("state"))
				deliveries := d.uvarint("deliveries")
				if deliveries > math.MaxUint32 {
					d.fail("deliveries out of range")
				}
				e.Deliveries = uint32(deliveries)
				switch e.State {
				case entryDelayed:
					e.Due = d.varint("due")
				case entryReady, entryAcked:
				default:
					d.fail("unknown entry state")
				}
				if e.Offset < u.Floor || e.Offset >= u.Read {
					d.fail("entry outside the window")
				}
				if j > 0 && u.Entries[j-1].Offset >= e.Offset {
					d.fail("entries not sorted")
				}
			}
		}
		if n := d.count("drained count", 1); n > 0 {
			r.Drained = make([]topology.SegmentID, n)
			for i := range r.Drained {
				r.Drained[i] = topology.SegmentID(d.uvarint("drained segment"))
				if i > 0 && r.Drained[i-1] >= r.Drained[i] {
					d.fail("drained segments not sorted")
				}
			}
		}
	}
	if d.err == nil && len(d.b) > 0 {
		d.fail(fmt.Sprintf("%d trailing bytes", len(d.b)))
	}
	if d.err != nil {
		return queueRecord{}, d.err
	}
	return r, nil
}

func (d *recordDecoder) policy() queuePolicy {
	var p queuePolicy
	ms := func(what string) time.Duration {
		v := d.uvarint(what)
		if v > maxPolicyMs {
			d.fail(what + " out of range")
		}
		return time.Duration(v) * time.Millisecond
	}
	p.AckTimeout = ms("ack timeout")
	maxDeliveries := d.uvarint("max deliveries")
	if maxDeliveries > math.MaxUint32 {
		d.fail("max deliveries out of range")
	}
	p.MaxDeliveries = uint32(maxDeliveries)
	p.NackDelay = ms("nack delay")
	p.MaxNackDelay = ms("max nack delay")
	backoff := d.uvarint("nack backoff")
	if backoff < 1000 || backoff > 1000_000 {
		d.fail("nack backoff out of range")
	}
	p.NackBackoff = float64(backoff) / 1000
	n := d.uvarint("dead-letter topic length")
	if d.err == nil && n > uint64(len(d.b)) {
		d.fail("dead-letter topic longer than the record")
	}
	if d.err == nil {
		p.DeadLetterTopic = string(d.b[:n])
		d.b = d.b[n:]
	}
	return p
}

func (d *recordDecoder) varint(what string) int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 || (n > 1 && d.b[n-1] == 0) {
		d.fail("bad " + what)
		return 0
	}
	d.b = d.b[n:]
	return v
}
