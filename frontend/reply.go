package frontend

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"strings"

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
	// rec counts the errors answered in the stats of the endpoint that
	// served the request (nil: a request no Braid service served).
	rec errRecorder
}

func newReplier(nc *nats.Conn, req micro.Request) replier {
	r := replier{nc: nc, reply: req.Reply()}
	r.rec, _ = req.(errRecorder)
	return r
}

func (r replier) data(b []byte, hdr nats.Header) {
	if r.rec != nil {
		r.rec.recordDone()
	}
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

// err answers the request with err and counts it in its endpoint's stats
// (also without a reply subject: it was refused all the same).
func (r replier) err(err error) {
	e := api.AsError(err)
	if r.rec != nil {
		r.rec.recordErr(e)
		r.rec.recordDone()
	}
	if r.reply == "" {
		return
	}
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
			return api.Errorf(api.CodeBadRequest, "malformed JSON at byte %d: %s", syn.Offset, strings.TrimPrefix(err.Error(), "json: "))
		case errors.As(err, &typ):
			return api.Errorf(api.CodeBadRequest, "field %q must be %s, got %s", typ.Field, jsonKind(typ.Type), typ.Value)
		default:
			return api.Errorf(api.CodeBadRequest, "bad JSON: %s", strings.TrimPrefix(err.Error(), "json: "))
		}
	}
	if dec.More() {
		return api.Errorf(api.CodeBadRequest, "trailing data after the JSON object")
	}
	return nil
}

// jsonKind names what a JSON value of Go type t must be, in JSON's words
// (a client never sees Go's type names).
func jsonKind(t reflect.Type) string {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil {
		return "a value"
	}
	if t.Implements(reflect.TypeFor[json.Unmarshaler]()) || reflect.PointerTo(t).Implements(reflect.TypeFor[json.Unmarshaler]()) {
		if t.Kind() == reflect.String || t.Kind() == reflect.Int64 {
			return "a duration string (\"5s\") or a number"
		}
	}
	switch t.Kind() {
	case reflect.Bool:
		return "a boolean (true or false)"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		return "an array"
	default:
		return "an object"
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
