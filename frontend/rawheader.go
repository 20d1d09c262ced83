package frontend

import (
	"bytes"
	"slices"
	"strings"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/wal"
)

// produceHeaders is what a produce-one request's headers say.
type produceHeaders struct {
	key   []byte
	time  int64
	epoch uint64
	// partition is Braid-Partition's value, -1 when absent.
	partition int
	headers   []wal.Header // the application's, sorted by name (stable)
}

// parseRawProduceHeaders reads the raw NATS header block of a produce-one
// request ("NATS/1.0\r\nName: value\r\n...\r\n") as recordFromHeaders
// reads nats.go's decoded map: the first value of Braid-Key, Braid-Time
// and Braid-Epoch, every other header but NATS's own kept in name order,
// values with their leading blanks trimmed, lines with an empty name
// skipped. Slices alias hdr.
func parseRawProduceHeaders(hdr []byte) (produceHeaders, error) {
	out := produceHeaders{partition: -1}
	if len(hdr) == 0 {
		return out, nil
	}
	line, rest, ok := cutLine(hdr)
	if !ok || !bytes.HasPrefix(line, []byte("NATS/1.0")) {
		return out, api.Errorf(api.CodeBadRequest, "malformed NATS header block")
	}
	var haveKey, haveTime, haveEpoch, havePartition bool
	var timeValue, epochValue, partitionValue []byte
	for {
		line, rest, ok = cutLine(rest)
		if !ok {
			return out, api.Errorf(api.CodeBadRequest, "malformed NATS header block")
		}
		if len(line) == 0 {
			break
		}
		i := bytes.IndexByte(line, ':')
		if i < 0 {
			return out, api.Errorf(api.CodeBadRequest, "malformed NATS header line %q", clipBytes(line))
		}
		name, value := line[:i], bytes.TrimLeft(line[i+1:], " \t")
		if len(name) == 0 {
			continue
		}
		switch string(name) {
		case api.HeaderKey:
			if !haveKey {
				out.key, haveKey = value, true
			}
		case api.HeaderTime:
			if !haveTime {
				timeValue, haveTime = value, true
			}
		case api.HeaderEpoch:
			if !haveEpoch {
				epochValue, haveEpoch = value, true
			}
		case api.HeaderPartition:
			if !havePartition {
				partitionValue, havePartition = value, true
			}
		default:
			if isApplicationHeader(string(name)) {
				out.headers = append(out.headers, wal.Header{Key: string(name), Value: value})
			}
		}
	}
	if len(out.key) == 0 {
		out.key = nil
	}
	if len(timeValue) > 0 {
		v, err := parseProduceTime(string(timeValue))
		if err != nil {
			return out, err
		}
		out.time = v
	}
	if len(epochValue) > 0 {
		v, err := parseEpochHeader(string(epochValue))
		if err != nil {
			return out, err
		}
		out.epoch = v
	}
	if havePartition {
		v, err := parsePartitionHeader(string(partitionValue))
		if err != nil {
			return out, err
		}
		out.partition = v
	}
	slices.SortStableFunc(out.headers, func(a, b wal.Header) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}

// cutLine returns the line at the start of b without its CRLF (or LF),
// and what follows it; ok is false when b holds no complete line.
func cutLine(b []byte) (line, rest []byte, ok bool) {
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		return nil, nil, false
	}
	line = b[:i]
	if len(line) > 0 && line[len(line)-1] == '\r' {
		line = line[:len(line)-1]
	}
	return line, b[i+1:], true
}

func clipBytes(b []byte) []byte {
	if len(b) > 64 {
		return b[:64]
	}
	return b
}

// rawHeaderValue returns the first value of header name in a raw NATS
// header block, or nil.
func rawHeaderValue(hdr []byte, name string) []byte {
	if len(hdr) == 0 || !bytes.Contains(hdr, []byte(name)) {
		return nil
	}
	_, rest, ok := cutLine(hdr)
	for ok {
		var line []byte
		if line, rest, ok = cutLine(rest); !ok || len(line) == 0 {
			return nil
		}
		if i := bytes.IndexByte(line, ':'); i >= 0 && string(line[:i]) == name {
			return bytes.TrimLeft(line[i+1:], " \t")
		}
	}
	return nil
}
