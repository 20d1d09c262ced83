package api

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
)

// Direct reads, for checkpoint consumers: no subscription, no server-side
// state. The client follows the layout itself (topic.describe and the layout
// push) and applies the ordering rule with its own drained segments.
//
//	braid.v1.read.fetch.<tenant>.<namespace>.<topic>    ReadRequest   -> the binary read reply (below)
//	braid.v1.read.offsets.<tenant>.<namespace>.<topic>  OffsetsRequest -> OffsetsReply (JSON)
//
// # Read reply (read.fetch)
//
//	| version (1B) = 1 | uvarint epoch | uvarint unitCount | unit * unitCount
//	| uvarint count | message * count |                  (message as in the fetch reply; deliveries = 0)
//	unit = | uvarint segment | uvarint bucket | uvarint code (0 = ok) | uvarint first | uvarint next | flags (1B) |
//	       [ uvarint lostFrom | uvarint lostTo ]    (when flags bit 1 is set)
//	       [ uvarint len | message (UTF-8) ]        (when flags bit 2 is set)
//	       [ uvarint resume ]                       (when flags bit 3 is set)
//	flags: bit 0 (1) sealed, bit 1 (2) a lost range follows, bit 2 (4) a
//	message follows (what went wrong, with a code), bit 3 (8) a resume
//	offset follows (compacted reads); no other bit is set
//
// There is one unit entry per requested unit, in request order. first and
// next are the unit's first retained offset and next offset after the read;
// sealed says next is final (the layout at epoch shows the segment sealed,
// so nothing more will be appended). code is SEGMENT_GONE when the segment
// was deleted by retention, OFFSET_GONE when the requested offset is below
// first (retention removed it), OFFSETS_LOST when the records at the
// requested offset were lost to damage in the unit's log (the lost range
// [lostFrom, lostTo) follows; read on from lostTo), SEGMENT_NOT_FOUND when
// the layout has no such segment; no message of that unit is returned then.
// A read that reaches a lost range stops before it; the next read, from its
// start, reports it. Messages come in offset order per unit. A compacted
// read (ReadRequest.Compacted) sets resume on every unit read without
// error: the offset the unit's next read goes on from, past the offsets
// compaction removed (which may follow the last message, or stand in for
// a reply with no message of the unit). (Replies without a lost range are
// what earlier releases sent: flags 0 or 1.)

// Read verbs.
const (
	ReadPrefix  = Prefix + ".read"
	ReadFetch   = "fetch"
	ReadOffsets = "offsets"
)

// ReadSubject is braid.v1.read.<verb>.<tenant>.<namespace>.<topic>.
func ReadSubject(verb, tenant, namespace, topic string) string {
	return TopicSubject(ReadPrefix+"."+verb, tenant, namespace, topic)
}

// ReadUnit names one unit and the offset to read it from.
type ReadUnit struct {
	Segment uint64 `json:"segment"`
	Bucket  int    `json:"bucket"`
	Offset  uint64 `json:"offset"`
}

// ReadRequest is the body of read.fetch: messages of several units at once,
// shared fairly between them.
type ReadRequest struct {
	Units []ReadUnit `json:"units"`
	// Max messages in the reply (default 256, at most 10000).
	Max int `json:"max,omitempty"`
	// MaxBytes of payload (default 1 MiB); at least one message when one is
	// available.
	MaxBytes int `json:"max_bytes,omitempty"`
	// Wait is how long the server holds a read that finds nothing in any
	// unit and no unit status worth reporting ("0s" to "30s", default "0s").
	Wait string `json:"wait,omitempty"`
	// Format "binary" (default, the read reply above) or "json"
	// (ReadReplyJSON), as consume.fetch.
	Format string `json:"format,omitempty"`
	// Compacted reads the compacted view: below a unit's compaction
	// horizon only the records compaction kept (the latest of each key),
	// at their offsets; an offset below the unit's first is not
	// OFFSET_GONE but read from the next kept one.
	Compacted bool `json:"compacted,omitempty"`
}

// UnitStatusJSON is one unit of a ReadReplyJSON: UnitStatus with the
// code's symbol beside its number, and the message after it ("SYMBOL" or
// "SYMBOL: message"; both omitted when the unit is fine).
type UnitStatusJSON struct {
	Segment uint64 `json:"segment"`
	Bucket  int    `json:"bucket"`
	Code    int    `json:"code,omitempty"`
	Error   string `json:"error,omitempty"`
	First   uint64 `json:"first"`
	Next    uint64 `json:"next"`
	Sealed  bool   `json:"sealed"`
	// LostFrom and LostTo: see UnitStatus.
	LostFrom uint64 `json:"lost_from,omitempty"`
	LostTo   uint64 `json:"lost_to,omitempty"`
	// Resume: see UnitStatus.
	Resume uint64 `json:"resume,omitempty"`
}

// ReadReplyJSON is the reply of a read.fetch with "format":"json":
// the read reply with payloads base64-encoded, for clients without a
// decoder.
type ReadReplyJSON struct {
	Epoch    uint64           `json:"epoch"`
	Units    []UnitStatusJSON `json:"units"`
	Messages []JSONMessage    `json:"messages"`
}

// UnitStatus is the state of one unit in a read reply.
type UnitStatus struct {
	Segment uint64
	Bucket  int
	Code    int // 0 ok, else a code number (SEGMENT_GONE, OFFSET_GONE...)
	First   uint64
	Next    uint64
	Sealed  bool
	// LostFrom and LostTo are set with OFFSETS_LOST: the offsets lost to
	// damage, [LostFrom, LostTo); read on from LostTo.
	LostFrom, LostTo uint64
	// Message says what went wrong, with some codes (OFFSETS_LOST,
	// INTERNAL, UNAVAILABLE).
	Message string
	// Resume, in compacted reads, is the offset the unit's next read goes
	// on from (0: not set).
	Resume uint64
}

// ReadReply is the decoded read reply.
type ReadReply struct {
	Epoch    uint64
	Units    []UnitStatus
	Messages []Message
}

// The flags of a unit in the read reply.
const (
	unitSealed  = 1 << 0
	unitLost    = 1 << 1
	unitMessage = 1 << 2
	unitResume  = 1 << 3
)

// AppendReadReply encodes a read reply.
func AppendReadReply(dst []byte, r *ReadReply) []byte {
	dst = append(dst, FormatVersion)
	dst = binary.AppendUvarint(dst, r.Epoch)
	dst = binary.AppendUvarint(dst, uint64(len(r.Units)))
	for _, u := range r.Units {
		dst = binary.AppendUvarint(dst, u.Segment)
		dst = binary.AppendUvarint(dst, uint64(u.Bucket))
		dst = binary.AppendUvarint(dst, uint64(u.Code))
		dst = binary.AppendUvarint(dst, u.First)
		dst = binary.AppendUvarint(dst, u.Next)
		flags := byte(0)
		if u.Sealed {
			flags |= unitSealed
		}
		if u.LostTo > u.LostFrom {
			flags |= unitLost
		}
		if u.Message != "" {
			flags |= unitMessage
		}
		if u.Resume != 0 {
			flags |= unitResume
		}
		dst = append(dst, flags)
		if flags&unitLost != 0 {
			dst = binary.AppendUvarint(dst, u.LostFrom)
			dst = binary.AppendUvarint(dst, u.LostTo)
		}
		if flags&unitMessage != 0 {
			dst = binary.AppendUvarint(dst, uint64(len(u.Message)))
			dst = append(dst, u.Message...)
		}
		if flags&unitResume != 0 {
			dst = binary.AppendUvarint(dst, u.Resume)
		}
	}
	dst = binary.AppendUvarint(dst, uint64(len(r.Messages)))
	for i := range r.Messages {
		dst = AppendMessage(dst, &r.Messages[i])
	}
	return dst
}

// DecodeReadReply decodes a read reply. Slices alias b.
func DecodeReadReply(b []byte) (ReadReply, error) {
	d := decoder{b: b}
	d.version()
	var r ReadReply
	r.Epoch = d.uvarint("epoch")
	n := d.count("unit count", 6)
	if n > 0 {
		r.Units = make([]UnitStatus, 0, n)
	}
	for i := 0; i < n && d.err == nil; i++ {
		var u UnitStatus
		u.Segment = d.uvarint("segment")
		u.Bucket = int(d.uvarint("bucket"))
		u.Code = int(d.uvarint("code"))
		u.First = d.uvarint("first")
		u.Next = d.uvarint("next")
		switch f := d.byteValue("flags"); {
		case d.err != nil:
		case f&^(unitSealed|unitLost|unitMessage|unitResume) != 0:
			d.fail(fmt.Sprintf("unknown unit flags %#x", f))
		default:
			u.Sealed = f&unitSealed != 0
			if f&unitLost != 0 {
				u.LostFrom, u.LostTo = d.uvarint("lost from"), d.uvarint("lost to")
				if d.err == nil && u.LostTo <= u.LostFrom {
					d.fail("empty lost range")
				}
			}
			if f&unitMessage != 0 {
				if u.Message = string(d.bytes("message")); d.err == nil && u.Message == "" {
					d.fail("empty message")
				}
			}
			if f&unitResume != 0 {
				if u.Resume = d.uvarint("resume"); d.err == nil && u.Resume == 0 {
					d.fail("resume 0")
				}
			}
		}
		r.Units = append(r.Units, u)
	}
	r.Messages = d.messages()
	if err := d.end(); err != nil {
		return ReadReply{}, err
	}
	return r, nil
}

// OffsetsRequest is the body of read.offsets. With Time set (unix ms), each
// unit's TimeOffset is where its records' times cross Time: the first offset
// whose time is >= Time when times do not decrease along the log (server
// times always; producers setting Braid-Time may break it, and then the
// answer is one offset o with time(o) >= Time and time(o-1) < Time, found by
// binary search). It is next when every record is older. Time 0 (or
// absent) asks for no time offset.
type OffsetsRequest struct {
	Time int64 `json:"time,omitempty"`
}

// UnitOffsets is one unit of an OffsetsReply.
//
// In JSON, time_offset is present, 0 included, exactly when the request
// asked with a time (HasTimeOffset); without one it is absent.
type UnitOffsets struct {
	Segment    uint64 `json:"segment"`
	Bucket     int    `json:"bucket"`
	First      uint64 `json:"first"`
	Next       uint64 `json:"next"`
	Sealed     bool   `json:"sealed"`
	TimeOffset uint64 `json:"time_offset"`
	// HasTimeOffset says TimeOffset was asked for (OffsetsRequest.Time).
	HasTimeOffset bool `json:"-"`
}

// unitOffsetsJSON is the JSON form of UnitOffsets: time_offset is a
// pointer, so that 0 is written when asked for and absent when not.
type unitOffsetsJSON struct {
	Segment    uint64  `json:"segment"`
	Bucket     int     `json:"bucket"`
	First      uint64  `json:"first"`
	Next       uint64  `json:"next"`
	Sealed     bool    `json:"sealed"`
	TimeOffset *uint64 `json:"time_offset,omitempty"`
}

// MarshalJSON writes time_offset when HasTimeOffset is set, even when it is 0.
func (u UnitOffsets) MarshalJSON() ([]byte, error) {
	w := unitOffsetsJSON{Segment: u.Segment, Bucket: u.Bucket, First: u.First, Next: u.Next, Sealed: u.Sealed}
	if u.HasTimeOffset {
		w.TimeOffset = &u.TimeOffset
	}
	return json.Marshal(w)
}

// UnmarshalJSON sets HasTimeOffset when time_offset is present.
func (u *UnitOffsets) UnmarshalJSON(data []byte) error {
	var w unitOffsetsJSON
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	*u = UnitOffsets{Segment: w.Segment, Bucket: w.Bucket, First: w.First, Next: w.Next, Sealed: w.Sealed}
	if w.TimeOffset != nil {
		u.TimeOffset, u.HasTimeOffset = *w.TimeOffset, true
	}
	return nil
}

// OffsetsReply lists every unit of every segment that is not deleted, at the
// layout epoch Epoch.
type OffsetsReply struct {
	Epoch uint64        `json:"epoch"`
	Units []UnitOffsets `json:"units"`
}
