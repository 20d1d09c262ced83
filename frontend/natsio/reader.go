package natsio

import (
	"bytes"
	"fmt"
)

// maxControlLine bounds a protocol line from the server (nats-server's
// max_control_line default is 4 KiB; subjects and reply subjects of
// Braid's requests are far shorter).
const maxControlLine = 64 << 10

// reader parses what the server sends, on the connection's read
// goroutine.
//
// Invariant: buf[start:end] is what was read and not parsed yet. Once a
// message aliasing buf was handed out (handed), no byte of buf before end
// is written again: reads only go to the free space after end, and a new
// buffer takes over when it runs short.
type reader struct {
	c          *Conn
	buf        []byte
	start, end int
	handed     bool
	// need is the size of the command at start when it is known to be
	// incomplete (0: its size is not known yet).
	need int
	// touched are the handlers that got messages in the current read.
	touched []Handler
	// lastSid's handler was lastHandler when subs had changed
	// lastChanges times (Conn.subsChanged).
	lastSid, lastChanges uint64
	lastHandler          Handler
}

// handler returns the handler of sid (nil: none), without the lock of the
// subscriptions while they stay as they were at the last lookup.
func (r *reader) handler(sid uint64) Handler {
	changes := r.c.subsChanged.Load()
	if r.lastHandler == nil || sid != r.lastSid || changes != r.lastChanges {
		r.lastSid, r.lastChanges, r.lastHandler = sid, changes, r.c.handler(sid)
	}
	return r.lastHandler
}

// handshakeLine returns the next protocol line, without its CRLF.
func (r *reader) handshakeLine() ([]byte, error) {
	for {
		data := r.buf[r.start:r.end]
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			r.start += i + 1
			return bytes.TrimSuffix(data[:i], []byte("\r")), nil
		}
		if err := r.fill(); err != nil {
			return nil, err
		}
	}
}

// fill reads more into the free space after end; into a new buffer (what
// is left unparsed copied to its front) when that space is short, or too
// small for the command under way. Bytes before start are never moved
// once a message aliasing them was handed out.
func (r *reader) fill() error {
	left := r.end - r.start
	size := r.c.opts.ReadBuffer
	minRead := max(size/16, 512)
	if left == 0 && !r.handed {
		r.start, r.end = 0, 0
	}
	free := len(r.buf) - r.end
	needMore := r.need - left // bytes the command under way still lacks
	if free < minRead || free < needMore {
		if !r.handed && r.start > 0 && len(r.buf)-left >= max(minRead, needMore) {
			copy(r.buf, r.buf[r.start:r.end])
		} else {
			nb := make([]byte, max(size, r.need, left+minRead))
			copy(nb, r.buf[r.start:r.end])
			r.buf, r.handed = nb, false
		}
		r.start, r.end = 0, left
	}
	n, err := r.c.conn.Read(r.buf[r.end:])
	r.end += n
	if n > 0 {
		return nil
	}
	return err
}

func (r *reader) run() {
	for {
		if err := r.fill(); err != nil {
			r.c.fail(fmt.Errorf("braid/natsio: read: %w", err))
			return
		}
		if err := r.parse(); err != nil {
			r.c.fail(err)
			return
		}
		for i, h := range r.touched {
			h.EndOfRead()
			r.touched[i] = nil
		}
		r.touched = r.touched[:0]
	}
}

// parse handles every complete command in buf[start:end].
func (r *reader) parse() error {
	r.need = 0
	for r.start < r.end {
		data := r.buf[r.start:r.end]
		nl := bytes.IndexByte(data, '\n')
		if nl < 0 {
			if len(data) > maxControlLine {
				return fmt.Errorf("%w: a protocol line longer than %d bytes", ErrProtocol, maxControlLine)
			}
			return nil
		}
		line := data[:nl]
		if len(line) > 0 && line[len(line)-1] == '\r' {
			line = line[:len(line)-1]
		}
		consumed := nl + 1
		switch {
		case bytes.HasPrefix(line, []byte("MSG ")):
			n, err := r.message(data, line[4:], consumed, false)
			if err != nil || n == 0 {
				return err
			}
			consumed = n
		case bytes.HasPrefix(line, []byte("HMSG ")):
			n, err := r.message(data, line[5:], consumed, true)
			if err != nil || n == 0 {
				return err
			}
			consumed = n
		case bytes.Equal(line, []byte("PING")):
			if err := r.c.out.appendRaw([]byte("PONG\r\n")); err != nil {
				return err
			}
		case bytes.Equal(line, []byte("PONG")):
			r.c.out.pongs.pop()
		case bytes.Equal(line, []byte("+OK")), bytes.HasPrefix(line, []byte("INFO ")):
		case bytes.HasPrefix(line, []byte("-ERR")):
			if r.c.opts.OnServerError != nil {
				r.c.opts.OnServerError(string(bytes.Trim(bytes.TrimSpace(line[4:]), "'")))
			}
		default:
			return fmt.Errorf("%w: unexpected %q", ErrProtocol, clip(line))
		}
		r.start += consumed
	}
	return nil
}

// message parses the arguments of a MSG or HMSG line and, when its payload
// is in data, delivers it and returns the bytes it takes from data; 0
// when more must be read first (need says how much).
func (r *reader) message(data, args []byte, lineLen int, withHeader bool) (int, error) {
	var f [5][]byte
	n := fields(args, &f)
	var subject, reply, sidArg, hdrArg, sizeArg []byte
	switch {
	case !withHeader && n == 3:
		subject, sidArg, sizeArg = f[0], f[1], f[2]
	case !withHeader && n == 4:
		subject, sidArg, reply, sizeArg = f[0], f[1], f[2], f[3]
	case withHeader && n == 4:
		subject, sidArg, hdrArg, sizeArg = f[0], f[1], f[2], f[3]
	case withHeader && n == 5:
		subject, sidArg, reply, hdrArg, sizeArg = f[0], f[1], f[2], f[3], f[4]
	default:
		return 0, fmt.Errorf("%w: message line %q", ErrProtocol, clip(args))
	}
	sid, ok1 := atoi(sidArg)
	size, ok2 := atoi(sizeArg)
	hdrLen := 0
	ok3 := true
	if withHeader {
		hdrLen, ok3 = atoi(hdrArg)
	}
	if !ok1 || !ok2 || !ok3 || hdrLen > size {
		return 0, fmt.Errorf("%w: message line %q", ErrProtocol, clip(args))
	}
	total := lineLen + size + 2
	if len(data) < total {
		r.need = total
		return 0, nil
	}
	body := data[lineLen : lineLen+size]
	if data[lineLen+size] != '\r' || data[lineLen+size+1] != '\n' {
		return 0, fmt.Errorf("%w: message payload not followed by CRLF", ErrProtocol)
	}
	h := r.handler(uint64(sid))
	if h == nil {
		return total, nil // unsubscribed meanwhile
	}
	m := Msg{Subject: subject, Reply: reply, Data: body[hdrLen:]}
	if hdrLen > 0 {
		m.Header = body[:hdrLen]
	}
	r.handed = true
	h.Message(m)
	touched := false
	for _, t := range r.touched {
		if t == h {
			touched = true
			break
		}
	}
	if !touched {
		r.touched = append(r.touched, h)
	}
	return total, nil
}

// fields splits b at runs of spaces and tabs into f, and returns how many
// fields there are (more than len(f) reports len(f)+1). The server
// separates arguments with single spaces: without a tab in b, the spaces
// are found by bytes.IndexByte rather than byte by byte.
func fields(b []byte, f *[5][]byte) int {
	if bytes.IndexByte(b, '\t') >= 0 {
		return fieldsAnyBlank(b, f)
	}
	n := 0
	for len(b) > 0 {
		i := bytes.IndexByte(b, ' ')
		if i < 0 {
			i = len(b)
		}
		if i > 0 {
			if n == len(f) {
				return n + 1
			}
			f[n] = b[:i]
			n++
		}
		if i == len(b) {
			break
		}
		b = b[i+1:]
	}
	return n
}

// fieldsAnyBlank is fields for a b with tabs.
func fieldsAnyBlank(b []byte, f *[5][]byte) int {
	n := 0
	for i := 0; i < len(b); {
		for i < len(b) && (b[i] == ' ' || b[i] == '\t') {
			i++
		}
		if i == len(b) {
			break
		}
		j := i
		for j < len(b) && b[j] != ' ' && b[j] != '\t' {
			j++
		}
		if n == len(f) {
			return n + 1
		}
		f[n] = b[i:j]
		n++
		i = j
	}
	return n
}

// atoi parses a non-negative decimal that fits an int.
func atoi(b []byte) (int, bool) {
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}
