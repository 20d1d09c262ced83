package topology

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
)

// The JSON form is part of the wire contract (topic.describe, the layout
// push, the metadata KV) and is stable:
//
//	{"epoch":3,"next_id":5,"segments":[
//	  {"id":0,"state":"sealed","range":["0x0000000000000000","0x7fffffffffffffff"],
//	   "parents":[],"children":[3,4],"buckets":4,"created_epoch":1,"sealed_epoch":2}, ...]}
//
// Range bounds are "0x" and 16 hex digits (JSON numbers lose precision above
// 2^53); parents, children and segments are always arrays, never null;
// "partition" appears only on the partitions of a migrated fixed topic;
// "owner" (a node id) only when the segment has one.
// Fields appear in the order above. Decoding accepts unknown fields (so a
// describe reply may grow) and bounds of 1 to 16 hex digits, requires every
// field above except partition and owner, and runs Validate.

// layoutJSON and segmentJSON are the decoding forms: pointers tell a
// missing field from a zero one.
type layoutJSON struct {
	Epoch    *uint64        `json:"epoch"`
	NextID   *SegmentID     `json:"next_id"`
	Segments *[]segmentJSON `json:"segments"`
}

type segmentJSON struct {
	ID           *SegmentID   `json:"id"`
	State        *State       `json:"state"`
	Range        *Range       `json:"range"`
	Parents      *[]SegmentID `json:"parents"`
	Children     *[]SegmentID `json:"children"`
	Buckets      *int         `json:"buckets"`
	CreatedEpoch *uint64      `json:"created_epoch"`
	SealedEpoch  *uint64      `json:"sealed_epoch"`
	Partition    *int         `json:"partition"`
	Owner        *string      `json:"owner"`
	Replicas     []Replica    `json:"replicas"`
}

// MarshalJSON encodes r as ["0x%016x","0x%016x"].
func (r Range) MarshalJSON() ([]byte, error) { return r.appendJSON(nil), nil }

func (r Range) appendJSON(b []byte) []byte {
	b = append(b, `["`...)
	b = append(b, FormatHash(r.Lo)...)
	b = append(b, `","`...)
	b = append(b, FormatHash(r.Hi)...)
	return append(b, `"]`...)
}

// UnmarshalJSON decodes a two-element array of "0x" hex strings with
// Lo <= Hi. Errors wrap ErrBadHash for a bad bound, ErrInvalid otherwise.
func (r *Range) UnmarshalJSON(data []byte) error {
	bounds, ok := plainBounds(data)
	if !ok {
		if err := json.Unmarshal(data, &bounds); err != nil || len(bounds) != 2 {
			return errorf(ErrInvalid, "range %s: want [\"0x<lo>\",\"0x<hi>\"]", clip(data))
		}
	}
	lo, err := parseHexHash(bounds[0])
	if err != nil {
		return err
	}
	hi, err := parseHexHash(bounds[1])
	if err != nil {
		return err
	}
	if lo > hi {
		return errorf(ErrInvalid, "range [%s,%s] is empty: lo > hi", bounds[0], bounds[1])
	}
	*r = Range{Lo: lo, Hi: hi}
	return nil
}

// plainBounds splits the common form ["lo","hi"] — no spaces, no escapes —
// without a full JSON decode.
func plainBounds(data []byte) ([]string, bool) {
	text := string(data)
	if !strings.HasPrefix(text, `["`) || !strings.HasSuffix(text, `"]`) || len(text) < 4 {
		return nil, false
	}
	lo, hi, found := strings.Cut(text[2:len(text)-2], `","`)
	if !found || strings.ContainsAny(lo, `"\`) || strings.ContainsAny(hi, `"\`) {
		return nil, false
	}
	return []string{lo, hi}, true
}

// MarshalJSON encodes s in the stable form described in the package.
func (s Segment) MarshalJSON() ([]byte, error) { return s.appendJSON(nil), nil }

func (s *Segment) appendJSON(b []byte) []byte {
	b = append(b, `{"id":`...)
	b = strconv.AppendUint(b, uint64(s.ID), 10)
	b = append(b, `,"state":`...)
	if s.State.valid() {
		b = append(b, '"')
		b = append(b, s.State...)
		b = append(b, '"')
	} else {
		quoted, _ := json.Marshal(string(s.State)) // cannot fail for a string
		b = append(b, quoted...)
	}
	b = append(b, `,"range":`...)
	b = s.Range.appendJSON(b)
	b = append(b, `,"parents":`...)
	b = appendIDs(b, s.Parents)
	b = append(b, `,"children":`...)
	b = appendIDs(b, s.Children)
	b = append(b, `,"buckets":`...)
	b = strconv.AppendInt(b, int64(s.Buckets), 10)
	b = append(b, `,"created_epoch":`...)
	b = strconv.AppendUint(b, s.CreatedEpoch, 10)
	b = append(b, `,"sealed_epoch":`...)
	b = strconv.AppendUint(b, s.SealedEpoch, 10)
	if s.Partition >= 0 {
		b = append(b, `,"partition":`...)
		b = strconv.AppendInt(b, int64(s.Partition), 10)
	}
	if s.Owner != "" {
		b = append(b, `,"owner":`...)
		quoted, _ := json.Marshal(s.Owner) // cannot fail for a string
		b = append(b, quoted...)
	}
	if len(s.Replicas) > 0 {
		b = append(b, `,"replicas":`...)
		quoted, _ := json.Marshal(s.Replicas) // cannot fail for strings
		b = append(b, quoted...)
	}
	return append(b, '}')
}

func appendIDs(b []byte, ids []SegmentID) []byte {
	b = append(b, '[')
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendUint(b, uint64(id), 10)
	}
	return append(b, ']')
}

// UnmarshalJSON decodes one segment and checks its fields one by one; how it
// relates to other segments is checked by Layout.UnmarshalJSON. A missing
// partition means -1; empty parents and children decode as nil slices.
func (s *Segment) UnmarshalJSON(data []byte) error {
	var w segmentJSON
	if err := json.Unmarshal(data, &w); err != nil {
		return jsonError("segment", data, err)
	}
	decoded, err := w.segment(clip(data))
	if err != nil {
		return err
	}
	*s = decoded
	return nil
}

// segment checks that w has every required field; where names it in errors
// until its id is known.
func (w *segmentJSON) segment(where string) (Segment, error) {
	if w.ID == nil {
		return Segment{}, errorf(ErrInvalid, "segment %s: missing \"id\"", where)
	}
	id := *w.ID
	switch {
	case w.State == nil:
		return Segment{}, errorf(ErrInvalid, "segment %d: missing \"state\"", id)
	case !w.State.valid():
		return Segment{}, errorf(ErrInvalid, "segment %d: unknown state %q (want active, sealed or deleted)", id, *w.State)
	case w.Range == nil:
		return Segment{}, errorf(ErrInvalid, "segment %d: missing \"range\"", id)
	case w.Parents == nil || w.Children == nil:
		return Segment{}, errorf(ErrInvalid, "segment %d: missing \"parents\" or \"children\" (write [] for none)", id)
	case w.Buckets == nil:
		return Segment{}, errorf(ErrInvalid, "segment %d: missing \"buckets\"", id)
	case w.CreatedEpoch == nil || w.SealedEpoch == nil:
		return Segment{}, errorf(ErrInvalid, "segment %d: missing \"created_epoch\" or \"sealed_epoch\"", id)
	case w.Partition != nil && *w.Partition < 0:
		return Segment{}, errorf(ErrInvalid, "segment %d: partition %d is negative (omit it for a normal segment)", id, *w.Partition)
	}
	s := Segment{
		ID:           id,
		Range:        *w.Range,
		State:        *w.State,
		Parents:      nilIfEmpty(*w.Parents),
		Children:     nilIfEmpty(*w.Children),
		Buckets:      *w.Buckets,
		CreatedEpoch: *w.CreatedEpoch,
		SealedEpoch:  *w.SealedEpoch,
		Partition:    -1,
	}
	if w.Partition != nil {
		s.Partition = *w.Partition
	}
	if w.Owner != nil {
		if *w.Owner == "" {
			return Segment{}, errorf(ErrInvalid, "segment %d: empty owner (omit it for none)", id)
		}
		s.Owner = *w.Owner
	}
	if len(w.Replicas) > 0 {
		s.Replicas = w.Replicas
	}
	return s, nil
}

// MarshalJSON encodes l in the stable form described in the package. It
// does not validate l.
func (l Layout) MarshalJSON() ([]byte, error) {
	b := make([]byte, 0, 64+200*len(l.Segments))
	b = append(b, `{"epoch":`...)
	b = strconv.AppendUint(b, l.Epoch, 10)
	b = append(b, `,"next_id":`...)
	b = strconv.AppendUint(b, uint64(l.NextID), 10)
	b = append(b, `,"segments":[`...)
	for i := range l.Segments {
		if i > 0 {
			b = append(b, ',')
		}
		b = l.Segments[i].appendJSON(b)
	}
	return append(b, "]}"...), nil
}

// UnmarshalJSON decodes a layout and runs Validate on it; on any error l is
// left unchanged and the error wraps ErrInvalid (or ErrBadHash for a range
// bound).
func (l *Layout) UnmarshalJSON(data []byte) error {
	var w layoutJSON
	if err := json.Unmarshal(data, &w); err != nil {
		return jsonError("layout", data, err)
	}
	switch {
	case w.Epoch == nil:
		return errorf(ErrInvalid, "layout: missing \"epoch\"")
	case w.NextID == nil:
		return errorf(ErrInvalid, "layout: missing \"next_id\"")
	case w.Segments == nil:
		return errorf(ErrInvalid, "layout: missing \"segments\"")
	}
	decoded := Layout{Epoch: *w.Epoch, NextID: *w.NextID}
	if len(*w.Segments) > 0 {
		decoded.Segments = make([]Segment, len(*w.Segments))
	}
	for i := range *w.Segments {
		s, err := (*w.Segments)[i].segment("#" + strconv.Itoa(i))
		if err != nil {
			return err
		}
		decoded.Segments[i] = s
	}
	if err := decoded.Validate(); err != nil {
		return err
	}
	*l = decoded
	return nil
}

// jsonError passes on errors from nested decoders, which already say what is
// wrong, and wraps syntax and type errors from encoding/json.
func jsonError(what string, data []byte, err error) error {
	var own *topologyError
	if errors.As(err, &own) {
		return own
	}
	msg := strings.TrimPrefix(err.Error(), "json: ")
	return errorf(ErrInvalid, "%s %s: %s", what, clip(data), msg)
}

// clip shortens data for an error message.
func clip(data []byte) string {
	const limit = 64
	if len(data) > limit {
		return string(data[:limit]) + "..."
	}
	return string(data)
}

func nilIfEmpty[T any](s []T) []T {
	if len(s) == 0 {
		return nil
	}
	return s
}
