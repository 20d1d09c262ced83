package api

import (
	"encoding/binary"
	"fmt"
)

// Produce multi: one request carrying produce batches for many topics of
// one tenant, on braid.v1.produce-multi.<tenant>. A producer spreading
// records over many topics would otherwise send a request per topic, with
// a record or two in each; this is what Kafka's produce request does for
// the partitions of a broker. The Go client sends every batch this way.
//
//	request: version (1B) | part count (uvarint) | part...
//	part:    namespace (bytes) | topic (bytes) | epoch (uvarint; 0: none,
//	         as a batch without Braid-Epoch) | records (bytes: a produce
//	         batch body, as AppendRecords makes)
//	reply:   version (1B) | part count (uvarint) | part reply...
//	part reply: code (uvarint) | code 0: results (bytes: a produce-batch
//	         reply body, as AppendResults makes) | else: message (bytes)
//
// (bytes) is a uvarint length and the bytes. Parts are appended in request
// order, each as a produce-batch request to its topic would be: a part's
// records keep their order, and parts for one unit land in part order.
// A part that fails as a whole (an unknown topic, a malformed batch) has
// its error code and message; the others are not affected. A request that
// fails as a whole (malformed, the server out of room) is answered with
// the error headers, as any request.

// MultiPart is one part of a produce-multi request. Records aliases the
// request body.
type MultiPart struct {
	Namespace, Topic string
	Epoch            uint64
	Records          []byte
}

// MultiReply is the reply to one part: its results, or its error.
type MultiReply struct {
	Results []Result
	Err     *Error
}

// AppendMultiHeader begins a produce-multi request of n parts, each to be
// appended by AppendMultiPart.
func AppendMultiHeader(dst []byte, n int) []byte {
	dst = append(dst, FormatVersion)
	return binary.AppendUvarint(dst, uint64(n))
}

// AppendMultiPart appends a part: records is a produce batch body.
func AppendMultiPart(dst []byte, namespace, topic string, epoch uint64, records []byte) []byte {
	dst = appendBytes(dst, []byte(namespace))
	dst = appendBytes(dst, []byte(topic))
	dst = binary.AppendUvarint(dst, epoch)
	return appendBytes(dst, records)
}

// DecodeMulti decodes a produce-multi request. The parts' records are not
// decoded (DecodeRecords does) and alias b.
func DecodeMulti(b []byte) ([]MultiPart, error) {
	d := decoder{b: b}
	d.version()
	n := d.count("part count", 4)
	parts := make([]MultiPart, 0, n)
	for i := 0; i < n && d.err == nil; i++ {
		var p MultiPart
		p.Namespace = string(d.bytes("namespace"))
		p.Topic = string(d.bytes("topic"))
		p.Epoch = d.uvarint("epoch")
		p.Records = d.bytes("records")
		parts = append(parts, p)
	}
	if err := d.end(); err != nil {
		return nil, err
	}
	return parts, nil
}

// AppendMultiReplies encodes the reply to a produce-multi request.
func AppendMultiReplies(dst []byte, rs []MultiReply) []byte {
	dst = append(dst, FormatVersion)
	dst = binary.AppendUvarint(dst, uint64(len(rs)))
	for _, r := range rs {
		if r.Err != nil {
			dst = binary.AppendUvarint(dst, uint64(r.Err.Code.Number))
			dst = appendBytes(dst, []byte(r.Err.Message))
			continue
		}
		dst = binary.AppendUvarint(dst, 0)
		dst = appendBytes(dst, AppendResults(nil, r.Results))
	}
	return dst
}

// DecodeMultiReplies decodes the reply to a produce-multi request.
func DecodeMultiReplies(b []byte) ([]MultiReply, error) {
	d := decoder{b: b}
	d.version()
	n := d.count("part count", 2)
	rs := make([]MultiReply, 0, n)
	for i := 0; i < n && d.err == nil; i++ {
		var r MultiReply
		if code := int(d.uvarint("code")); code != 0 {
			c, ok := CodeByNumber(code)
			if !ok {
				c = Code{Number: code, Symbol: "UNKNOWN"}
			}
			r.Err = &Error{Code: c, Message: string(d.bytes("message"))}
		} else if body := d.bytes("results"); d.err == nil {
			results, err := DecodeResults(body)
			if err != nil {
				return nil, fmt.Errorf("part %d: %w", i, err)
			}
			r.Results = results
		}
		rs = append(rs, r)
	}
	if err := d.end(); err != nil {
		return nil, err
	}
	return rs, nil
}
