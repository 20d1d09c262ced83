package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/client"
	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
)

// consumed is one message as the consume loop sees it, whatever the kind.
type consumed struct {
	id           client.MessageID
	key, payload []byte
	headers      []api.Header
	deliveries   uint32
	ack          func()
}

// consumeFlags says which --kind each kind-specific flag applies to.
var consumeFlags = map[string][]string{
	"subscription":      {"stream", "queue"},
	"name":              {"stream", "queue"},
	"max-deliveries":    {"queue"},
	"dead-letter-topic": {"queue"},
	"ack-timeout":       {"queue"},
	"start-time":        {"checkpoint"},
	"checkpoint":        {"checkpoint"},
	"skip-gone":         {"checkpoint"},
	"compacted":         {"stream", "checkpoint"},
}

func consumeCommand() *cobra.Command {
	var cf clientFlags
	cmd := &cobra.Command{Use: "consume URI", Args: cobra.ExactArgs(1),
		Short: "read a topic: a stream or queue subscription, or a checkpoint consumer",
		Example: `  braid consume topic://public/default/orders --subscription audit
  braid consume topic://public/default/orders --kind queue --subscription workers --max-deliveries 5
  braid consume topic://public/default/orders --kind checkpoint --start-time 2026-01-01T00:00:00Z`}
	cf.register(cmd)
	fl := cmd.Flags()
	kind := fl.String("kind", "stream", "stream (ordered, cumulative acks), queue (shared, individual acks) or checkpoint (no subscription)")
	sub := fl.String("subscription", "braid-cli", "subscription to read with (stream, queue)")
	name := fl.String("name", "", "consumer name (stream, queue; default: random)")
	start := fl.String("start", "earliest", "start of a new subscription or checkpoint consumer: earliest or latest")
	count := fl.Int("count", 0, "stop after this many messages (0: until interrupted)")
	idle := fl.Duration("idle", 0, "stop after this long without a message (0: never)")
	quiet := fl.Bool("quiet", false, "print only the final count and rate")
	maxDeliveries := fl.Int("max-deliveries", 0, "queue: deliveries before a message goes to the dead-letter topic, 0 unlimited (default: the subscription's)")
	deadLetter := fl.String("dead-letter-topic", "", "queue: dead-letter topic (default: <topic>-dlq)")
	ackTimeout := fl.Duration("ack-timeout", 0, "queue: redeliver what is not acked within this, 0s never (default: the subscription's)")
	startTime := fl.String("start-time", "", "checkpoint: start at this time (RFC 3339 or unix milliseconds)")
	restore := fl.String("checkpoint", "", "checkpoint: resume from this checkpoint (as printed at exit)")
	skipGone := fl.Bool("skip-gone", false, "checkpoint: skip data removed by retention instead of failing")
	compacted := fl.Bool("compacted", false, "stream, checkpoint: read the compacted view (the latest value of each key below the compaction horizon, then the log); a stream subscription keeps what it was created with")
	cmd.RunE = func(c *cobra.Command, args []string) error {
		uri := args[0]
		if *kind != "stream" && *kind != "queue" && *kind != "checkpoint" {
			return usagef("--kind %q: want stream, queue or checkpoint", *kind)
		}
		for flag, kinds := range consumeFlags {
			if fl.Changed(flag) && !slices.Contains(kinds, *kind) {
				return usagef("--%s applies to --kind %s, not %s", flag, strings.Join(kinds, " or "), *kind)
			}
		}
		if *start != "earliest" && *start != "latest" {
			return usagef("--start %q: want earliest or latest", *start)
		}
		if fl.Changed("checkpoint") && (fl.Changed("start-time") || fl.Changed("start")) {
			return usagef("--checkpoint resumes where the checkpoint says: it does not go with --start or --start-time")
		}
		if err := positive("count", *count, 0); err != nil {
			return err
		}
		if err := positive("max-deliveries", *maxDeliveries, 0); err != nil {
			return err
		}
		if *idle < 0 || *ackTimeout < 0 {
			return usagef("--idle and --ack-timeout cannot be negative")
		}
		nc, ctx, done, err := cf.session()
		if err != nil {
			return err
		}
		defer done()
		return consume(c, nc, ctx, uri, consumeOptions{kind: *kind, sub: *sub, name: *name, start: *start, count: *count, idle: *idle,
			quiet: *quiet, maxDeliveries: maxDeliveries, deadLetter: *deadLetter, ackTimeout: ackTimeout, startTime: *startTime,
			restore: *restore, skipGone: *skipGone, compacted: *compacted, timeout: cf.timeout,
			setMaxDeliveries: fl.Changed("max-deliveries"), setAckTimeout: fl.Changed("ack-timeout")})
	}
	return cmd
}

// consumeOptions are consume's flags, checked.
type consumeOptions struct {
	kind, sub, name, start          string
	count                           int
	idle, timeout                   time.Duration
	quiet, skipGone, compacted      bool
	maxDeliveries                   *int
	ackTimeout                      *time.Duration
	setMaxDeliveries, setAckTimeout bool
	deadLetter, startTime, restore  string
}

func consume(c *cobra.Command, nc *nats.Conn, ctx context.Context, uri string, o consumeOptions) error {
	kind, sub, name, start, compacted := &o.kind, &o.sub, &o.name, &o.start, &o.compacted
	deadLetter, startTime, restore, skipGone, count, idle, quiet := &o.deadLetter, &o.startTime, &o.restore, &o.skipGone, &o.count, &o.idle, &o.quiet
	out, errOut := c.OutOrStdout(), c.ErrOrStderr()
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
		sc, err := client.NewStreamConsumer(nc, uri, *sub, opts...)
		if err != nil {
			return err
		}
		next = adapt(sc.Next, func(m *client.Message) consumed {
			return consumed{id: m.ID, key: m.Key, payload: m.Payload, headers: m.Headers, deliveries: m.Deliveries, ack: m.Ack}
		})
		closeFn = sc.Close
	case "queue":
		opts := []client.QueueOption{client.WithStart(*start)}
		if *name != "" {
			opts = append(opts, client.WithConsumerName(*name))
		}
		if o.setMaxDeliveries {
			opts = append(opts, client.WithMaxDeliveries(*o.maxDeliveries))
		}
		if *deadLetter != "" {
			opts = append(opts, client.WithDeadLetterTopic(*deadLetter))
		}
		if o.setAckTimeout {
			opts = append(opts, client.WithAckTimeout(*o.ackTimeout))
		}
		qc, err := client.NewQueueConsumer(nc, uri, *sub, opts...)
		if err != nil {
			return err
		}
		next = adapt(qc.Next, func(m *client.QueueMessage) consumed {
			return consumed{id: m.ID, key: m.Key, payload: m.Payload, headers: m.Headers, deliveries: m.Deliveries, ack: m.Ack}
		})
		closeFn = qc.Close
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
			opts = append(opts, client.WithSkipGone(func(e *client.SegmentGoneError) { fmt.Fprintln(errOut, "skipped:", e) }))
		}
		cp, err := client.NewCheckpointConsumer(nc, uri, opts...)
		if err != nil {
			return err
		}
		if *restore != "" {
			at, err := client.ParseCheckpoint(*restore)
			if err != nil {
				return usagef("--checkpoint: %v", err)
			}
			if err := cp.Restore(ctx, at); err != nil {
				return err
			}
		}
		next = adapt(cp.Next, func(m *client.CheckpointMessage) consumed {
			return consumed{id: m.ID, key: m.Key, payload: m.Payload, headers: m.Headers, ack: func() {}}
		})
		closeFn = func(context.Context) error {
			fmt.Fprintf(errOut, "checkpoint: %s\n", cp.Checkpoint())
			return cp.Close()
		}
	}

	began := time.Now()
	n, err := consumeLoop(ctx, next, *count, *idle, *quiet, out, errOut, time.After)
	if err != nil {
		_ = closeFn(context.Background())
		return err
	}
	closeCtx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	if err := closeFn(closeCtx); err != nil {
		return err
	}
	el := time.Since(began)
	fmt.Fprintf(errOut, "consumed %d messages in %s (%.0f msg/s)\n", n, el.Round(time.Millisecond), float64(n)/el.Seconds())
	return nil
}

// consumeLoop prints and acknowledges what next returns until count
// messages (0: no end), idle without one (0: forever), or ctx ends. While
// the topic is UNAVAILABLE (a node down, a move under way, the metadata
// store electing a leader) it says so on errOut and asks again, waiting
// longer each time up to 5 s, as `nats sub` waits out a reconnect; any
// other error ends it. after is time.After, or a test's clock.
func consumeLoop(ctx context.Context, next func(context.Context) (consumed, error), count int, idle time.Duration, quiet bool,
	out, errOut io.Writer, after func(time.Duration) <-chan time.Time) (int, error) {
	n, last, backoff := 0, time.Now(), time.Duration(0)
	for count == 0 || n < count {
		nctx := ctx
		var cancel context.CancelFunc = func() {}
		if idle > 0 {
			nctx, cancel = context.WithDeadline(ctx, last.Add(idle))
		}
		m, err := next(nctx)
		cancel()
		switch {
		case err == nil:
		case ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded):
			return n, nil
		case errors.Is(err, api.ErrUnavailable):
			backoff = min(max(2*backoff, 100*time.Millisecond), 5*time.Second)
			fmt.Fprintf(errOut, "waiting %s: %v\n", backoff, err)
			select {
			case <-after(backoff):
			case <-ctx.Done():
				return n, nil
			}
			continue
		default:
			return n, err
		}
		n, last, backoff = n+1, time.Now(), 0
		if !quiet {
			fmt.Fprint(out, formatConsumed(m))
		}
		m.ack()
	}
	return n, nil
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
