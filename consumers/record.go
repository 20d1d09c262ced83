package consumers

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/braidmq/braid/topology"
)

// The group's own WAL records. Each is the payload of one wal.Record (the
// wal frames it with a version byte and a CRC32C); this is the body:
//
//	| version (1B) = 1 | kind (1B) | kind-specific |
//
//	kind 1 created:  | start (1B) | cursors | drained |
//	kind 2 update:   | cursors | drained |
//	kind 3 snapshot: | start (1B) | cursors | drained |
//
//	start   = 0 earliest | 1 latest
//	cursors = | uvarint count | (uvarint segment | uvarint bucket | uvarint acked) * count |
//	drained = | uvarint count | uvarint segment * count |
//
// acked is the unit's ack cursor: the next offset not yet acknowledged.
// created and snapshot replace the whole state (a snapshot is written
// before the log head is truncated, so the first record of a log is always
// one of them); update merges into it. Cursors are sorted by unit and
// drained ids ascending, without duplicates, so that encoding is canonical.

// ErrBadRecord is wrapped by every error of decodeRecord: the group's WAL
// holds a record this version cannot read, so the subscription's state is
// not trustworthy and the group refuses to serve it.
var ErrBadRecord = errors.New("braid/consumers: bad subscription record")

const recordVersion = 1

type recordKind uint8

const (
	kindCreated  recordKind = 1
	kindUpdate   recordKind = 2
	kindSnapshot recordKind = 3
)

// startPosition is where a new subscription starts reading.
type startPosition uint8

const (
	startEarliest startPosition = 0
	startLatest   startPosition = 1
)

func (s startPosition) String() string {
	if s == startLatest {
		return "latest"
	}
	return "earliest"
}

// unitCursor is the ack cursor of one unit.
type unitCursor struct {
	Unit  topology.Unit
	Acked uint64
}

// stateRecord is one record of the group's WAL.
type stateRecord struct {
	Kind    recordKind
	Start   startPosition // created and snapshot only
	Cursors []unitCursor
	Drained []topology.SegmentID
}

// normalize sorts r's lists and drops duplicates (the last cursor of a unit
// wins in an update; the largest, which is what apply keeps), so that
// equal records encode equally.
func (r *stateRecord) normalize() {
	slices.SortStableFunc(r.Cursors, func(a, b unitCursor) int { return compareUnits(a.Unit, b.Unit) })
	out := r.Cursors[:0]
	for _, c := range r.Cursors {
		if n := len(out); n > 0 && out[n-1].Unit == c.Unit {
			out[n-1].Acked = max(out[n-1].Acked, c.Acked)
			continue
		}
		out = append(out, c)
	}
	r.Cursors = out
	slices.Sort(r.Drained)
	r.Drained = slices.Compact(r.Drained)
}

// encodeRecord appends the body of r to dst. r must be normalized.
func encodeRecord(dst []byte, r stateRecord) []byte {
	dst = append(dst, recordVersion, byte(r.Kind))
	if r.Kind != kindUpdate {
		dst = append(dst, byte(r.Start))
	}
	dst = binary.AppendUvarint(dst, uint64(len(r.Cursors)))
	for _, c := range r.Cursors {
		dst = binary.AppendUvarint(dst, uint64(c.Unit.Segment))
		dst = binary.AppendUvarint(dst, uint64(c.Unit.Bucket))
		dst = binary.AppendUvarint(dst, c.Acked)
	}
	dst = binary.AppendUvarint(dst, uint64(len(r.Drained)))
	for _, id := range r.Drained {
		dst = binary.AppendUvarint(dst, uint64(id))
	}
	return dst
}

// decodeRecord decodes a body made by encodeRecord. It never panics, and
// accepts only canonical bodies: sorted lists without duplicates, nothing
// trailing.
func decodeRecord(b []byte) (stateRecord, error) {
	d := recordDecoder{b: b}
	var r stateRecord
	if d.byte("version") != recordVersion && d.err == nil {
		return r, fmt.Errorf("%w: unsupported version %d", ErrBadRecord, b[0])
	}
	r.Kind = recordKind(d.byte("kind"))
	switch r.Kind {
	case kindCreated, kindSnapshot:
		r.Start = startPosition(d.byte("start"))
		if r.Start != startEarliest && r.Start != startLatest && d.err == nil {
			return r, fmt.Errorf("%w: unknown start position %d", ErrBadRecord, r.Start)
		}
	case kindUpdate:
	default:
		if d.err == nil {
			return r, fmt.Errorf("%w: unknown kind %d", ErrBadRecord, r.Kind)
		}
	}
	// A cursor takes at least three bytes and a drained id one, which
	// bounds the allocations by the size of the body.
	if n := d.count("cursor count", 3); n > 0 {
		r.Cursors = make([]unitCursor, n)
		for i := range r.Cursors {
			c := &r.Cursors[i]
			c.Unit.Segment = topology.SegmentID(d.uvarint("segment"))
			bucket := d.uvarint("bucket")
			if bucket >= topology.MaxBuckets {
				d.fail("bucket out of range")
			}
			c.Unit.Bucket = int(bucket)
			c.Acked = d.uvarint("ack cursor")
			if i > 0 && compareUnits(r.Cursors[i-1].Unit, c.Unit) >= 0 {
				d.fail("cursors not sorted")
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
	if d.err == nil && len(d.b) > 0 {
		d.fail(fmt.Sprintf("%d trailing bytes", len(d.b)))
	}
	if d.err != nil {
		return stateRecord{}, d.err
	}
	return r, nil
}

// recordDecoder walks a record body; the first failure sticks.
type recordDecoder struct {
	b   []byte
	err error
}

func (d *recordDecoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", ErrBadRecord, what)
	}
	d.b = nil
}

func (d *recordDecoder) byte(what string) byte {
	if len(d.b) == 0 {
		d.fail("missing " + what)
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *recordDecoder) uvarint(what string) uint64 {
	v, n := binary.Uvarint(d.b)
	// A longer encoding than needed ends in a zero byte; refusing it keeps
	// the encoding canonical.
	if n <= 0 || (n > 1 && d.b[n-1] == 0) {
		d.fail("bad " + what)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *recordDecoder) count(what string, minBytes int) int {
	n := d.uvarint(what)
	if d.err == nil && n > uint64(len(d.b)/minBytes) {
		d.fail(what + " exceeds the record")
		return 0
	}
	return int(n)
}
