package wal

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"slices"
)

// frameVersion is the first byte of a record frame (EncodeRecord). Logs
// store records in batch frames (batchVersion).
const frameVersion = 1

// frameHeaderLen is the version byte plus the CRC32C.
const frameHeaderLen = 1 + 4

// castagnoli is the CRC32C table; the polynomial has hardware support on
// amd64 and arm64.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Header is one message header. Keys need not be unique; order is kept.
type Header struct {
	Key   string
	Value []byte
}

// Record is one message as stored in a log.
//
// Records decoded by DecodeRecord alias the frame they came from; records
// returned by Read and ReadRange own their memory. Empty byte fields decode
// as nil, so a nil and an empty Key (or Payload, or header Value) are the
// same record.
type Record struct {
	Timestamp int64 // unix ms
	Key       []byte
	Headers   []Header
	Payload   []byte
}

// encodedLen returns len(EncodeRecord(nil, r)).
func encodedLen(r Record) int {
	return frameHeaderLen + bodyLen(r)
}

// bodyLen returns the size of the body of r (its frame without the version
// and CRC).
func bodyLen(r Record) int {
	n := varintLen(r.Timestamp) +
		uvarintLen(uint64(len(r.Key))) + len(r.Key) +
		uvarintLen(uint64(len(r.Headers))) + len(r.Payload)
	for _, h := range r.Headers {
		n += uvarintLen(uint64(len(h.Key))) + len(h.Key) +
			uvarintLen(uint64(len(h.Value))) + len(h.Value)
	}
	return n
}

// EncodeRecord appends the frame of r to dst and returns the extended
// slice. The frame is what AppendEncoded takes; see the package doc for the
// layout.
func EncodeRecord(dst []byte, r Record) []byte {
	dst = slices.Grow(dst, encodedLen(r))
	start := len(dst)
	dst = append(dst, frameVersion, 0, 0, 0, 0)
	dst = appendBody(dst, r)
	crc := crc32.Checksum(dst[start+frameHeaderLen:], castagnoli)
	binary.LittleEndian.PutUint32(dst[start+1:], crc)
	return dst
}

// appendBody appends the body of r (bodyLen(r) bytes) to dst, which has
// room for it.
func appendBody(dst []byte, r Record) []byte {
	dst = binary.AppendVarint(dst, r.Timestamp)
	dst = binary.AppendUvarint(dst, uint64(len(r.Key)))
	dst = append(dst, r.Key...)
	dst = binary.AppendUvarint(dst, uint64(len(r.Headers)))
	for _, h := range r.Headers {
		dst = binary.AppendUvarint(dst, uint64(len(h.Key)))
		dst = append(dst, h.Key...)
		dst = binary.AppendUvarint(dst, uint64(len(h.Value)))
		dst = append(dst, h.Value...)
	}
	return append(dst, r.Payload...)
}

// DecodeRecord decodes one frame made by EncodeRecord. Errors wrap
// ErrCorrupt (empty, short, bad CRC, inconsistent lengths) or
// ErrUnsupportedVersion; it never panics. The returned record's byte slices
// alias frame.
func DecodeRecord(frame []byte) (Record, error) {
	body, err := checkFrame(frame)
	if err != nil {
		return Record{}, err
	}
	return decodeBody(body)
}

// checkFrame verifies the version byte and the CRC of frame and returns its
// body.
func checkFrame(frame []byte) ([]byte, error) {
	if len(frame) == 0 {
		return nil, fmt.Errorf("%w: empty frame", ErrCorrupt)
	}
	if frame[0] != frameVersion {
		return nil, fmt.Errorf("%w: version %d", ErrUnsupportedVersion, frame[0])
	}
	if len(frame) < frameHeaderLen {
		return nil, fmt.Errorf("%w: frame of %d bytes is shorter than its header", ErrCorrupt, len(frame))
	}
	body := frame[frameHeaderLen:]
	want := binary.LittleEndian.Uint32(frame[1:frameHeaderLen])
	if got := crc32.Checksum(body, castagnoli); got != want {
		return nil, fmt.Errorf("%w: crc32c %08x, want %08x", ErrCorrupt, got, want)
	}
	return body, nil
}

// bodyReader walks a frame body, checking every length against what is
// left. The first failure sticks in err and zeroes every later result.
// Field names are only formatted on failure, so decoding does not allocate
// beyond the header slice.
type bodyReader struct {
	buf []byte
	err error
}

func (br *bodyReader) fail(what, detail string) {
	if br.err == nil {
		br.err = fmt.Errorf("%w: bad %s%s", ErrCorrupt, what, detail)
	}
	br.buf = nil
}

func (br *bodyReader) varint(what string) int64 {
	v, n := binary.Varint(br.buf)
	if n <= 0 {
		br.fail(what, "")
		return 0
	}
	br.buf = br.buf[n:]
	return v
}

func (br *bodyReader) uvarint(what string) uint64 {
	v, n := binary.Uvarint(br.buf)
	if n <= 0 {
		br.fail(what, "")
		return 0
	}
	br.buf = br.buf[n:]
	return v
}

// bytes reads a uvarint length and that many bytes; empty reads as nil.
func (br *bodyReader) bytes(what string) []byte {
	n, sizeLen := binary.Uvarint(br.buf)
	if br.err != nil {
		return nil
	}
	if sizeLen <= 0 || n > uint64(len(br.buf)-sizeLen) {
		br.fail(what, " length")
		return nil
	}
	br.buf = br.buf[sizeLen:]
	if n == 0 {
		return nil
	}
	b := br.buf[:n:n]
	br.buf = br.buf[n:]
	return b
}

func decodeBody(body []byte) (Record, error) { return decodeBodyWith(body, nil) }

// decodeScratch is what the decoding of a run of bodies shares: one array
// for their headers, and the last header key (runs of records tend to
// carry the same header names: one string for them all).
type decodeScratch struct {
	headers []Header
	lastKey string
}

// decodeBodyWith is decodeBody; with sc, the headers come from sc's array
// and equal keys share a string.
func decodeBodyWith(body []byte, sc *decodeScratch) (Record, error) {
	br := bodyReader{buf: body}
	var r Record
	r.Timestamp = br.varint("timestamp")
	r.Key = br.bytes("key")
	count := br.uvarint("header count")
	// Every header takes at least two bytes (two zero lengths), which bounds
	// the allocation below by the size of the frame.
	if br.err == nil && count > uint64(len(br.buf))/2 {
		br.fail("header count", "")
	}
	if br.err != nil {
		return Record{}, br.err
	}
	if count > 0 {
		if sc == nil {
			r.Headers = make([]Header, count)
		} else {
			if cap(sc.headers)-len(sc.headers) < int(count) {
				sc.headers = make([]Header, 0, max(int(count), 2*cap(sc.headers), 16))
			}
			start := len(sc.headers)
			sc.headers = sc.headers[:start+int(count)]
			r.Headers = sc.headers[start : start+int(count) : start+int(count)]
		}
		for i := range r.Headers {
			kb := br.bytes("header key")
			switch {
			case sc == nil:
				r.Headers[i].Key = string(kb)
			case string(kb) == sc.lastKey:
				r.Headers[i].Key = sc.lastKey
			default:
				r.Headers[i].Key = string(kb)
				sc.lastKey = r.Headers[i].Key
			}
			r.Headers[i].Value = br.bytes("header value")
		}
		if br.err != nil {
			return Record{}, br.err
		}
	}
	if len(br.buf) > 0 {
		r.Payload = br.buf
	}
	return r, nil
}

func uvarintLen(x uint64) int {
	n := 1
	for x >= 0x80 {
		x >>= 7
		n++
	}
	return n
}

func varintLen(x int64) int {
	// Zigzag, as binary.AppendVarint does.
	return uvarintLen(uint64(x<<1) ^ uint64(x>>63))
}
