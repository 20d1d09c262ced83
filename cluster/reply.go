package cluster

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"

	"github.com/braidmq/braid/api"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// replier answers one request. Handlers that finish on another goroutine
// (produce, fetch) answer through it rather than through micro.Request,
// whose error bookkeeping is not safe once the handler has returned.
type replier struct {
	nc    *nats.Conn
	reply string
}

func newReplier(nc *nats.Conn, req micro.Request) replier {
	return replier{nc: nc, reply: req.Reply()}
}

func (r replier) data(b []byte, hdr nats.Header) {
	if r.reply == "" {
		return
	}
	_ = r.nc.PublishMsg(&nats.Msg{Subject: r.reply, Data: b, Header: hdr})
}

func (r replier) json(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		r.err(err)
		return
	}
	r.data(b, nil)
}

func (r replier) err(err error) {
	e := api.AsError(err)
	code, desc := e.HeaderValues()
	h := nats.Header{}
	h.Set(micro.ErrorCodeHeader, code)
	h.Set(micro.ErrorHeader, desc)
	r.data(nil, h)
}

// decodeJSON decodes a request body strictly: unknown fields and trailing
// data are refused, so a typo is an error rather than silently ignored.
func decodeJSON(body []byte, v any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return api.Errorf(api.CodeBadRequest, "empty body; expected a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var syn *json.SyntaxError
		var typ *json.UnmarshalTypeError
		switch {
		case errors.As(err, &syn):
			return api.Errorf(api.CodeBadRequest, "malformed JSON at byte %d: %v", syn.Offset, err)
		case errors.As(err, &typ):
			return api.Errorf(api.CodeBadRequest, "field %q must be %s, got %s", typ.Field, typ.Type, typ.Value)
		default:
			return api.Errorf(api.CodeBadRequest, "bad JSON: %v", err)
		}
	}
	if dec.More() {
		return api.Errorf(api.CodeBadRequest, "trailing data after the JSON object")
	}
	return nil
}

func itoa(n int) string { return strconv.Itoa(n) }
