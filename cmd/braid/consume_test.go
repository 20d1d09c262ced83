package main

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/client"
)

func TestFormatConsumedShowsHeadersAndRedeliveries(t *testing.T) {
	id := client.MessageID{Segment: 2, Bucket: 1, Offset: 7}
	cases := []struct {
		m    consumed
		want string
	}{
		{consumed{id: id, key: []byte("k1"), payload: []byte("hello")}, id.String() + "\tk1\thello\n"},
		{consumed{id: id, key: []byte("k1"), payload: []byte("hello"), deliveries: 1,
			headers: []api.Header{{Name: "Trace-Id", Value: []byte("abc")}, {Name: "X-Tag", Value: []byte("red")}}},
			id.String() + "\tk1\thello\tTrace-Id=abc X-Tag=red\n"},
		{consumed{id: id, payload: []byte("p"), deliveries: 3}, id.String() + "\t\tp\t(delivery 3)\n"},
	}
	for _, c := range cases {
		if got := formatConsumed(c.m); got != c.want {
			t.Errorf("formatConsumed = %q, want %q", got, c.want)
		}
	}
}

// While the topic is UNAVAILABLE, consume waits, says so and asks again,
// backing off; other errors end it; --idle counts from the last message.
func TestConsumeLoopWaitsOutUnavailable(t *testing.T) {
	var waits []time.Duration
	after := func(d time.Duration) <-chan time.Time {
		waits = append(waits, d)
		ch := make(chan time.Time, 1)
		ch <- time.Time{}
		return ch
	}
	script := []error{api.Errorf(api.CodeUnavailable, "node n1 is down"), api.Errorf(api.CodeUnavailable, "node n1 is down"),
		api.Errorf(api.CodeUnavailable, "node n1 is down"), nil, api.Errorf(api.CodeUnavailable, "moving"), nil, nil}
	i := 0
	next := func(context.Context) (consumed, error) {
		err := script[i]
		i++
		return consumed{id: client.MessageID{Offset: uint64(i)}, payload: []byte("p"), ack: func() {}}, err
	}
	var out, errOut bytes.Buffer
	n, err := consumeLoop(context.Background(), next, 3, 0, false, &out, &errOut, after)
	if err != nil || n != 3 {
		t.Fatalf("consumed %d, %v; want 3", n, err)
	}
	if want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 100 * time.Millisecond}; !slices.Equal(waits, want) {
		t.Fatalf("waited %v, want %v (backing off, from the start again after a message)", waits, want)
	}
	if strings.Count(errOut.String(), "waiting") != 4 || !strings.Contains(errOut.String(), "node n1 is down") {
		t.Fatalf("said %q", errOut.String())
	}
	if strings.Count(out.String(), "\n") != 3 {
		t.Fatalf("printed %q", out.String())
	}
	// Any other error ends it.
	bad := func(context.Context) (consumed, error) { return consumed{}, api.Errorf(api.CodeTopicNotFound, "gone") }
	if _, err := consumeLoop(context.Background(), bad, 0, 0, true, &out, &errOut, after); err == nil {
		t.Fatal("TOPIC_NOT_FOUND did not end consume")
	}
	// --idle: unavailable for longer than idle since the last message ends it.
	down := func(ctx context.Context) (consumed, error) {
		if ctx.Err() != nil {
			return consumed{}, ctx.Err()
		}
		return consumed{}, api.Errorf(api.CodeUnavailable, "down")
	}
	// The backoff, shortened to 1ms: idle's 20ms pass over a few retries.
	wait := func(d time.Duration) <-chan time.Time { return time.After(time.Millisecond) }
	if n, err := consumeLoop(context.Background(), down, 0, 20*time.Millisecond, true, &out, &errOut, wait); n != 0 || err != nil {
		t.Fatalf("idle while unavailable: %d, %v", n, err)
	}
}
