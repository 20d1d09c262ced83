package frontend

import (
	"errors"
	"testing"

	"github.com/braidmq/braid/api"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// TestRawHeadersReadAsNATSDoes: the fast front-end's parser of the raw
// header block gives what the micro front-end gets from nats.go's decoded
// header map, for the same bytes on the wire.
func TestRawHeadersReadAsNATSDoes(t *testing.T) {
	blocks := []string{
		"NATS/1.0\r\n\r\n",
		"NATS/1.0\r\nBraid-Key: k1\r\n\r\n",
		"NATS/1.0\r\nBraid-Key:   k1 \r\nBraid-Time: 1767225600000\r\nBraid-Epoch: 7\r\n\r\n",
		"NATS/1.0\r\nBraid-Key: first\r\nBraid-Key: second\r\n\r\n",
		"NATS/1.0\r\nBraid-Key:\r\n\r\n",
		"NATS/1.0\r\nZeta: z\r\nAlpha: a1\r\nNats-Msg-Id: 9\r\nAlpha: a2\r\nbraid-key: lower\r\n\r\n",
		"NATS/1.0\r\n: no name\r\nX:\t tabbed\r\n\r\n",
		"NATS/1.0\r\nBraid-Time: soon\r\n\r\n",
		"NATS/1.0\r\nBraid-Epoch: 0\r\n\r\n",
		"NATS/1.0\r\nBraid-Epoch: -3\r\n\r\n",
	}
	for _, block := range blocks {
		h, err := nats.DecodeHeadersMsg([]byte(block))
		if err != nil {
			t.Fatalf("%q: nats.go: %v", block, err)
		}
		want, wantEpoch, wantErr := recordFromHeaders(micro.Headers(h), nil)
		got, gotErr := parseRawProduceHeaders([]byte(block))
		if (wantErr == nil) != (gotErr == nil) || wantErr != nil && api.AsError(wantErr).Code != api.AsError(gotErr).Code {
			t.Fatalf("%q: errors %v / %v", block, wantErr, gotErr)
		}
		if wantErr != nil {
			continue
		}
		if string(got.key) != string(want.Key) || (got.key == nil) != (want.Key == nil) || got.time != want.Time || got.epoch != wantEpoch {
			t.Fatalf("%q: key %q time %d epoch %d, want %q %d %d", block, got.key, got.time, got.epoch, want.Key, want.Time, wantEpoch)
		}
		if len(got.headers) != len(want.Headers) {
			t.Fatalf("%q: headers %v, want %v", block, got.headers, want.Headers)
		}
		for i := range got.headers {
			if got.headers[i].Key != want.Headers[i].Name || string(got.headers[i].Value) != string(want.Headers[i].Value) {
				t.Fatalf("%q: headers %v, want %v", block, got.headers, want.Headers)
			}
		}
	}
	for _, bad := range []string{"HTTP/1.1\r\n\r\n", "NATS/1.0\r\nno colon\r\n\r\n", "NATS/1.0\r\nX: y\r\n"} {
		if _, err := parseRawProduceHeaders([]byte(bad)); !errors.Is(err, api.ErrBadRequest) {
			t.Fatalf("%q: %v, want BAD_REQUEST", bad, err)
		}
	}
}

// FuzzRawProduceHeaders: the raw header parser never panics, keeps only
// application headers, and agrees with nats.go's decoding on every block
// nats.go accepts.
func FuzzRawProduceHeaders(f *testing.F) {
	for _, s := range []string{"NATS/1.0\r\n\r\n", "NATS/1.0\r\nBraid-Key: k\r\nX: y\r\n\r\n", "NATS/1.0\r\nBraid-Time: 12\r\nBraid-Epoch: 3\r\n\r\n",
		"NATS/1.0 503\r\n\r\n", "NATS/1.0\r\n:\r\n\r\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, block []byte) {
		got, err := parseRawProduceHeaders(block)
		if err == nil {
			for _, h := range got.headers {
				if !isApplicationHeader(h.Key) {
					t.Fatalf("kept header %q", h.Key)
				}
			}
		}
		h, nerr := nats.DecodeHeadersMsg(block)
		if nerr != nil || len(block) == 0 {
			return
		}
		if _, ok := h["Status"]; ok { // a status line: nats.go adds headers of its own
			return
		}
		want, wantEpoch, wantErr := recordFromHeaders(micro.Headers(h), nil)
		if (err == nil) != (wantErr == nil) {
			t.Fatalf("%q: raw %v, nats.go %v", block, err, wantErr)
		}
		if err == nil && (string(got.key) != string(want.Key) || got.time != want.Time || got.epoch != wantEpoch || len(got.headers) != len(want.Headers)) {
			t.Fatalf("%q: raw %+v, nats.go %+v epoch %d", block, got, want, wantEpoch)
		}
	})
}

func TestRawHeaderValue(t *testing.T) {
	hdr := []byte("NATS/1.0\r\nBraid-Key: k1\r\nNats-Request-Info:  {\"acc\":\"acme\"}\r\nNats-Request-Info: second\r\n\r\n")
	if got := string(rawHeaderValue(hdr, "Nats-Request-Info")); got != `{"acc":"acme"}` {
		t.Fatalf("first value: %q", got)
	}
	if got := rawHeaderValue(hdr, "Missing"); got != nil {
		t.Fatalf("missing: %q", got)
	}
	// The name inside a value is not a header of that name.
	if got := rawHeaderValue([]byte("NATS/1.0\r\nX: Nats-Request-Info: y\r\n\r\n"), "Nats-Request-Info"); got != nil {
		t.Fatalf("inside a value: %q", got)
	}
	if got := rawHeaderValue(nil, "Nats-Request-Info"); got != nil {
		t.Fatalf("no headers: %q", got)
	}
}
