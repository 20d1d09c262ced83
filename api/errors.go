package api

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Code is a stable error code of the wire contract. Its number travels in the
// Nats-Service-Error-Code header and its symbol starts the Nats-Service-Error
// text. Numbers and symbols never change meaning once released.
type Code struct {
	Number int
	Symbol string
}

// The error table. Add new codes at the end of their group; never renumber.
var (
	CodeBadRequest       = Code{400, "BAD_REQUEST"}      // malformed JSON or binary, missing field
	CodeInvalidName      = Code{401, "INVALID_NAME"}     // tenant, namespace, topic or subscription name breaks the name rule
	CodeInvalidArgument  = Code{402, "INVALID_ARGUMENT"} // a field is out of range (segments, buckets, split point, max...)
	CodeInvalidPolicy    = Code{403, "INVALID_POLICY"}   // a policy value is refused
	CodeNotFound         = Code{404, "NOT_FOUND"}        // unknown subject or operation
	CodeTenantNotFound   = Code{405, "TENANT_NOT_FOUND"} // the tenant does not exist
	CodeNamespaceMissing = Code{406, "NAMESPACE_NOT_FOUND"}
	CodeTopicNotFound    = Code{407, "TOPIC_NOT_FOUND"}
	CodeSegmentNotFound  = Code{408, "SEGMENT_NOT_FOUND"}
	CodeAlreadyExists    = Code{409, "ALREADY_EXISTS"}   // create of something that exists
	CodeLayoutRefused    = Code{410, "LAYOUT_REFUSED"}   // split/merge/rebucket refused by the DAG rules (sealed, not adjacent...)
	CodeConsumerUnknown  = Code{411, "CONSUMER_UNKNOWN"} // fetch/ack from a consumer the group does not know (expired); join again
	CodeNotOwner         = Code{412, "NOT_OWNER"}        // ack of a unit this consumer does not own
	CodePayloadTooLarge  = Code{413, "PAYLOAD_TOO_LARGE"}
	// CodeForbidden: the caller's NATS account may not do this (another
	// tenant's topic, or an operation of the operator account); nothing
	// was changed.
	CodeForbidden     = Code{414, "FORBIDDEN"}
	CodeSegmentSealed = Code{460, "SEGMENT_SEALED"} // append to a sealed segment; refresh the layout and resend
	CodeTopicDeleted  = Code{461, "TOPIC_DELETED"}
	// CodeTopicQuarantined: the topic's record did not read or validate
	// (or it did not start); it is not served until repaired or deleted.
	CodeTopicQuarantined = Code{462, "TOPIC_QUARANTINED"}
	// CodeTopicMigrated: a request named persistent://t/ns/name, a fixed
	// topic migrated into the scalable topic://t/ns/name (the text names
	// it): use that name.
	CodeTopicMigrated = Code{463, "TOPIC_MIGRATED"}
	CodeInternal      = Code{500, "INTERNAL"}
	CodeUnavailable   = Code{503, "UNAVAILABLE"} // the server is starting or stopping
	CodeTimeout       = Code{504, "TIMEOUT"}
)

// Data that retention removed, reported by read.fetch to checkpoint consumers.
var (
	CodeSegmentGone = Code{470, "SEGMENT_GONE"} // the segment was deleted by retention
	CodeOffsetGone  = Code{471, "OFFSET_GONE"}  // the offset is below the unit's first retained offset
	// CodeOffsetsLost: the records at the offset were lost to damage in the
	// unit's log (a hole: whole records after it were kept); the reply names
	// the lost range, and reading goes on after it.
	CodeOffsetsLost = Code{472, "OFFSETS_LOST"}
)

// Codes is the whole table, in number order.
var Codes = []Code{
	CodeBadRequest, CodeInvalidName, CodeInvalidArgument, CodeInvalidPolicy,
	CodeNotFound, CodeTenantNotFound, CodeNamespaceMissing, CodeTopicNotFound,
	CodeSegmentNotFound, CodeAlreadyExists, CodeLayoutRefused, CodeConsumerUnknown,
	CodeNotOwner, CodePayloadTooLarge, CodeForbidden, CodeSegmentSealed, CodeTopicDeleted, CodeTopicQuarantined,
	CodeTopicMigrated, CodeSegmentGone, CodeOffsetGone, CodeOffsetsLost,
	CodeInternal, CodeUnavailable, CodeTimeout,
}

// CodeByNumber finds a code of the table.
func CodeByNumber(n int) (Code, bool) {
	for _, c := range Codes {
		if c.Number == n {
			return c, true
		}
	}
	return Code{}, false
}

// Error is an error of the wire contract. errors.Is matches two Errors with
// the same code, so errors.Is(err, api.ErrSegmentSealed) works on any
// Error carrying CodeSegmentSealed.
type Error struct {
	Code    Code
	Message string
	// Epoch is set with SEGMENT_SEALED: the layout epoch to wait for.
	Epoch uint64
}

// Sentinels, one per code, for errors.Is.
var (
	ErrBadRequest      = &Error{Code: CodeBadRequest}
	ErrInvalidName     = &Error{Code: CodeInvalidName}
	ErrInvalidArgument = &Error{Code: CodeInvalidArgument}
	ErrInvalidPolicy   = &Error{Code: CodeInvalidPolicy}
	ErrTopicNotFound   = &Error{Code: CodeTopicNotFound}
	ErrAlreadyExists   = &Error{Code: CodeAlreadyExists}
	ErrLayoutRefused   = &Error{Code: CodeLayoutRefused}
	ErrSegmentSealed   = &Error{Code: CodeSegmentSealed}
	ErrConsumerUnknown = &Error{Code: CodeConsumerUnknown}
	ErrPayloadTooLarge = &Error{Code: CodePayloadTooLarge}
	ErrForbidden       = &Error{Code: CodeForbidden}
	ErrUnavailable     = &Error{Code: CodeUnavailable}
	ErrSegmentGone     = &Error{Code: CodeSegmentGone}
	ErrOffsetGone      = &Error{Code: CodeOffsetGone}
	ErrOffsetsLost     = &Error{Code: CodeOffsetsLost}
)

// Errorf builds an Error with a formatted message, without the Go package
// prefixes of the errors it formats (a client reads "invalid name", not
// "braid/routing: invalid name": see UserMessage).
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: UserMessage(fmt.Sprintf(format, args...))}
}

// UserMessage removes the "braid/<package>: " prefixes Go errors carry
// (STYLE: sentinels name their package) from a message meant for clients.
func UserMessage(msg string) string {
	for {
		i := strings.Index(msg, "braid/")
		if i < 0 {
			return msg
		}
		j := i + len("braid/")
		for j < len(msg) && (msg[j] >= 'a' && msg[j] <= 'z' || msg[j] >= '0' && msg[j] <= '9' || msg[j] == '/') {
			j++
		}
		atStart := i == 0 || i >= 2 && msg[i-2:i] == ": " || msg[i-1] == '(' || msg[i-1] == ' ' && strings.HasSuffix(msg[:i], ":")
		if !strings.HasPrefix(msg[j:], ": ") || j == i+len("braid/") || !atStart {
			// Not a package prefix (a path, a word): leave it, look on.
			rest := UserMessage(msg[j:])
			return msg[:j] + rest
		}
		msg = msg[:i] + msg[j+2:]
	}
}

func (e *Error) Error() string {
	if e.Message == "" {
		return e.Code.Symbol
	}
	return e.Code.Symbol + ": " + e.Message
}

// Is reports whether target is an *Error with the same code.
func (e *Error) Is(target error) bool {
	var t *Error
	if errors.As(target, &t) {
		return t.Code == e.Code
	}
	return false
}

// HeaderValues returns the two micro-service header values for e:
// the code number and the "SYMBOL: text" description.
func (e *Error) HeaderValues() (code, description string) {
	return strconv.Itoa(e.Code.Number), e.Error()
}

// AsError converts any error to an *Error, keeping codes of wrapped *Errors
// and classing the rest as INTERNAL.
func AsError(err error) *Error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Code: CodeInternal, Message: UserMessage(err.Error())}
}

// ParseError rebuilds an *Error from the two micro-service headers. It
// returns nil when code is empty (the reply was not an error).
func ParseError(code, description string) *Error {
	if code == "" {
		return nil
	}
	n, err := strconv.Atoi(code)
	c, ok := CodeByNumber(n)
	if err != nil || !ok {
		c = Code{Number: n, Symbol: "UNKNOWN"}
	}
	msg := strings.TrimPrefix(description, c.Symbol+": ")
	if msg == c.Symbol {
		msg = ""
	}
	e := &Error{Code: c, Message: msg}
	if c == CodeSegmentSealed {
		e.Epoch = parseEpoch(msg)
	}
	return e
}

// SealedError is the SEGMENT_SEALED error for an append to segment seg that
// was sealed at layout epoch epoch. Its text carries the epoch as "epoch=N"
// so clients without this package can read it.
func SealedError(seg uint64, epoch uint64) *Error {
	return &Error{Code: CodeSegmentSealed, Epoch: epoch,
		Message: fmt.Sprintf("segment %d is sealed; refresh the layout (epoch=%d) and resend", seg, epoch)}
}

// StaleRouteError is the SEGMENT_SEALED error for a record routed by the
// layout at epoch routed, whose key has moved to a segment created since;
// epoch is the current layout's.
func StaleRouteError(routed, epoch uint64) *Error {
	return &Error{Code: CodeSegmentSealed, Epoch: epoch,
		Message: fmt.Sprintf("the key was routed by layout epoch %d and has moved since; refresh the layout (epoch=%d) and resend", routed, epoch)}
}

func parseEpoch(msg string) uint64 {
	i := strings.Index(msg, "epoch=")
	if i < 0 {
		return 0
	}
	s := msg[i+len("epoch="):]
	j := 0
	for j < len(s) && s[j] >= '0' && s[j] <= '9' {
		j++
	}
	n, _ := strconv.ParseUint(s[:j], 10, 64)
	return n
}
