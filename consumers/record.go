package consumers

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/braidmq/braid/routing"
	"github.com/braidmq/braid/topology"
)

// The group's own WAL records. Each is the payload of one wal.Record (the
// wal frames it with a version byte and a CRC32C); this is the body:
//
//	| version (1B) = 1 | kind (1B) | kind-specific |
//
//	kind 1 created:  | start (1B) | cursors | drained |
//	kind 2 update:   | cursors | drained |
//	kind 3 snapshot: | start (1B) | cursors | drained |                      (read only)
//	kind 4 owners:   | owners | sessions |
//	kind 5 snapshot: | start (1B) | cursors | drained | owners | sessions |
//
//	start    = 0 earliest | 1 latest, plus 128 when it reads the compacted view
//	cursors  = | uvarint count | (uvarint segment | uvarint bucket | uvarint acked) * count |
//	drained  = | uvarint count | uvarint segment * count |
//	owners   = | uvarint count | (uvarint segment | uvarint bucket | name) * count |
//	sessions = | uvarint count | (name | uvarint timeout) * count |
//	name     = | uvarint length | bytes |
//
// acked is the unit's ack cursor: the next offset not yet acknowledged.
// An owner is the consumer a unit was last given to; in an owners record an
// empty name says the unit has no owner any more (a snapshot lists owned
// units only). A session is the session timeout, in nanoseconds (> 0), of
// a consumer named as an owner. Names follow the name rule.
//
// created and the snapshots replace the whole state (a snapshot is written
// before the log head is truncated, so the first record of a log is always
// one of them); update and owners merge into it. Kind 3 is the snapshot of
// logs written before ownership was recorded: it is still read, and kind 5
// is written instead. Cursors and owners are sorted by unit, drained ids
// ascending and sessions by name, without duplicates, so that encoding is
// canonical.

// ErrBadRecord is wrapped by every error of decodeRecord: the group's WAL
// holds a record this version cannot read, so the subscription's state is
// not trustworthy and the group refuses to serve it.
var ErrBadRecord = errors.New("braid/consumers: bad subscription record")

const recordVersion = 1

type recordKind uint8

const (
	kindCreated  recordKind = 1
	kindUpdate   recordKind = 2
	kindSnapshot recordKind = 3 // without owners; read only
	kindOwners   recordKind = 4
	// kindSnapshotOwners is the snapshot the group writes.
	kindSnapshotOwners recordKind = 5
)

// hasStart reports whether records of kind k carry a start position (they
// replace the whole state).
func (k recordKind) hasStart() bool {
	return k == kindCreated || k == kindSnapshot || k == kindSnapshotOwners
}

// hasOwners reports whether records of kind k carry owners and sessions.
func (k recordKind) hasOwners() bool { return k == kindOwners || k == kindSnapshotOwners }

// hasCursors reports whether records of kind k carry cursors and drained
// segments.
func (k recordKind) hasCursors() bool { return k != kindOwners }

// startPosition is where a new subscription starts reading.
type startPosition uint8

const (
	startEarliest startPosition = 0
	startLatest   startPosition = 1
	// startCompacted, or'ed with the position, makes a stream subscription
	// read the topic's compacted view (api.JoinRequest.ReadCompacted).
	startCompacted startPosition = 1 << 7
)

func (s startPosition) String() string {
	if s&^startCompacted == startLatest {
		return "latest"
	}
	return "earliest"
}

// compacted reports whether the subscription reads the compacted view.
func (s startPosition) compacted() bool { return s&startCompacted != 0 }

// unitCursor is the ack cursor of one unit.
type unitCursor struct {
	Unit  topology.Unit
	Acked uint64
}

// unitOwner names the consumer a unit was given to; "" for nobody.
type unitOwner struct {
	Unit  topology.Unit
	Owner string
}

// consumerSession is the session timeout of one consumer.
type consumerSession struct {
	Consumer string
	Timeout  time.Duration
}

// stateRecord is one record of the group's WAL.
type stateRecord struct {
	Kind     recordKind
	Start    startPosition // created and snapshots only
	Cursors  []unitCursor
	Drained  []topology.SegmentID
	Owners   []unitOwner       // owners and kind 5 snapshot only
	Sessions []consumerSession // owners and kind 5 snapshot only
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

	// Owners and sessions: the last entry of a unit or consumer wins.
	slices.SortStableFunc(r.Owners, func(a, b unitOwner) int { return compareUnits(a.Unit, b.Unit) })
	owners := r.Owners[:0]
	for _, o := range r.Owners {
		if n := len(owners); n > 0 && owners[n-1].Unit == o.Unit {
			owners[n-1] = o
			continue
		}
		owners = append(owners, o)
	}
	r.Owners = owners
	slices.SortStableFunc(r.Sessions, func(a, b consumerSession) int { return cmp.Compare(a.Consumer, b.Consumer) })
	sessions := r.Sessions[:0]
	for _, c := range r.Sessions {
		if n := len(sessions); n > 0 && sessions[n-1].Consumer == c.Consumer {
			sessions[n-1] = c
			continue
		}
		sessions = append(sessions, c)
	}
	r.Sessions = sessions
}

// encodeRecord appends the body of r to dst. r must be normalized.
func encodeRecord(dst []byte, r stateRecord) []byte {
	dst = append(dst, recordVersion, byte(r.Kind))
	if r.Kind.hasStart() {
		dst = append(dst, byte(r.Start))
	}
	if r.Kind.hasCursors() {
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
	}
	if r.Kind.hasOwners() {
		dst = binary.AppendUvarint(dst, uint64(len(r.Owners)))
		for _, o := range r.Owners {
			dst = binary.AppendUvarint(dst, uint64(o.Unit.Segment))
			dst = binary.AppendUvarint(dst, uint64(o.Unit.Bucket))
			dst = appendName(dst, o.Owner)
		}
		dst = binary.AppendUvarint(dst, uint64(len(r.Sessions)))
		for _, c := range r.Sessions {
			dst = appendName(dst, c.Consumer)
			dst = binary.AppendUvarint(dst, uint64(c.Timeout))
		}
	}
	return dst
}

func appendName(dst []byte, name string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(name)))
	return append(dst, name...)
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
	case kindCreated, kindSnapshot, kindSnapshotOwners:
		r.Start = startPosition(d.byte("start"))
		if base := r.Start &^ startCompacted; base != startEarliest && base != startLatest && d.err == nil {
			return r, fmt.Errorf("%w: unknown start position %d", ErrBadRecord, r.Start)
		}
	case kindUpdate, kindOwners:
	default:
		if d.err == nil {
			return r, fmt.Errorf("%w: unknown kind %d", ErrBadRecord, r.Kind)
		}
	}
	if r.Kind.hasCursors() {
		d.cursors(&r)
	}
	if r.Kind.hasOwners() {
		d.owners(&r)
	}
	if d.err == nil && len(d.b) > 0 {
		d.fail(fmt.Sprintf("%d trailing bytes", len(d.b)))
	}
	if d.err != nil {
		return stateRecord{}, d.err
	}
	return r, nil
}

// cursors decodes the cursors and drained segments of r.
func (d *recordDecoder) cursors(r *stateRecord) {
	// A cursor takes at least three bytes and a drained id one, which
	// bounds the allocations by the size of the body.
	if n := d.count("cursor count", 3); n > 0 {
		r.Cursors = make([]unitCursor, n)
		for i := range r.Cursors {
			c := &r.Cursors[i]
			c.Unit = d.unit()
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
}

// owners decodes the owners and sessions of r. Only an owners record may
// clear a unit's owner (an empty name).
func (d *recordDecoder) owners(r *stateRecord) {
	// An owner takes at least three bytes and a session three.
	if n := d.count("owner count", 3); n > 0 {
		r.Owners = make([]unitOwner, n)
		for i := range r.Owners {
			o := &r.Owners[i]
			o.Unit = d.unit()
			o.Owner = d.name("owner", r.Kind == kindOwners)
			if i > 0 && compareUnits(r.Owners[i-1].Unit, o.Unit) >= 0 {
				d.fail("owners not sorted")
			}
		}
	}
	if n := d.count("session count", 3); n > 0 {
		r.Sessions = make([]consumerSession, n)
		for i := range r.Sessions {
			c := &r.Sessions[i]
			c.Consumer = d.name("session consumer", false)
			timeout := d.uvarint("session timeout")
			if timeout == 0 || timeout > math.MaxInt64 {
				d.fail("session timeout out of range")
			}
			c.Timeout = time.Duration(timeout)
			if i > 0 && r.Sessions[i-1].Consumer >= c.Consumer {
				d.fail("sessions not sorted")
			}
		}
	}
}

func (d *recordDecoder) unit() topology.Unit {
	seg := topology.SegmentID(d.uvarint("segment"))
	bucket := d.uvarint("bucket")
	if bucket >= topology.MaxBuckets {
		d.fail("bucket out of range")
	}
	return topology.Unit{Segment: seg, Bucket: int(bucket)}
}

// name decodes a consumer name, which must follow the name rule; empty
// only when allowEmpty.
func (d *recordDecoder) name(what string, allowEmpty bool) string {
	n := d.uvarint(what + " length")
	if d.err != nil {
		return ""
	}
	if n > uint64(len(d.b)) {
		d.fail(what + " exceeds the record")
		return ""
	}
	name := string(d.b[:n])
	d.b = d.b[n:]
	if (name != "" || !allowEmpty) && routing.ValidateName(name) != nil {
		d.fail("bad " + what + " name")
		return ""
	}
	return name
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
