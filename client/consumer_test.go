package client

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/braidmq/braid/internal/poll"

	"github.com/braidmq/braid/api"
)

// readN reads n messages and returns their payloads; it acks every message
// whose sequence number ackBelow(seq) says to.
func readN(t *testing.T, c *StreamConsumer, n int, ack func(seq int) bool) []int {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var seqs []int
	for range n {
		m, err := c.Next(ctx)
		if err != nil {
			t.Fatalf("after %d messages: %v", len(seqs), err)
		}
		seq, _ := strconv.Atoi(string(m.Payload))
		seqs = append(seqs, seq)
		if ack == nil || ack(seq) {
			m.Ack()
		}
	}
	return seqs
}

func TestConsumerReadsAndAcks(t *testing.T) {
	f, nc := newFake(t, 2, 4)
	f.appendDirect(300, 10)
	c, err := NewStreamConsumer(nc, fakeURI, "sub", WithFetch(16, 1<<20, 10*time.Millisecond), WithAckInterval(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	last := map[int]int{}
	for _, seq := range readN(t, c, 300, nil) {
		if prev, ok := last[seq%10]; ok && prev >= seq {
			t.Fatalf("key k%d: %d after %d", seq%10, seq, prev)
		}
		last[seq%10] = seq
	}
	if err := c.FlushAcks(t.Context()); err != nil {
		t.Fatal(err)
	}
	f.checkAllAcked(t, "")
	if c.Assigned() != 4 {
		t.Errorf("Assigned() = %d, want 4", c.Assigned())
	}
	if err := c.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	leaves := f.leaves
	f.mu.Unlock()
	if leaves != 1 {
		t.Fatalf("%d leaves, want 1", leaves)
	}
	if _, err := c.Next(t.Context()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Next after Close = %v, want ErrClosed", err)
	}
}

// TestFlushAcksWaitsForBackgroundFlush: the ack loop has taken the pending
// acks and its request is still unanswered when the application calls
// FlushAcks; FlushAcks must return only once the server has them.
func TestFlushAcksWaitsForBackgroundFlush(t *testing.T) {
	f, nc := newFake(t, 1, 2)
	f.appendDirect(40, 4)
	f.mu.Lock()
	f.ackDelay = 300 * time.Millisecond
	f.mu.Unlock()
	c, err := NewStreamConsumer(nc, fakeURI, "sub", WithFetch(64, 1<<20, 10*time.Millisecond), WithAckInterval(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(t.Context())
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var msgs []*Message
	for range 40 {
		m, err := c.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, m)
	}
	for _, m := range msgs {
		m.Ack()
	}
	poll.Eventually(t, 10*time.Second, "a background ack request", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.ackArrived > 0
	})
	if err := c.FlushAcks(t.Context()); err != nil {
		t.Fatal(err)
	}
	f.checkAllAcked(t, "FlushAcks returned with ")
}

// TestCloseRightAfterARestartKeepsItsAcks: the server restarts while acks
// wait to be sent; Close at once must not leave without them (the units
// would go to another consumer with messages this one acknowledged): it
// re-joins, fetches until the server has handed those messages out again,
// and acks them.
func TestCloseRightAfterARestartKeepsItsAcks(t *testing.T) {
	f, nc := newFake(t, 1, 2)
	f.appendDirect(200, 7)
	c, err := NewStreamConsumer(nc, fakeURI, "sub", WithFetch(10, 1<<20, 10*time.Millisecond), WithAckInterval(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	readN(t, c, 50, nil)
	if err := c.FlushAcks(t.Context()); err != nil {
		t.Fatal(err)
	}
	acked := map[unit]uint64{}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for range 70 {
		m, err := c.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		m.Ack()
		u := unit{m.ID.Segment, m.ID.Bucket}
		acked[u] = max(acked[u], m.ID.Offset+1)
	}
	f.restart()
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for u, want := range acked {
		if f.ackedUpTo[u] < want {
			t.Errorf("unit %v acked up to %d after Close, the application acked up to %d", u, f.ackedUpTo[u], want)
		}
	}
}

// TestLostFetchReplyIsDeliveredAgain: the server hands out messages in a
// reply that never arrives (the fetch times out). The consumer resyncs on
// its next fetch: the application gets every message exactly once, and its
// cumulative acks never cover one it did not see.
func TestLostFetchReplyIsDeliveredAgain(t *testing.T) {
	f, nc := newFake(t, 1, 2)
	f.appendDirect(200, 10)
	c, err := NewStreamConsumer(nc, fakeURI, "sub", WithFetch(30, 1<<20, 10*time.Millisecond),
		WithAckInterval(time.Millisecond), WithRequestTimeout(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(t.Context())
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	seen := map[int]bool{}
	var timeouts int
	for len(seen) < 200 {
		if len(seen) == 50 {
			f.mu.Lock()
			f.dropFetches = 2
			f.mu.Unlock()
		}
		m, err := c.Next(ctx)
		if errors.Is(err, ErrTimeout) {
			timeouts++
			continue
		}
		if err != nil {
			t.Fatalf("after %d messages: %v", len(seen), err)
		}
		seq, _ := strconv.Atoi(string(m.Payload))
		if seen[seq] {
			t.Fatalf("message %d delivered twice", seq)
		}
		seen[seq] = true
		m.Ack()
	}
	if err := c.FlushAcks(t.Context()); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	resyncs := f.resyncs
	f.mu.Unlock()
	if timeouts == 0 || resyncs == 0 {
		t.Fatalf("%d fetch timeouts, %d resyncs: the test lost no reply", timeouts, resyncs)
	}
	f.checkAllAcked(t, "")
}

// TestConsumerRestartNoDuplicates: the server forgets the consumer and
// rewinds to the durable ack positions; the consumer re-joins, the
// application sees nothing twice and misses nothing, and acks that were
// pending at the restart reach the server once it has handed the messages
// out again (it refuses acks beyond what it delivered).
func TestConsumerRestartNoDuplicates(t *testing.T) {
	f, nc := newFake(t, 1, 2)
	f.appendDirect(200, 7)
	c, err := NewStreamConsumer(nc, fakeURI, "sub", WithFetch(10, 1<<20, 10*time.Millisecond), WithAckInterval(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	// Read 120 and ack them all, but only the acks of the first 50 are
	// flushed before the restart.
	first := readN(t, c, 50, nil)
	if err := c.FlushAcks(t.Context()); err != nil {
		t.Fatal(err)
	}
	first = append(first, readN(t, c, 70, nil)...)
	f.restart()
	rest := readN(t, c, 80, nil)
	seen := map[int]bool{}
	for _, s := range append(first, rest...) {
		if seen[s] {
			t.Fatalf("message %d delivered twice", s)
		}
		seen[s] = true
	}
	if len(seen) != 200 {
		t.Fatalf("%d distinct messages, want 200", len(seen))
	}
	if err := c.FlushAcks(t.Context()); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	rejoined := f.consumers[c.Name()]
	f.mu.Unlock()
	if !rejoined {
		t.Fatal("the consumer did not re-join")
	}
	f.checkAllAcked(t, "")
}

// TestConsumerNextCancelKeepsFetch: a Next that gives up while its fetch is
// in flight must not lose the messages that fetch brings.
func TestConsumerNextCancelKeepsFetch(t *testing.T) {
	f, nc := newFake(t, 1, 1)
	f.appendDirect(5, 1)
	f.fetchDelay = 100 * time.Millisecond
	c, err := NewStreamConsumer(nc, fakeURI, "sub")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Millisecond)
	defer cancel()
	if _, err := c.Next(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next = %v, want DeadlineExceeded", err)
	}
	got := readN(t, c, 5, nil)
	for i, s := range got {
		if s != i {
			t.Fatalf("read %v, want 0..4", got)
		}
	}
}

func TestConsumerAcksAreBatched(t *testing.T) {
	f, nc := newFake(t, 1, 1)
	f.appendDirect(100, 1)
	c, err := NewStreamConsumer(nc, fakeURI, "sub", WithAckInterval(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	readN(t, c, 100, nil)
	if err := c.FlushAcks(t.Context()); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	reqs, upTo := f.ackReqs, f.ackedUpTo[unit{0, 0}]
	f.mu.Unlock()
	if reqs != 1 || upTo != 100 {
		t.Fatalf("%d ack requests up to %d, want 1 up to 100", reqs, upTo)
	}
}

func TestConsumerHeartbeat(t *testing.T) {
	f, nc := newFake(t, 1, 1)
	c, err := NewStreamConsumer(nc, fakeURI, "sub", WithSessionTimeout(150*time.Millisecond), WithAckInterval(5*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	poll.Eventually(t, 10*time.Second, "heartbeats", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.joins >= 3
	})
}

func TestConsumerErrors(t *testing.T) {
	_, nc := newFake(t, 1, 1)
	for _, tt := range []struct {
		topic, sub string
		opts       []ConsumerOption
		want       error
	}{
		{"topic://t/ns/a b", "sub", nil, api.ErrInvalidName},
		{fakeURI, "sub.x", nil, api.ErrInvalidName},
		{fakeURI, "sub", []ConsumerOption{WithStart("middle")}, ErrInvalidOption},
		{fakeURI, "sub", []ConsumerOption{WithConsumerName("a/b")}, ErrInvalidOption},
		{"topic://t/other/x", "sub", []ConsumerOption{WithRequestTimeout(100 * time.Millisecond)}, ErrNoServer},
	} {
		if _, err := NewStreamConsumer(nc, tt.topic, tt.sub, tt.opts...); !errors.Is(err, tt.want) {
			t.Errorf("NewStreamConsumer(%q, %q) = %v, want %v", tt.topic, tt.sub, err, tt.want)
		}
	}
}
