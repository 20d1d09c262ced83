package natsio

import (
	"bytes"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

func startServer(t *testing.T, opts *server.Options) *server.Server {
	t.Helper()
	if opts == nil {
		opts = &server.Options{}
	}
	opts.Host, opts.Port, opts.NoLog, opts.NoSigs = "127.0.0.1", -1, true, true
	ns, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(func() {
		ns.Shutdown()
		ns.WaitForShutdown()
	})
	return ns
}

// subscribed connects through conn, subscribes h to subject (queue group
// queue) and waits until the server knows of it; the test closes it.
func subscribed(t *testing.T, conn net.Conn, opts Options, subject, queue string, h Handler) *Conn {
	t.Helper()
	c, err := Connect(conn, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.Subscribe(subject, queue, h); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	return c
}

// natsClient is a nats.go connection to ns; the test closes it.
func natsClient(t *testing.T, ns *server.Server) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// recorder is a Handler that keeps copies of what it gets.
type recorder struct {
	mu    sync.Mutex
	msgs  []Msg
	reads int
	got   chan struct{}
	want  int
}

func newRecorder(want int) *recorder { return &recorder{want: want, got: make(chan struct{})} }

func (r *recorder) Message(m Msg) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, m) // the slices stay valid: the buffer is never reused
	if r.want > 0 && len(r.msgs) == r.want {
		close(r.got)
	}
}

func (r *recorder) EndOfRead() {
	r.mu.Lock()
	r.reads++
	r.mu.Unlock()
}

func (r *recorder) wait(t *testing.T) []Msg {
	t.Helper()
	select {
	case <-r.got:
	case <-time.After(10 * time.Second):
		r.mu.Lock()
		defer r.mu.Unlock()
		t.Fatalf("got %d of %d messages", len(r.msgs), r.want)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Msg(nil), r.msgs...)
}

// dialers connect through the embedded server's in-process pipe and over
// TCP: every test runs over both.
var dialers = map[string]func(t *testing.T, ns *server.Server) net.Conn{
	"pipe": func(t *testing.T, ns *server.Server) net.Conn {
		c, err := ns.InProcessConn()
		if err != nil {
			t.Fatal(err)
		}
		return c
	},
	"tcp": func(t *testing.T, ns *server.Server) net.Conn {
		c, err := net.Dial("tcp", strings.TrimPrefix(ns.ClientURL(), "nats://"))
		if err != nil {
			t.Fatal(err)
		}
		return c
	},
}

func TestMessagesArriveWholeAndInOrder(t *testing.T) {
	for name, dial := range dialers {
		t.Run(name, func(t *testing.T) {
			ns := startServer(t, &server.Options{MaxPayload: 8 << 20})
			const n = 2000
			rec := newRecorder(n + 2)
			subscribed(t, dial(t, ns), Options{Name: "test", ReadBuffer: 4096}, "in.>", "q", rec)
			nc := natsClient(t, ns)
			for i := range n {
				m := &nats.Msg{Subject: fmt.Sprintf("in.%d", i%7), Data: []byte(fmt.Sprintf("payload-%d", i))}
				if i%3 == 0 {
					m.Reply = fmt.Sprintf("reply.%d", i)
				}
				if i%5 == 0 {
					m.Header = nats.Header{"Braid-Key": []string{fmt.Sprintf("k%d", i)}}
				}
				if err := nc.PublishMsg(m); err != nil {
					t.Fatal(err)
				}
			}
			big := bytes.Repeat([]byte("0123456789abcdef"), 3<<20/16) // spans many reads
			if err := nc.PublishMsg(&nats.Msg{Subject: "in.big", Data: big, Header: nats.Header{"X": []string{"y"}}}); err != nil {
				t.Fatal(err)
			}
			if err := nc.Publish("in.empty", nil); err != nil {
				t.Fatal(err)
			}
			msgs := rec.wait(t)
			for i := range n {
				m := msgs[i]
				if string(m.Subject) != fmt.Sprintf("in.%d", i%7) || string(m.Data) != fmt.Sprintf("payload-%d", i) {
					t.Fatalf("message %d: subject %q data %q", i, m.Subject, m.Data)
				}
				if wantReply := i%3 == 0; wantReply != (string(m.Reply) == fmt.Sprintf("reply.%d", i)) || !wantReply && len(m.Reply) > 0 {
					t.Fatalf("message %d: reply %q", i, m.Reply)
				}
				if wantHdr := i%5 == 0; wantHdr != bytes.Contains(m.Header, []byte(fmt.Sprintf("Braid-Key: k%d\r\n", i))) ||
					!wantHdr && len(m.Header) > 0 {
					t.Fatalf("message %d: header %q", i, m.Header)
				}
			}
			if m := msgs[n]; !bytes.Equal(m.Data, big) || !bytes.HasPrefix(m.Header, []byte("NATS/1.0\r\n")) {
				t.Fatalf("big message: %d bytes, header %q", len(m.Data), m.Header)
			}
			if m := msgs[n+1]; string(m.Subject) != "in.empty" || len(m.Data) != 0 {
				t.Fatalf("empty message: %+v", m)
			}
			rec.mu.Lock()
			reads := rec.reads
			rec.mu.Unlock()
			if reads == 0 || reads > n {
				t.Fatalf("EndOfRead called %d times for %d messages", reads, n+2)
			}
		})
	}
}

// replier answers every request on the connection it was given.
type replier struct {
	c   *Conn
	hdr []byte
}

func (r *replier) Message(m Msg) {
	_ = r.c.Publish(m.Reply, nil, r.hdr, append([]byte("re:"), m.Data...))
}
func (r *replier) EndOfRead() {}

func TestPublishAnswersRequests(t *testing.T) {
	for name, dial := range dialers {
		t.Run(name, func(t *testing.T) {
			ns := startServer(t, nil)
			c, err := Connect(dial(t, ns), Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := c.Subscribe("plain", "", &replier{c: c}); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Subscribe("headed", "", &replier{c: c, hdr: []byte("NATS/1.0\r\nCode: 7\r\n\r\n")}); err != nil {
				t.Fatal(err)
			}
			if err := c.Flush(5 * time.Second); err != nil {
				t.Fatal(err)
			}
			nc, err := nats.Connect(ns.ClientURL())
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			for i := range 50 {
				m, err := nc.Request("plain", []byte(fmt.Sprint(i)), 5*time.Second)
				if err != nil || string(m.Data) != fmt.Sprintf("re:%d", i) {
					t.Fatalf("request %d: %v %q", i, err, m.Data)
				}
			}
			m, err := nc.Request("headed", []byte("x"), 5*time.Second)
			if err != nil || string(m.Data) != "re:x" || m.Header.Get("Code") != "7" {
				t.Fatalf("headed: %v %+v", err, m)
			}
		})
	}
}

func TestServerPingsAreAnsweredAndAuthIsSent(t *testing.T) {
	ns := startServer(t, &server.Options{Username: "braid", Password: "s3cret", PingInterval: 20 * time.Millisecond, MaxPingsOut: 2})
	if _, err := Connect(dialers["tcp"](t, ns), Options{User: "braid", Password: "wrong"}); err == nil ||
		!strings.Contains(err.Error(), "refused") {
		t.Fatalf("wrong password: %v", err)
	}
	c, err := Connect(dialers["tcp"](t, ns), Options{User: "braid", Password: "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Many ping intervals: a connection that did not answer would be cut.
	deadline := time.Now().Add(300 * time.Millisecond)
	for time.Now().Before(deadline) {
		if err := c.Flush(time.Second); err != nil {
			t.Fatalf("flush: %v", err)
		}
	}
	select {
	case <-c.Done():
		t.Fatalf("connection ended: %v", c.Err())
	default:
	}
}

func TestDoneWhenTheServerGoes(t *testing.T) {
	ns := startServer(t, nil)
	c, err := Connect(dialers["pipe"](t, ns), Options{})
	if err != nil {
		t.Fatal(err)
	}
	ns.Shutdown()
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done not closed after the server shut down")
	}
	if c.Err() == nil || c.Publish([]byte("x"), nil, nil, nil) != ErrClosed {
		t.Fatalf("after the end: Err %v", c.Err())
	}
}

func TestFieldsAndAtoi(t *testing.T) {
	var f [5][]byte
	if n := fields([]byte("  a b\tc  "), &f); n != 3 || string(f[2]) != "c" {
		t.Fatalf("fields: %d %q", n, f[:n])
	}
	if n := fields([]byte("a b c d e f"), &f); n != 6 {
		t.Fatalf("six fields: %d", n)
	}
	for in, want := range map[string]int{"0": 0, "42": 42, "123456789": 123456789} {
		if got, ok := atoi([]byte(in)); !ok || got != want {
			t.Fatalf("atoi(%q) = %d %v", in, got, ok)
		}
	}
	for _, bad := range []string{"", "-1", "1a", "9999999999999999999"} {
		if _, ok := atoi([]byte(bad)); ok {
			t.Fatalf("atoi(%q) accepted", bad)
		}
	}
}

// frameReplier answers each request with WriteFrames from a goroutine of
// its own, as a committer acknowledging batches does, many at once.
type frameReplier struct{ c *Conn }

func (r *frameReplier) Message(m Msg) {
	go func() {
		_ = r.c.WriteFrames(AppendPublish(nil, m.Reply, nil, nil, append([]byte("re:"), m.Data...)))
	}()
}
func (r *frameReplier) EndOfRead() {}

func TestWriteFramesFromManyGoroutines(t *testing.T) {
	ns := startServer(t, nil)
	r := &frameReplier{}
	r.c = subscribed(t, dialers["tcp"](t, ns), Options{}, "frames", "", r)
	nc := natsClient(t, ns)
	const n = 2000
	inbox := nats.NewInbox()
	got := make(chan string, n)
	sub, err := nc.Subscribe(inbox+".*", func(m *nats.Msg) { got <- string(m.Data) })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	for i := range n {
		if err := nc.PublishRequest("frames", fmt.Sprintf("%s.%d", inbox, i), []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]bool{}
	for len(seen) < n {
		select {
		case s := <-got:
			seen[s] = true
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d replies", len(seen), n)
		}
	}
	for i := range n {
		if !seen[fmt.Sprintf("re:%d", i)] {
			t.Fatalf("reply %d missing", i)
		}
	}
}

// TestUnsubscribeDeliversWhatTheServerSentBefore: messages the server sent
// before it took an UNSUB still reach the handler (the shutdown of the
// produce front-end answers every request it was sent).
func TestUnsubscribeDeliversWhatTheServerSentBefore(t *testing.T) {
	ns := startServer(t, nil)
	const n = 5000
	rec := newRecorder(n)
	c := subscribed(t, dialers["tcp"](t, ns), Options{}, "u", "", rec)
	nc := natsClient(t, ns)
	var sid uint64 = 1
	for i := range n {
		if err := nc.Publish("u", []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil { // the server has routed all of them
		t.Fatal(err)
	}
	if err := c.Unsubscribe(sid); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if msgs := rec.wait(t); len(msgs) != n {
		t.Fatalf("%d of %d messages delivered", len(msgs), n)
	}
}
