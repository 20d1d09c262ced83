package client

import (
	"cmp"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"
)

// Checkpoint is the position of a CheckpointConsumer: where it is in every
// unit it has started and which segments it has drained. It is a plain value:
// store it with MarshalBinary (or as text, with MarshalText or String) and
// give it back to Restore, on this consumer or a new one, also after splits
// and merges. Its fields are for inspection; the binary form is the stable
// contract:
//
//	| "BRCK" | version (1B) = 1 | uvarint len | topic | uvarint epoch
//	| uvarint drainedBelow | uvarint count | uvarint gap * count
//	| uvarint count | (uvarint segment | uvarint bucket | uvarint offset) * count
//	| CRC32C (4B, little endian) of everything before |
//
// Every segment with an id below drainedBelow is drained, drainedBelow is
// not; the drained ids above it follow as gaps (id - previous id - 1, the
// first from drainedBelow). Positions are sorted by unit, without duplicates; a unit
// without one starts at offset 0.
type Checkpoint struct {
	Topic string
	// Epoch is the layout epoch the consumer knew when it was taken.
	Epoch uint64
	// Drained lists the drained segments, ascending.
	Drained []uint64
	// Positions holds, per unit of a segment not drained, the next offset
	// to read; units at offset 0 are left out.
	Positions []UnitPosition
}

// UnitPosition is the next offset to read in one unit.
type UnitPosition struct {
	Segment uint64
	Bucket  int
	Offset  uint64
}

// ErrBadCheckpoint is wrapped by every error decoding a Checkpoint.
var ErrBadCheckpoint = errors.New("braid/client: bad checkpoint")

const checkpointMagic = "BRCK"
const checkpointVersion = 1

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// MarshalBinary encodes c canonically (it sorts copies of its lists).
func (c Checkpoint) MarshalBinary() ([]byte, error) {
	drained := slices.Clone(c.Drained)
	slices.Sort(drained)
	drained = slices.Compact(drained)
	positions := slices.Clone(c.Positions)
	slices.SortFunc(positions, comparePositions)
	positions = slices.CompactFunc(positions, func(a, b UnitPosition) bool { return comparePositions(a, b) == 0 })

	b := append([]byte(checkpointMagic), checkpointVersion)
	b = binary.AppendUvarint(b, uint64(len(c.Topic)))
	b = append(b, c.Topic...)
	b = binary.AppendUvarint(b, c.Epoch)
	below := uint64(0)
	for len(drained) > 0 && drained[0] == below {
		drained = drained[1:]
		below++
	}
	b = binary.AppendUvarint(b, below)
	b = binary.AppendUvarint(b, uint64(len(drained)))
	prev := below // not drained
	for _, id := range drained {
		b = binary.AppendUvarint(b, id-prev-1)
		prev = id
	}
	b = binary.AppendUvarint(b, uint64(len(positions)))
	for _, p := range positions {
		if p.Bucket < 0 {
			return nil, fmt.Errorf("%w: negative bucket %d", ErrBadCheckpoint, p.Bucket)
		}
		b = binary.AppendUvarint(b, p.Segment)
		b = binary.AppendUvarint(b, uint64(p.Bucket))
		b = binary.AppendUvarint(b, p.Offset)
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli)), nil
}

func comparePositions(a, b UnitPosition) int {
	if c := cmp.Compare(a.Segment, b.Segment); c != 0 {
		return c
	}
	return cmp.Compare(a.Bucket, b.Bucket)
}

// maxCheckpointDrainedBelow bounds the expansion of drainedBelow, so that
// a forged checkpoint cannot make UnmarshalBinary allocate without bound.
const maxCheckpointDrainedBelow = 1 << 24

// UnmarshalBinary decodes what MarshalBinary made; it accepts only a body
// whose checksum holds.
func (c *Checkpoint) UnmarshalBinary(b []byte) error {
	if len(b) < len(checkpointMagic)+1+4 || string(b[:len(checkpointMagic)]) != checkpointMagic {
		return fmt.Errorf("%w: not a checkpoint", ErrBadCheckpoint)
	}
	body, sum := b[:len(b)-4], binary.LittleEndian.Uint32(b[len(b)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return fmt.Errorf("%w: checksum mismatch", ErrBadCheckpoint)
	}
	if v := body[len(checkpointMagic)]; v != checkpointVersion {
		return fmt.Errorf("%w: unsupported version %d", ErrBadCheckpoint, v)
	}
	d := cpDecoder{b: body[len(checkpointMagic)+1:]}
	var out Checkpoint
	n := d.uvarint()
	if d.err == nil && n > uint64(len(d.b)) {
		d.err = errors.New("topic longer than the checkpoint")
	}
	if d.err == nil {
		out.Topic = string(d.b[:n])
		d.b = d.b[n:]
	}
	out.Epoch = d.uvarint()
	below := d.uvarint()
	if below > maxCheckpointDrainedBelow {
		d.fail("too many drained segments")
	}
	count := d.count(1)
	if d.err == nil && below+uint64(count) > 0 {
		out.Drained = make([]uint64, 0, below+uint64(count))
		for id := uint64(0); id < below; id++ {
			out.Drained = append(out.Drained, id)
		}
	}
	prev := below
	for i := 0; i < count && d.err == nil; i++ {
		id := prev + d.uvarint() + 1
		if id <= prev {
			d.fail("drained segment id overflows")
		}
		out.Drained = append(out.Drained, id)
		prev = id
	}
	count = d.count(3)
	if count > 0 {
		out.Positions = make([]UnitPosition, 0, count)
	}
	for i := 0; i < count && d.err == nil; i++ {
		p := UnitPosition{Segment: d.uvarint()}
		bucket := d.uvarint()
		if bucket > 1<<20 {
			d.fail("bucket out of range")
		}
		p.Bucket = int(bucket)
		p.Offset = d.uvarint()
		if i > 0 && comparePositions(out.Positions[i-1], p) >= 0 {
			d.fail("positions out of order")
		}
		out.Positions = append(out.Positions, p)
	}
	if d.err == nil && len(d.b) > 0 {
		d.fail("trailing bytes")
	}
	if d.err != nil {
		return fmt.Errorf("%w: %v", ErrBadCheckpoint, d.err)
	}
	*c = out
	return nil
}

type cpDecoder struct {
	b   []byte
	err error
}

func (d *cpDecoder) fail(what string) {
	if d.err == nil {
		d.err = errors.New(what)
	}
}

func (d *cpDecoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	// A longer encoding than needed ends in a zero byte; refusing it keeps
	// the encoding canonical.
	if n <= 0 || (n > 1 && d.b[n-1] == 0) {
		d.fail("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *cpDecoder) count(minBytes int) int {
	n := d.uvarint()
	if d.err == nil && n > uint64(len(d.b)/minBytes) {
		d.fail("count exceeds the checkpoint")
		return 0
	}
	return int(n)
}

// MarshalText encodes c as base64 of its binary form (for JSON and logs).
func (c Checkpoint) MarshalText() ([]byte, error) {
	b, err := c.MarshalBinary()
	if err != nil {
		return nil, err
	}
	return base64.RawURLEncoding.AppendEncode(nil, b), nil
}

// UnmarshalText decodes what MarshalText made.
func (c *Checkpoint) UnmarshalText(text []byte) error {
	b, err := base64.RawURLEncoding.AppendDecode(nil, text)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrBadCheckpoint, err)
	}
	return c.UnmarshalBinary(b)
}

// String returns the text form (MarshalText).
func (c Checkpoint) String() string {
	b, err := c.MarshalText()
	if err != nil {
		return "invalid checkpoint: " + err.Error()
	}
	return string(b)
}

// ParseCheckpoint decodes the text form of a Checkpoint.
func ParseCheckpoint(s string) (Checkpoint, error) {
	var c Checkpoint
	err := c.UnmarshalText([]byte(s))
	return c, err
}
