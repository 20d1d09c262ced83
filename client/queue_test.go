package client_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/client"
)

func TestQueueConsumersShareAndRedeliver(t *testing.T) {
	_, nc := startNode(t)
	const uri = "topic://public/default/work"
	createTopic(t, nc, uri, 2, 4)
	p, err := client.NewProducer(nc, uri)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(t.Context())
	sendAll(t, p, 200, 50, nil)

	opts := []client.QueueOption{client.WithFetch(20, 1<<20, 100*time.Millisecond), client.WithAckInterval(5 * time.Millisecond),
		client.WithNackDelay(10 * time.Millisecond), client.WithMaxDeliveries(3), client.WithAckTimeout(0)}
	a, err := client.NewQueueConsumer(nc, uri, "jobs", append(opts, client.WithConsumerName("a"))...)
	if err != nil {
		t.Fatal(err)
	}
	b, err := client.NewQueueConsumer(nc, uri, "jobs", append(opts, client.WithConsumerName("b"))...)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(t.Context())
	if _, err := client.NewStreamConsumer(nc, uri, "jobs"); !errors.Is(err, api.ErrAlreadyExists) {
		t.Fatalf("stream consumer on a queue subscription: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	acked := map[int]bool{}
	// a takes 30, acks 10, nacks 10, and leaves holding 10.
	for i := range 30 {
		m, err := a.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		seq, _ := strconv.Atoi(string(m.Payload))
		switch i % 3 {
		case 0:
			m.Ack()
			acked[seq] = true
		case 1:
			m.Nack()
		}
	}
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// b gets everything else; "poison" messages (seq%7 == 0) are nacked
	// until they go to the dead-letter topic.
	dead := 0
	for len(acked)+dead < 200 {
		m, err := b.Next(ctx)
		if err != nil {
			t.Fatalf("after %d acked, %d dead: %v", len(acked), dead, err)
		}
		seq, _ := strconv.Atoi(string(m.Payload))
		if acked[seq] {
			t.Fatalf("acked message %d delivered again", seq)
		}
		if seq%7 == 0 {
			m.NackAfter(0)
			if m.Deliveries == 3 {
				dead++
			}
			continue
		}
		m.Ack()
		acked[seq] = true
	}
	if err := b.FlushAcks(ctx); err != nil {
		t.Fatal(err)
	}
	dlq, err := client.NewStreamConsumer(nc, uri+"-dlq", "inspect")
	if err != nil {
		t.Fatal(err)
	}
	defer dlq.Close(t.Context())
	for range dead {
		m, err := dlq.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		seq, _ := strconv.Atoi(string(m.Payload))
		if seq%7 != 0 || acked[seq] {
			t.Fatalf("dead letter %d", seq)
		}
		hs := map[string]string{}
		for _, h := range m.Headers {
			hs[h.Name] = string(h.Value)
		}
		if hs[api.HeaderDLQOrigin] != uri || hs[api.HeaderDLQDeliveries] != "3" || hs[api.HeaderDLQSubscription] != "jobs" {
			t.Fatalf("dead-letter headers %v", hs)
		}
		m.Ack()
	}
}
