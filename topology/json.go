package topology

import (
	"encoding/json"
	"errors"
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
// "partition" appears only on the partitions of a migrated fixed topic.
// Decoding accepts unknown fields (so a describe reply may grow) but
// requires every field above except partition, and runs Validate.

type layoutJSON struct {
	Epoch    *uint64    `json:"epoch"`
	NextID   *SegmentID `json:"next_id"`
	Segments *[]Segment `json:"segments"`
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
	Partition    *int         `json:"partition,omitempty"`
}

// MarshalJSON encodes r as ["0x%016x","0x%016x"].
func (r Range) MarshalJSON() ([]byte, error) {
	return []byte(`["` + FormatHash(r.Lo) + `","` + FormatHash(r.Hi) + `"]`), nil
}

// UnmarshalJSON decodes a two-element array of "0x" hex strings with
// Lo <= Hi. Errors wrap ErrBadHash for a bad bound, ErrInvalid otherwise.
func (r *Range) UnmarshalJSON(data []byte) error {
	var bounds []string
	if err := json.Unmarshal(data, &bounds); err != nil || len(bounds) != 2 {
		return errorf(ErrInvalid, "range %s: want [\"0x<lo>\",\"0x<hi>\"]", clip(data))
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

// MarshalJSON encodes s in the stable form described in the package.
func (s Segment) MarshalJSON() ([]byte, error) {
	parents, children := nonNil(s.Parents), nonNil(s.Children)
	w := segmentJSON{
		ID: &s.ID, State: &s.State, Range: &s.Range,
		Parents: &parents, Children: &children,
		Buckets: &s.Buckets, CreatedEpoch: &s.CreatedEpoch, SealedEpoch: &s.SealedEpoch,
	}
	if s.Partition >= 0 {
		w.Partition = &s.Partition
	}
	return json.Marshal(w)
}

// UnmarshalJSON decodes one segment and checks its fields one by one; how it
// relates to other segments is checked by Layout.UnmarshalJSON. A missing
// partition means -1; empty parents and children decode as nil slices.
func (s *Segment) UnmarshalJSON(data []byte) error {
	var w segmentJSON
	if err := json.Unmarshal(data, &w); err != nil {
		return jsonError("segment", data, err)
	}
	switch {
	case w.ID == nil:
		return errorf(ErrInvalid, "segment %s: missing \"id\"", clip(data))
	case w.State == nil:
		return errorf(ErrInvalid, "segment %d: missing \"state\"", *w.ID)
	case !w.State.valid():
		return errorf(ErrInvalid, "segment %d: unknown state %q (want active, sealed or deleted)", *w.ID, *w.State)
	case w.Range == nil:
		return errorf(ErrInvalid, "segment %d: missing \"range\"", *w.ID)
	case w.Parents == nil || w.Children == nil:
		return errorf(ErrInvalid, "segment %d: missing \"parents\" or \"children\" (write [] for none)", *w.ID)
	case w.Buckets == nil:
		return errorf(ErrInvalid, "segment %d: missing \"buckets\"", *w.ID)
	case w.CreatedEpoch == nil || w.SealedEpoch == nil:
		return errorf(ErrInvalid, "segment %d: missing \"created_epoch\" or \"sealed_epoch\"", *w.ID)
	case w.Partition != nil && *w.Partition < 0:
		return errorf(ErrInvalid, "segment %d: partition %d is negative (omit it for a normal segment)", *w.ID, *w.Partition)
	}
	*s = Segment{
		ID:           *w.ID,
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
	return nil
}

// MarshalJSON encodes l in the stable form described in the package. It
// does not validate l.
func (l Layout) MarshalJSON() ([]byte, error) {
	segments := l.Segments
	if segments == nil {
		segments = []Segment{}
	}
	return json.Marshal(layoutJSON{Epoch: &l.Epoch, NextID: &l.NextID, Segments: &segments})
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
	decoded := Layout{Epoch: *w.Epoch, NextID: *w.NextID, Segments: nilIfEmpty(*w.Segments)}
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

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func nilIfEmpty[T any](s []T) []T {
	if len(s) == 0 {
		return nil
	}
	return s
}
