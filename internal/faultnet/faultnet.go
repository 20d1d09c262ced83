// Package faultnet puts a TCP proxy on every link between the nodes of a
// test cluster and breaks the links on command, as a network would: cut
// one way or both (a partition), slowed, or their connections dropped.
//
// A proxy stands for one direction of dialling (node from dials node to
// through it); the bytes it carries flow both ways, and each way is a
// direction of the link: bytes the dialler sends go from → to, the
// answers to → from. Cutting from → to stalls those bytes wherever they
// travel (in from's proxies to to, and in to's proxies to from): a
// stalled copy stops reading, so the sender's socket buffers fill and
// its writes block, as over a link that loses every packet, and nothing
// is lost or reordered when the link heals (TCP would have resent it).
// A connection dialled while its link is cut is accepted and carries
// nothing, as a dial whose packets are lost never completes its
// handshake.
package faultnet

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// Net is the links of one cluster and their proxies.
type Net struct {
	mu      sync.Mutex
	changed *sync.Cond // signalled when a direction's state changes
	dirs    map[dir]*state
	proxies []*proxy
	closed  bool
}

// dir is one direction of a link.
type dir struct{ from, to string }

// state is what a direction does to the bytes that cross it.
type state struct {
	cut     bool
	latency time.Duration
	// conns are the connections that carry bytes this way, to drop.
	conns map[net.Conn]struct{}
}

// New returns a network of healthy links and no proxies.
func New() *Net {
	n := &Net{dirs: map[dir]*state{}}
	n.changed = sync.NewCond(&n.mu)
	return n
}

func (n *Net) stateLocked(d dir) *state {
	s, ok := n.dirs[d]
	if !ok {
		s = &state{conns: map[net.Conn]struct{}{}}
		n.dirs[d] = s
	}
	return s
}

// proxy is one listener: from dials to's target through it.
type proxy struct {
	from, to, target string
	l                net.Listener
}

// Proxy listens on a free port of 127.0.0.1 and returns its address:
// node from dials it to reach target, an address of node to.
func (n *Net) Proxy(from, to, target string) (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	p := &proxy{from: from, to: to, target: target, l: l}
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		l.Close()
		return "", errors.New("faultnet: closed")
	}
	n.proxies = append(n.proxies, p)
	n.mu.Unlock()
	go n.accept(p)
	return l.Addr().String(), nil
}

func (n *Net) accept(p *proxy) {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		go n.serve(p, c)
	}
}

// serve carries one connection: the dialler's bytes from → to, the
// target's to → from.
func (n *Net) serve(p *proxy, in net.Conn) {
	out, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		in.Close()
		return
	}
	up, down := dir{p.from, p.to}, dir{p.to, p.from}
	n.mu.Lock()
	n.stateLocked(up).conns[in] = struct{}{}
	n.stateLocked(down).conns[out] = struct{}{}
	n.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { n.copy(up, out, in); done <- struct{}{} }()
	go func() { n.copy(down, in, out); done <- struct{}{} }()
	<-done
	in.Close()
	out.Close()
	<-done
	n.mu.Lock()
	delete(n.stateLocked(up).conns, in)
	delete(n.stateLocked(down).conns, out)
	n.mu.Unlock()
}

// copy forwards src to dst across direction d: each chunk read waits
// while d is cut, and until d's latency has passed since it was read,
// before it is written. Reading goes on meanwhile (up to a bound), so a
// latency delays the bytes without slowing the link down.
func (n *Net) copy(d dir, dst io.Writer, src io.Reader) {
	type chunk struct {
		b  []byte
		at time.Time
	}
	chunks := make(chan chunk, 64)
	go func() {
		defer close(chunks)
		for {
			buf := make([]byte, 32<<10)
			k, err := src.Read(buf)
			if k > 0 {
				chunks <- chunk{buf[:k], time.Now()}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range chunks {
		if !n.pass(d, c.at) {
			break
		}
		if _, err := dst.Write(c.b); err != nil {
			break
		}
	}
	for range chunks {
		// Drained until the reader stops (its connection closes).
	}
}

// pass waits until direction d lets bytes through and until its latency
// has passed since at; false when the network closed.
func (n *Net) pass(d dir, at time.Time) bool {
	n.mu.Lock()
	for !n.closed && n.stateLocked(d).cut {
		n.changed.Wait()
	}
	closed, latency := n.closed, n.stateLocked(d).latency
	n.mu.Unlock()
	if closed {
		return false
	}
	if wait := time.Until(at.Add(latency)); latency > 0 && wait > 0 {
		t := time.NewTimer(wait)
		<-t.C
	}
	return true
}

// Cut stalls the bytes from → to (one way).
func (n *Net) Cut(from, to string) { n.set(dir{from, to}, func(s *state) { s.cut = true }) }

// Heal lets the bytes from → to through again, and the stalled ones go.
func (n *Net) Heal(from, to string) { n.set(dir{from, to}, func(s *state) { s.cut = false }) }

// Latency delays every chunk of bytes from → to by d (0: none).
func (n *Net) Latency(from, to string, d time.Duration) {
	n.set(dir{from, to}, func(s *state) { s.latency = d })
}

func (n *Net) set(d dir, f func(*state)) {
	n.mu.Lock()
	f(n.stateLocked(d))
	n.mu.Unlock()
	n.changed.Broadcast()
}

// Partition cuts every link between a node of a and a node of b, both
// ways.
func (n *Net) Partition(a, b []string) {
	n.mu.Lock()
	for _, x := range a {
		for _, y := range b {
			n.stateLocked(dir{x, y}).cut = true
			n.stateLocked(dir{y, x}).cut = true
		}
	}
	n.mu.Unlock()
	n.changed.Broadcast()
}

// HealAll heals every direction and takes every latency off.
func (n *Net) HealAll() {
	n.mu.Lock()
	for _, s := range n.dirs {
		s.cut, s.latency = false, 0
	}
	n.mu.Unlock()
	n.changed.Broadcast()
}

// IsCut reports whether bytes from → to are stalled.
func (n *Net) IsCut(from, to string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.stateLocked(dir{from, to}).cut
}

// Strobe cuts the link between a and b (both ways) and heals it in turn,
// every period, until stop is called (which heals it).
func (n *Net) Strobe(a, b string, period time.Duration) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(period)
		defer t.Stop()
		cut := false
		for {
			select {
			case <-quit:
				n.Heal(a, b)
				n.Heal(b, a)
				return
			case <-t.C:
				cut = !cut
				if cut {
					n.Partition([]string{a}, []string{b})
				} else {
					n.Heal(a, b)
					n.Heal(b, a)
				}
			}
		}
	}()
	return func() { close(quit); <-done }
}

// Drop closes every connection between from and to (both ways), as a
// reset would; the nodes dial again.
func (n *Net) Drop(from, to string) int {
	n.mu.Lock()
	var conns []net.Conn
	for _, d := range []dir{{from, to}, {to, from}} {
		for c := range n.stateLocked(d).conns {
			conns = append(conns, c)
		}
	}
	n.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
	return len(conns)
}

// Close stops every proxy and closes its connections; stalled bytes are
// dropped.
func (n *Net) Close() {
	n.mu.Lock()
	n.closed = true
	proxies := n.proxies
	var conns []net.Conn
	for _, s := range n.dirs {
		for c := range s.conns {
			conns = append(conns, c)
		}
	}
	n.mu.Unlock()
	n.changed.Broadcast()
	for _, p := range proxies {
		p.l.Close()
	}
	for _, c := range conns {
		c.Close()
	}
}
