// Package natsio is a lean NATS client connection for taking requests at a
// high rate: it parses the server's MSG and HMSG frames without allocating
// per message, hands them to a handler in arrival order with one call at
// the end of each read (so the handler can act on many at once), and
// buffers publishes into one write per flush.
//
// It exists because Braid's single-message produce path spent most of its
// time in the general client (nats.go): a Msg, a header map and a
// goroutine hand-off per request, a lock and a flush signal per reply. It
// does only what that path needs: CONNECT (with user and password or a
// token), SUB, UNSUB, PUB, HPUB, PING/PONG. No reconnection: the owner
// dials again when Done is closed.
//
// Messages alias the buffer they were read into, and a buffer that held a
// message is never reused: a handler may keep a Msg's slices for as long as
// it needs them, and the garbage collector frees a buffer once nothing
// refers to it.
//
// What it does not own: subjects, requests and replies of Braid (cluster).
package natsio

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Msg is one message delivered by the server. Its slices alias the read
// buffer (see the package doc).
type Msg struct {
	Subject []byte
	Reply   []byte // empty: no reply expected
	Header  []byte // the raw header block ("NATS/1.0\r\n..."), empty when none
	Data    []byte
}

// Handler receives the messages of one subscription, on the connection's
// read goroutine, in arrival order.
type Handler interface {
	// Message is called for each message; the handler may keep m's slices.
	Message(m Msg)
	// EndOfRead is called after the messages of one read from the
	// connection, if the subscription got any.
	EndOfRead()
}

// Options configure a connection.
type Options struct {
	Name     string // the connection name the server shows
	User     string
	Password string
	Token    string
	// ReadBuffer is the size of each read buffer (default 256 KiB); a
	// message larger than it gets a buffer of its own size.
	ReadBuffer int
	// MaxPending bounds the bytes publishes may queue before they block
	// (default 64 MiB).
	MaxPending int
	// HandshakeTimeout bounds INFO, CONNECT and the first PONG (default 10s).
	HandshakeTimeout time.Duration
	// OnServerError, when set, is told of each -ERR the server sends
	// after the handshake (a permissions violation, say); the server
	// closes the connection after most of them, which Done reports.
	OnServerError func(msg string)
}

// Errors.
var (
	// ErrClosed is returned by Publish and Subscribe once the connection is
	// closed (by Close or by a failure: see Err).
	ErrClosed = errors.New("braid/natsio: connection closed")
	// ErrProtocol wraps a frame from the server that could not be parsed.
	ErrProtocol = errors.New("braid/natsio: protocol error")
)

// Conn is a connection to a NATS server. Its methods are safe for
// concurrent use.
type Conn struct {
	conn net.Conn
	opts Options
	// MaxPayload is the server's max_payload, from its INFO.
	MaxPayload int

	subMu sync.RWMutex
	// subs maps a sid to its handler; nextSid is the last sid given.
	// Guarded by subMu.
	subs    map[uint64]Handler
	nextSid uint64
	// subsChanged counts the changes of subs (written under subMu): the
	// reader keeps the handler it looked up last until it moves.
	subsChanged atomic.Uint64

	out *writer

	doneOnce sync.Once
	done     chan struct{}
	errMu    sync.Mutex
	err      error // why the connection ended; guarded by errMu
}

// serverInfo is the part of INFO the connection reads.
type serverInfo struct {
	MaxPayload int  `json:"max_payload"`
	Headers    bool `json:"headers"`
}

// Connect runs the handshake on conn (a net.Pipe from the embedded
// server's InProcessConn, or a TCP connection) and starts reading.
func Connect(conn net.Conn, opts Options) (*Conn, error) {
	if opts.ReadBuffer <= 0 {
		opts.ReadBuffer = 256 << 10
	}
	if opts.MaxPending <= 0 {
		opts.MaxPending = 64 << 20
	}
	if opts.HandshakeTimeout <= 0 {
		opts.HandshakeTimeout = 10 * time.Second
	}
	c := &Conn{conn: conn, opts: opts, subs: map[uint64]Handler{}, done: make(chan struct{})}
	r := &reader{c: c, buf: make([]byte, opts.ReadBuffer)}
	info, err := c.handshake(r)
	if err != nil {
		conn.Close()
		return nil, err
	}
	c.MaxPayload = info.MaxPayload
	c.out = newWriter(c, opts.MaxPending)
	go c.out.run()
	go r.run()
	return c, nil
}

// handshake reads INFO, sends CONNECT and PING, and waits for PONG; the
// reader keeps what followed the PONG.
func (c *Conn) handshake(r *reader) (serverInfo, error) {
	var info serverInfo
	deadline := time.Now().Add(c.opts.HandshakeTimeout)
	if err := c.conn.SetDeadline(deadline); err != nil {
		return info, err
	}
	defer c.conn.SetDeadline(time.Time{})
	line, err := r.handshakeLine()
	if err != nil {
		return info, fmt.Errorf("braid/natsio: reading INFO: %w", err)
	}
	rest, ok := bytes.CutPrefix(line, []byte("INFO "))
	if !ok {
		return info, fmt.Errorf("%w: expected INFO, got %q", ErrProtocol, clip(line))
	}
	if err := json.Unmarshal(rest, &info); err != nil {
		return info, fmt.Errorf("%w: INFO: %v", ErrProtocol, err)
	}
	if !info.Headers {
		return info, errors.New("braid/natsio: the server does not support headers")
	}
	connect := map[string]any{"verbose": false, "pedantic": false, "name": c.opts.Name, "lang": "go", "version": "braid-natsio",
		"protocol": 1, "headers": true, "no_responders": true, "echo": true}
	if c.opts.User != "" {
		connect["user"], connect["pass"] = c.opts.User, c.opts.Password
	}
	if c.opts.Token != "" {
		connect["auth_token"] = c.opts.Token
	}
	b, _ := json.Marshal(connect)
	frame := append(append([]byte("CONNECT "), b...), "\r\nPING\r\n"...)
	if _, err := c.conn.Write(frame); err != nil {
		return info, fmt.Errorf("braid/natsio: sending CONNECT: %w", err)
	}
	for {
		line, err := r.handshakeLine()
		if err != nil {
			return info, fmt.Errorf("braid/natsio: waiting for PONG: %w", err)
		}
		switch {
		case bytes.Equal(line, []byte("PONG")):
			return info, nil
		case bytes.HasPrefix(line, []byte("-ERR")):
			return info, fmt.Errorf("braid/natsio: server refused the connection: %s", bytes.TrimSpace(line[4:]))
		case bytes.HasPrefix(line, []byte("INFO ")), bytes.Equal(line, []byte("+OK")):
		case bytes.Equal(line, []byte("PING")):
			if _, err := c.conn.Write([]byte("PONG\r\n")); err != nil {
				return info, err
			}
		default:
			return info, fmt.Errorf("%w: unexpected %q during the handshake", ErrProtocol, clip(line))
		}
	}
}

// Subscribe subscribes h to subject, in queue group queue unless it is
// empty, and returns the subscription id.
func (c *Conn) Subscribe(subject, queue string, h Handler) (uint64, error) {
	c.subMu.Lock()
	c.nextSid++
	sid := c.nextSid
	c.subs[sid] = h
	c.subsChanged.Add(1)
	c.subMu.Unlock()
	line := "SUB " + subject + " "
	if queue != "" {
		line += queue + " "
	}
	line += strconv.FormatUint(sid, 10) + "\r\n"
	if err := c.out.appendRaw([]byte(line)); err != nil {
		c.subMu.Lock()
		delete(c.subs, sid)
		c.subsChanged.Add(1)
		c.subMu.Unlock()
		return 0, err
	}
	return sid, nil
}

// Unsubscribe ends a subscription. Messages the server sent before it
// took the UNSUB are still delivered: the handler goes only once the
// server has answered a PING sent after it.
func (c *Conn) Unsubscribe(sid uint64) error {
	c.out.pongs.push(func() {
		c.subMu.Lock()
		delete(c.subs, sid)
		c.subsChanged.Add(1)
		c.subMu.Unlock()
	})
	return c.out.appendRaw([]byte("UNSUB " + strconv.FormatUint(sid, 10) + "\r\nPING\r\n"))
}

// Publish queues a message (with the raw header block hdr when it is not
// empty) for the next flush, which follows at once unless one is under
// way. It blocks while MaxPending bytes are queued.
func (c *Conn) Publish(subject, reply, hdr, data []byte) error {
	return c.out.publish(subject, reply, hdr, data)
}

// WriteFrames queues publishes made by AppendPublish and writes them, with
// whatever else is queued, from the calling goroutine when no write is
// under way (so that one write goes out without a hand-over to the
// connection's writer); else the write under way is followed by theirs.
// It blocks while MaxPending bytes are queued.
func (c *Conn) WriteFrames(frames []byte) error { return c.out.writeFrames(frames) }

// Hold makes WriteFrames queue what it is given, without writing, until
// Release: a caller about to answer many requests from one goroutine sends
// their replies in one write. Holds nest.
func (c *Conn) Hold() { c.out.hold() }

// Release ends a Hold; the last one writes what was queued meanwhile.
func (c *Conn) Release() { c.out.release() }

// Flush waits until everything published before it has been written to
// the connection, and the server has answered a PING sent after it.
func (c *Conn) Flush(timeout time.Duration) error {
	pong := make(chan struct{})
	c.out.pongs.push(func() { close(pong) })
	if err := c.out.appendRaw([]byte("PING\r\n")); err != nil {
		return err
	}
	select {
	case <-pong:
		return nil
	case <-c.done:
		return c.Err()
	case <-time.After(timeout):
		return errors.New("braid/natsio: flush timed out")
	}
}

// Done is closed when the connection ends.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err is why the connection ended (ErrClosed after Close).
func (c *Conn) Err() error {
	c.errMu.Lock()
	defer c.errMu.Unlock()
	return c.err
}

// Close flushes what is queued (for up to a second) and closes the
// connection.
func (c *Conn) Close() error {
	c.out.drain(time.Second)
	c.fail(ErrClosed)
	return nil
}

// fail ends the connection with err (the first one sticks).
func (c *Conn) fail(err error) {
	c.doneOnce.Do(func() {
		c.errMu.Lock()
		c.err = err
		c.errMu.Unlock()
		close(c.done)
		c.conn.Close()
		c.out.wake()
	})
}

func (c *Conn) handler(sid uint64) Handler {
	c.subMu.RLock()
	defer c.subMu.RUnlock()
	return c.subs[sid]
}

func clip(b []byte) []byte {
	if len(b) > 128 {
		return b[:128]
	}
	return b
}
