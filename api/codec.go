package api

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// FormatVersion is the first byte of every binary body of this contract.
const FormatVersion = 1

// ErrMalformed is wrapped by every decoding error of a binary body.
var ErrMalformed = errors.New("braid/api: malformed binary body")

// Header is one message header.
type Header struct {
	Name  string
	Value []byte
}

// Record is one message to produce.
type Record struct {
	Key     []byte // nil or empty: unkeyed
	Time    int64  // unix ms; 0 = server time
	Headers []Header
	Payload []byte
}

// Result is the outcome of one produced record.
type Result struct {
	Code    int // 0 = ok, else an error code number
	Segment uint64
	Bucket  int
	Offset  uint64
	Epoch   uint64 // with SEGMENT_SEALED
	Message string
}

// Err returns the result's error, or nil when it succeeded.
func (r Result) Err() error {
	if r.Code == 0 {
		return nil
	}
	c, ok := CodeByNumber(r.Code)
	if !ok {
		c = Code{Number: r.Code, Symbol: "UNKNOWN"}
	}
	return &Error{Code: c, Message: r.Message, Epoch: r.Epoch}
}

// Message is one delivered message.
type Message struct {
	Segment    uint64
	Bucket     int
	Offset     uint64
	Deliveries uint32
	Time       int64
	Key        []byte
	Headers    []Header
	Payload    []byte
}

// AppendRecords encodes a produce batch.
func AppendRecords(dst []byte, recs []Record) []byte {
	dst = AppendBatchHeader(dst, len(recs))
	for i := range recs {
		dst = AppendRecord(dst, &recs[i])
	}
	return dst
}

// AppendBatchHeader begins the encoding of a batch of n records, which
// must follow, each appended by AppendRecord: the result is what
// AppendRecords makes of them.
func AppendBatchHeader(dst []byte, n int) []byte {
	dst = append(dst, FormatVersion)
	return binary.AppendUvarint(dst, uint64(n))
}

// AppendRecord appends one record of a batch begun by AppendBatchHeader.
func AppendRecord(dst []byte, r *Record) []byte {
	return appendBody(dst, r.Key, r.Time, r.Headers, r.Payload)
}

func appendBody(dst, key []byte, t int64, hs []Header, payload []byte) []byte {
	dst = appendBytes(dst, key)
	dst = binary.AppendVarint(dst, t)
	dst = binary.AppendUvarint(dst, uint64(len(hs)))
	for _, h := range hs {
		dst = appendBytes(dst, []byte(h.Name))
		dst = appendBytes(dst, h.Value)
	}
	return appendBytes(dst, payload)
}

func appendBytes(dst, b []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

// decoder reads a binary body; the first failure sticks.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", ErrMalformed, what)
	}
}

func (d *decoder) uvarint(what string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail(what)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint(what string) int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail(what)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) bytes(what string) []byte {
	if d.err != nil {
		return nil
	}
	n, k := binary.Uvarint(d.b)
	if k <= 0 {
		d.fail(what + " length") // built only on failure: this runs for every field
		return nil
	}
	d.b = d.b[k:]
	if n > uint64(len(d.b)) {
		d.fail(what + " longer than the body")
		return nil
	}
	out := d.b[:n:n]
	d.b = d.b[n:]
	if n == 0 {
		return nil
	}
	return out
}

// count reads an element count and bounds it by the bytes left (each element
// takes at least minBytes), so a forged count cannot make us allocate.
func (d *decoder) count(what string, minBytes int) int {
	n := d.uvarint(what)
	if d.err == nil && n > uint64(len(d.b)/minBytes) {
		d.fail(what + " exceeds the body")
		return 0
	}
	return int(n)
}

func (d *decoder) version() {
	if len(d.b) == 0 {
		d.fail("empty body")
		return
	}
	if d.b[0] != FormatVersion {
		d.fail(fmt.Sprintf("unsupported version %d", d.b[0]))
		return
	}
	d.b = d.b[1:]
}

func (d *decoder) body() (key []byte, t int64, hs []Header, payload []byte) {
	key = d.bytes("key")
	t = d.varint("time")
	nh := d.count("header count", 2)
	if nh > 0 {
		hs = make([]Header, 0, nh)
	}
	for i := 0; i < nh && d.err == nil; i++ {
		name := d.bytes("header name")
		hs = append(hs, Header{Name: string(name), Value: d.bytes("header value")})
	}
	payload = d.bytes("payload")
	return
}

func (d *decoder) end() error {
	if d.err == nil && len(d.b) != 0 {
		d.fail(fmt.Sprintf("%d trailing bytes", len(d.b)))
	}
	return d.err
}

// DecodeRecords decodes a produce batch. Slices alias b.
func DecodeRecords(b []byte) ([]Record, error) {
	d := decoder{b: b}
	d.version()
	n := d.count("record count", 4)
	recs := make([]Record, 0, n)
	for i := 0; i < n && d.err == nil; i++ {
		var r Record
		r.Key, r.Time, r.Headers, r.Payload = d.body()
		recs = append(recs, r)
	}
	if err := d.end(); err != nil {
		return nil, err
	}
	return recs, nil
}

// AppendResults encodes a produce-batch reply.
func AppendResults(dst []byte, rs []Result) []byte {
	dst = append(dst, FormatVersion)
	dst = binary.AppendUvarint(dst, uint64(len(rs)))
	for _, r := range rs {
		dst = binary.AppendUvarint(dst, uint64(r.Code))
		if r.Code == 0 {
			dst = binary.AppendUvarint(dst, r.Segment)
			dst = binary.AppendUvarint(dst, uint64(r.Bucket))
			dst = binary.AppendUvarint(dst, r.Offset)
			continue
		}
		dst = binary.AppendUvarint(dst, r.Epoch)
		dst = appendBytes(dst, []byte(r.Message))
	}
	return dst
}

// DecodeResults decodes a produce-batch reply.
func DecodeResults(b []byte) ([]Result, error) {
	d := decoder{b: b}
	d.version()
	n := d.count("result count", 2)
	rs := make([]Result, 0, n)
	for i := 0; i < n && d.err == nil; i++ {
		var r Result
		r.Code = int(d.uvarint("code"))
		if r.Code == 0 {
			r.Segment = d.uvarint("segment")
			r.Bucket = int(d.uvarint("bucket"))
			r.Offset = d.uvarint("offset")
		} else {
			r.Epoch = d.uvarint("epoch")
			r.Message = string(d.bytes("message"))
		}
		rs = append(rs, r)
	}
	if err := d.end(); err != nil {
		return nil, err
	}
	return rs, nil
}

// AppendMessageHeader starts a fetch reply of count messages.
func AppendMessageHeader(dst []byte, count int) []byte {
	dst = append(dst, FormatVersion)
	return binary.AppendUvarint(dst, uint64(count))
}

// AppendMessage encodes one message of a fetch reply.
func AppendMessage(dst []byte, m *Message) []byte {
	dst = binary.AppendUvarint(dst, m.Segment)
	dst = binary.AppendUvarint(dst, uint64(m.Bucket))
	dst = binary.AppendUvarint(dst, m.Offset)
	dst = binary.AppendUvarint(dst, uint64(m.Deliveries))
	return appendBody(dst, m.Key, m.Time, m.Headers, m.Payload)
}

// AppendMessages encodes a whole fetch reply.
func AppendMessages(dst []byte, ms []Message) []byte {
	dst = AppendMessageHeader(dst, len(ms))
	for i := range ms {
		dst = AppendMessage(dst, &ms[i])
	}
	return dst
}

// DecodeMessages decodes a fetch reply. Slices alias b.
func DecodeMessages(b []byte) ([]Message, error) {
	d := decoder{b: b}
	d.version()
	ms := d.messages()
	if err := d.end(); err != nil {
		return nil, err
	}
	return ms, nil
}

// messages reads a message count and that many messages.
func (d *decoder) messages() []Message {
	n := d.count("message count", 8)
	ms := make([]Message, 0, n)
	for i := 0; i < n && d.err == nil; i++ {
		var m Message
		m.Segment = d.uvarint("segment")
		m.Bucket = int(d.uvarint("bucket"))
		m.Offset = d.uvarint("offset")
		m.Deliveries = uint32(d.uvarint("deliveries"))
		m.Key, m.Time, m.Headers, m.Payload = d.body()
		ms = append(ms, m)
	}
	return ms
}

// byteValue reads one byte.
func (d *decoder) byteValue(what string) byte {
	if d.err != nil {
		return 0
	}
	if len(d.b) == 0 {
		d.fail(what)
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}
