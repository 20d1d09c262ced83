package natsio

import (
	"bytes"
	"testing"
)

// parseAll feeds data to a reader in chunks cut at the given points, as
// reads from the connection would arrive, and returns the messages
// delivered to subscription 1, or the first parse error.
func parseAll(data []byte, cuts []int) ([]Msg, error) {
	c := &Conn{opts: Options{ReadBuffer: 64}, subs: map[uint64]Handler{}, done: make(chan struct{})}
	c.out = newWriter(c, 1<<20)
	rec := newRecorder(-1)
	c.subs[1] = rec
	r := &reader{c: c, buf: make([]byte, 64)}
	prev := 0
	for _, cut := range append(cuts, len(data)) {
		if cut < prev || cut > len(data) {
			continue
		}
		chunk := data[prev:cut]
		prev = cut
		// What fill does, without a connection.
		if len(r.buf)-r.end < len(chunk) {
			nb := make([]byte, r.end-r.start+len(chunk)+64)
			copy(nb, r.buf[r.start:r.end])
			r.buf, r.end, r.start = nb, r.end-r.start, 0
		}
		r.end += copy(r.buf[r.end:], chunk)
		if err := r.parse(); err != nil {
			return nil, err
		}
	}
	return rec.msgs, nil
}

// FuzzParse: the parser never panics, and where it accepts a stream, it
// delivers the same messages however the stream is cut into reads.
func FuzzParse(f *testing.F) {
	f.Add([]byte("MSG a.b 1 5\r\nhello\r\nPING\r\nHMSG a.b 1 r.1 12 14\r\nNATS/1.0\r\n\r\nhi\r\n"), 7, 30)
	f.Add([]byte("MSG x 1 r 0\r\n\r\n+OK\r\nINFO {}\r\n-ERR 'oops'\r\nMSG y 2 3\r\nabc\r\n"), 3, 40)
	f.Add([]byte("HMSG s 1 4 3\r\nabc\r\n"), 1, 2)
	f.Fuzz(func(t *testing.T, data []byte, cutA, cutB int) {
		whole, err := parseAll(data, nil)
		if err != nil {
			return
		}
		a, b := min(max(cutA, 0), len(data)), min(max(cutB, 0), len(data))
		if a > b {
			a, b = b, a
		}
		parts, err := parseAll(data, []int{a, b})
		if err != nil {
			t.Fatalf("accepted whole, refused cut at %d, %d: %v", a, b, err)
		}
		if len(parts) != len(whole) {
			t.Fatalf("%d messages whole, %d cut at %d, %d", len(whole), len(parts), a, b)
		}
		for i := range whole {
			w, p := whole[i], parts[i]
			if !bytes.Equal(w.Subject, p.Subject) || !bytes.Equal(w.Reply, p.Reply) || !bytes.Equal(w.Header, p.Header) || !bytes.Equal(w.Data, p.Data) {
				t.Fatalf("message %d differs: %+v / %+v", i, w, p)
			}
		}
	})
}

// FuzzFields: fields splits as bytes.FieldsFunc does at spaces and tabs,
// with or without tabs in the line.
func FuzzFields(f *testing.F) {
	f.Add([]byte("a.b 1 r.1 12 14"))
	f.Add([]byte("  a b\tc  "))
	f.Add([]byte("a  b c d e f"))
	f.Fuzz(func(t *testing.T, b []byte) {
		want := bytes.FieldsFunc(b, func(r rune) bool { return r == ' ' || r == '\t' })
		var got [5][]byte
		n := fields(b, &got)
		if len(want) > len(got) {
			if n != len(got)+1 {
				t.Fatalf("fields(%q) = %d, want %d (more than %d)", b, n, len(got)+1, len(got))
			}
			want = want[:len(got)]
		} else if n != len(want) {
			t.Fatalf("fields(%q) = %d, want %d", b, n, len(want))
		}
		for i := range want {
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("fields(%q)[%d] = %q, want %q", b, i, got[i], want[i])
			}
		}
	})
}
