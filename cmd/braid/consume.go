package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/client"
)

// consumed is one message as the consume loop sees it, whatever the kind.
type consumed struct {
	id           client.MessageID
	key, payload []byte
	headers      []api.Header
	deliveries   uint32
	ack          func()
}

func consumeCmd(args []string) error {
	fs := flag.NewFlagSet("consume", flag.ExitOnError)
	fs.Usage = usageOf(fs, "braid consume URI [--kind stream|queue|checkpoint] [--subscription NAME] [--count N] [--start earliest|latest] [--compacted] [--quiet]")
	var cf clientFlags
	cf.register(fs)
	kind := fs.String("kind", "stream", "stream (ordered, cumulative acks), queue (shared, individual acks) or checkpoint (no subscription)")
	sub := fs.String("subscription", "braid-cli", "subscription to read with (stream and queue)")
	name := fs.String("name", "", "consumer name (default: random)")
	start := fs.String("start", "earliest", "start of a new subscription or checkpoint consumer: earliest or latest")
	count := fs.Int("count", 0, "stop after this many messages (0: until interrupted)")
	idle := fs.Duration("idle", 0, "stop after this long without a message (0: never)")
	quiet := fs.Bool("quiet", false, "print only the final count and rate")
	maxDeliveries := fs.Int("max-deliveries", -1, "queue: deliveries before a message goes to the dead-letter topic (0: unlimited; -1: leave as is)")
	deadLetter := fs.String("dead-letter-topic", "", "queue: dead-letter topic (default <topic>-dlq)")
	ackTimeout := fs.Duration("ack-timeout", -1, "queue: redeliver what is not acked within this (0: never; -1: leave as is)")
	startTime := fs.String("start-time", "", "checkpoint: start at this time (RFC 3339 or unix milliseconds)")
	restore := fs.String("checkpoint", "", "checkpoint: resume from this checkpoint (as printed at exit)")
	skipGone := fs.Bool("skip-gone", false, "checkpoint: skip data removed by retention instead of failing")
	compacted := fs.Bool("compacted", false, "stream and checkpoint: read the compacted view (the latest value of each key below the compaction horizon, then the log); a stream subscription keeps what it was created with")
	uri, nc, ctx, done, err := cf.topicSession(fs, args)
	if err != nil {
		return err
	}
	defer done()

	var next func(context.Context) (consumed, error)
	var closeFn func(context.Context) error
	switch *kind {
	case "stream":
		opts := []client.ConsumerOption{client.WithStart(*start)}
		if *name != "" {
			opts = append(opts, client.WithConsumerName(*name))
		}
		if *compacted {
			opts = append(opts, client.WithReadCompacted())
		}
		c, err := client.NewStreamConsumer(nc, uri, *sub, opts...)
		if err != nil {
			return err
		}
		next = adapt(c.Next, func(m *client.Message) consumed {
			return consumed{id: m.ID, key: m.Key, payload: m.Payload, headers: m.Headers, deliveries: m.Deliveries, ack: m.Ack}
		})
		closeFn = c.Close
	case "queue":
		if *compacted {
			return fmt.Errorf("consume: --compacted: queue subscriptions do not read the compacted view (use --kind stream or checkpoint)")
		}
		opts := []client.QueueOption{client.WithStart(*start)}
		if *name != "" {
			opts = append(opts, client.WithConsumerName(*name))
		}
		if *maxDeliveries >= 0 {
			opts = append(opts, client.WithMaxDeliveries(*maxDeliveries))
		}
		if *deadLetter != "" {
			opts = append(opts, client.WithDeadLetterTopic(*deadLetter))
		}
		if *ackTimeout >= 0 {
			opts = append(opts, client.WithAckTimeout(*ackTimeout))
		}
		c, err := client.NewQueueConsumer(nc, uri, *sub, opts...)
		if err != nil {
			return err
		}
		next = adapt(c.Next, func(m *client.QueueMessage) consumed {
			return consumed{id: m.ID, key: m.Key, payload: m.Payload, headers: m.Headers, deliveries: m.Deliveries, ack: m.Ack}
		})
		closeFn = c.Close
	case "checkpoint":
		opts := []client.CheckpointOption{client.WithStart(*start)}
		if *startTime != "" {
			t, err := parseTime(*startTime)
			if err != nil {
				return err
			}
			opts = append(opts, client.WithStartTime(t))
		}
		if *compacted {
			opts = append(opts, client.WithReadCompacted())
		}
		if *skipGone {
			opts = append(opts, client.WithSkipGone(func(e *client.SegmentGoneError) { fmt.Fprintln(os.Stderr, "skipped:", e) }))
		}
		c, err := client.NewCheckpointConsumer(nc, uri, opts...)
		if err != nil {
			return err
		}
		if *restore != "" {
			cp, err := client.ParseCheckpoint(*restore)
			if err != nil {
				return err
			}
			if err := c.Restore(ctx, cp); err != nil {
				return err
			}
		}
		next = adapt(c.Next, func(m *client.CheckpointMessage) consumed {
			return consumed{id: m.ID, key: m.Key, payload: m.Payload, headers: m.Headers, ack: func() {}}
		})
		closeFn = func(context.Context) error {
			fmt.Fprintf(os.Stderr, "checkpoint: %s\n", c.Checkpoint())
			return c.Close()
		}
	default:
		return fmt.Errorf("consume: --kind %q: want stream, queue or checkpoint", *kind)
	}

	n, began := 0, time.Now()
	for *count == 0 || n < *count {
		nctx := ctx
		var cancel context.CancelFunc = func() {}
		if *idle > 0 {
			nctx, cancel = context.WithTimeout(ctx, *idle)
		}
		m, err := next(nctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) {
				break
			}
			_ = closeFn(context.Background())
			return err
		}
		n++
		if !*quiet {
			fmt.Print(formatConsumed(m))
		}
		m.ack()
	}
	closeCtx, cancel := context.WithTimeout(context.Background(), cf.timeout)
	defer cancel()
	if err := closeFn(closeCtx); err != nil {
		return err
	}
	el := time.Since(began)
	fmt.Fprintf(os.Stderr, "consumed %d messages in %s (%.0f msg/s)\n", n, el.Round(time.Millisecond), float64(n)/el.Seconds())
	return nil
}

// formatConsumed is the line printed for a message: id, key, payload, then
// its headers (name=value, space-separated) and its delivery count when
// delivered before.
func formatConsumed(m consumed) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\t%s\t%s", m.id, m.key, m.payload)
	if len(m.headers) > 0 {
		b.WriteByte('\t')
		for i, h := range m.headers {
			if i > 0 {
				b.WriteByte(' ')
			}
			fmt.Fprintf(&b, "%s=%s", h.Name, h.Value)
		}
	}
	if m.deliveries > 1 {
		fmt.Fprintf(&b, "\t(delivery %d)", m.deliveries)
	}
	b.WriteByte('\n')
	return b.String()
}

// adapt turns a consumer's Next into the consume loop's.
func adapt[M any](next func(context.Context) (M, error), conv func(M) consumed) func(context.Context) (consumed, error) {
	return func(ctx context.Context) (consumed, error) {
		m, err := next(ctx)
		if err != nil {
			return consumed{}, err
		}
		return conv(m), nil
	}
}

// parseTime reads RFC 3339 or unix milliseconds.
func parseTime(s string) (time.Time, error) {
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
		return time.UnixMilli(ms), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("--start-time %q: want RFC 3339 or unix milliseconds", s)
	}
	return t, nil
}
