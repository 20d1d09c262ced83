package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/braidmq/braid/api"
)

// Sentinel errors of this package. Errors from the server are *api.Error
// values and match the api sentinels (api.ErrTopicNotFound, ...) with
// errors.Is; the errors below are the client's own.
var (
	// ErrClosed is returned by every method of a Producer or StreamConsumer
	// called after Close, and passed to the callback of every record that
	// Close abandoned because its context ended before they were acknowledged.
	ErrClosed = errors.New("braid/client: closed")

	// ErrTimeout is returned when the server did not answer a request within
	// the request timeout (WithRequestTimeout). For a produced record it means
	// the outcome is unknown: the record may or may not have been appended.
	// The producer never resends such a record by itself, because a resend
	// could append it twice; the application decides.
	ErrTimeout = errors.New("braid/client: request timed out")

	// ErrInvalidOption is wrapped by the constructors when an option has a
	// value out of range; the message names the option and the bad value.
	ErrInvalidOption = errors.New("braid/client: invalid option")

	// ErrNoServer is returned when no Braid server listens on the subject a
	// request went to (the NATS "no responders" status): the server is down,
	// still starting, or the NATS connection points at the wrong cluster. It
	// also matches nats.ErrNoResponders and api.ErrUnavailable.
	ErrNoServer = fmt.Errorf("braid/client: no server answered: %w (%w)", api.ErrUnavailable, nats.ErrNoResponders)

	// ErrRerouteLimit is passed to the callback of a record that was
	// rejected with SEGMENT_SEALED more than maxReroutes times in a row: the
	// layouts the server publishes never stopped routing it to a sealed
	// segment. It wraps the last api.ErrSegmentSealed error.
	ErrRerouteLimit = errors.New("braid/client: record rejected as sealed too many times")
)

// Header names of the NATS micro-service error convention, and the status
// header NATS sets on a "no responders" reply.
const (
	headerErrorCode = "Nats-Service-Error-Code"
	headerError     = "Nats-Service-Error"
	headerStatus    = "Status"
	statusNoServer  = "503"
)

// replyError returns the error a reply carries: an *api.Error rebuilt from the
// micro-service headers, ErrNoServer for a "no responders" status, or nil.
func replyError(m *nats.Msg) error {
	if m.Header == nil {
		return nil
	}
	if e := api.ParseError(m.Header.Get(headerErrorCode), m.Header.Get(headerError)); e != nil {
		return e
	}
	if len(m.Data) == 0 && m.Header.Get(headerStatus) == statusNoServer {
		return ErrNoServer
	}
	return nil
}

// requestError maps the error of a NATS request to this package's errors.
func requestError(subject string, err error) error {
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return fmt.Errorf("%s: %w", subject, ErrNoServer)
	case errors.Is(err, nats.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%s: %w (%w)", subject, ErrTimeout, err)
	case errors.Is(err, nats.ErrConnectionClosed):
		return fmt.Errorf("%s: %w (%w)", subject, ErrClosed, err)
	}
	return fmt.Errorf("%s: %w", subject, err)
}

// requestJSON sends req as JSON to subject and decodes the reply into reply
// (skipped when reply is nil). The request ends at ctx's deadline, or after
// timeout when ctx has none.
func requestJSON(ctx context.Context, nc *nats.Conn, timeout time.Duration, subject string, req, reply any) error {
	body, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("braid/client: encoding %s request: %w", subject, err)
	}
	m, err := request(ctx, nc, timeout, &nats.Msg{Subject: subject, Data: body})
	if err != nil {
		return err
	}
	if reply == nil {
		return nil
	}
	if err := json.Unmarshal(m.Data, reply); err != nil {
		return fmt.Errorf("braid/client: decoding %s reply: %w", subject, err)
	}
	return nil
}

// request sends one request and returns its reply, or the error the reply
// carries (see replyError).
func request(ctx context.Context, nc *nats.Conn, timeout time.Duration, msg *nats.Msg) (*nats.Msg, error) {
	if _, ok := ctx.Deadline(); !ok && timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	m, err := nc.RequestMsgWithContext(ctx, msg)
	if err != nil {
		if ctx.Err() == context.Canceled {
			return nil, ctx.Err()
		}
		return nil, requestError(msg.Subject, err)
	}
	if err := replyError(m); err != nil {
		return nil, err
	}
	return m, nil
}
