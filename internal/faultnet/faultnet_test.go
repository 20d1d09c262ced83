package faultnet

import (
	"bufio"
	"net"
	"testing"
	"time"

	"github.com/braidmq/braid/internal/poll"
)

// echo runs a server that sends back every line it reads, and returns
// its address.
func echo(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := c.Write([]byte(line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return l.Addr().String()
}

type client struct {
	c net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, addr string) *client {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &client{c: c, r: bufio.NewReader(c)}
}

// roundTrip sends line and reads its echo within wait: "" when none came.
func (c *client) roundTrip(t *testing.T, line string, wait time.Duration) string {
	t.Helper()
	if _, err := c.c.Write([]byte(line + "\n")); err != nil {
		t.Fatal(err)
	}
	return c.read(wait)
}

func (c *client) read(wait time.Duration) string {
	c.c.SetReadDeadline(time.Now().Add(wait))
	got, err := c.r.ReadString('\n')
	if err != nil {
		return ""
	}
	return got[:len(got)-1]
}

// TestCutStallsAndHealDelivers: a cut stalls the bytes one way (the echo
// does not come back), whichever way is cut, and healing delivers what
// was stalled, in order; bytes the other way go on meanwhile.
func TestCutStallsAndHealDelivers(t *testing.T) {
	n := New()
	defer n.Close()
	addr, err := n.Proxy("a", "b", echo(t))
	if err != nil {
		t.Fatal(err)
	}
	c := dial(t, addr)
	if got := c.roundTrip(t, "one", 5*time.Second); got != "one" {
		t.Fatalf("through a healthy link: %q", got)
	}
	for _, way := range [][2]string{{"a", "b"}, {"b", "a"}} {
		n.Cut(way[0], way[1])
		if !n.IsCut(way[0], way[1]) || n.IsCut(way[1], way[0]) {
			t.Fatalf("cut %v: the wrong way is cut", way)
		}
		if got := c.roundTrip(t, "two", 200*time.Millisecond); got != "" {
			t.Fatalf("cut %s → %s: %q came back", way[0], way[1], got)
		}
		if _, err := c.c.Write([]byte("three\n")); err != nil {
			t.Fatal(err)
		}
		n.Heal(way[0], way[1])
		for _, want := range []string{"two", "three"} {
			if got := c.read(5 * time.Second); got != want {
				t.Fatalf("healed %s → %s: %q, want %q", way[0], way[1], got, want)
			}
		}
	}
	// A connection dialled while the link is cut carries nothing until
	// it heals.
	n.Partition([]string{"a"}, []string{"b"})
	d := dial(t, addr)
	if got := d.roundTrip(t, "new", 200*time.Millisecond); got != "" {
		t.Fatalf("a connection dialled across a partition carried %q", got)
	}
	n.HealAll()
	if got := d.read(5 * time.Second); got != "new" {
		t.Fatalf("after HealAll: %q", got)
	}
}

// TestDropClosesTheLinksConnections: Drop closes the connections between
// the two nodes, and no others; the link takes new ones.
func TestDropClosesTheLinksConnections(t *testing.T) {
	n := New()
	defer n.Close()
	target := echo(t)
	ab, _ := n.Proxy("a", "b", target)
	ac, _ := n.Proxy("a", "c", target)
	c1, c2 := dial(t, ab), dial(t, ac)
	for _, c := range []*client{c1, c2} {
		if got := c.roundTrip(t, "x", 5*time.Second); got != "x" {
			t.Fatalf("before the drop: %q", got)
		}
	}
	if k := n.Drop("b", "a"); k != 2 {
		t.Fatalf("dropped %d connections, want the 2 ends of one", k)
	}
	if got := c1.read(5 * time.Second); got != "" {
		t.Fatalf("a dropped connection read %q", got)
	}
	if got := c2.roundTrip(t, "y", 5*time.Second); got != "y" {
		t.Fatalf("another link's connection after the drop: %q", got)
	}
	if got := dial(t, ab).roundTrip(t, "z", 5*time.Second); got != "z" {
		t.Fatalf("a new connection after the drop: %q", got)
	}
}

// TestLatencyDelays: bytes one way wait the latency set on it.
func TestLatencyDelays(t *testing.T) {
	n := New()
	defer n.Close()
	addr, _ := n.Proxy("a", "b", echo(t))
	c := dial(t, addr)
	n.Latency("b", "a", 150*time.Millisecond)
	start := time.Now()
	if got := c.roundTrip(t, "slow", 5*time.Second); got != "slow" {
		t.Fatalf("with latency: %q", got)
	}
	if took := time.Since(start); took < 150*time.Millisecond {
		t.Fatalf("a round trip took %s under a latency of 150ms", took)
	}
}

// TestStrobeCutsAndHeals: a strobing link cuts and heals in turn, and is
// healed when stopped.
func TestStrobeCutsAndHeals(t *testing.T) {
	n := New()
	defer n.Close()
	stop := n.Strobe("a", "b", 20*time.Millisecond)
	sawCut, sawHealed := false, false
	poll.Until(5*time.Second, func() bool {
		if n.IsCut("a", "b") && n.IsCut("b", "a") {
			sawCut = true
		} else {
			sawHealed = true
		}
		return sawCut && sawHealed
	})
	stop()
	if !sawCut || !sawHealed {
		t.Fatalf("strobe: cut seen %v, healed seen %v", sawCut, sawHealed)
	}
	if n.IsCut("a", "b") || n.IsCut("b", "a") {
		t.Fatal("the link stayed cut after the strobe stopped")
	}
}
