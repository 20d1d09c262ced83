package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/braidmq/braid/client"
)

func consumeCmd(args []string) error {
	fs := flag.NewFlagSet("consume", flag.ExitOnError)
	fs.Usage = usageOf(fs, "braid consume URI --subscription NAME [--count N] [--start earliest|latest] [--quiet]")
	var cf clientFlags
	cf.register(fs)
	sub := fs.String("subscription", "braid-cli", "stream subscription to read with")
	name := fs.String("name", "", "consumer name (default: random)")
	start := fs.String("start", "earliest", "start of a new subscription: earliest or latest")
	count := fs.Int("count", 0, "stop after this many messages (0: until interrupted)")
	idle := fs.Duration("idle", 0, "stop after this long without a message (0: never)")
	quiet := fs.Bool("quiet", false, "print only the final count and rate")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		return errors.New("consume: want one topic URI")
	}
	nc, err := cf.connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, stop := signalContext()
	defer stop()
	opts := []client.ConsumerOption{client.WithStart(*start)}
	if *name != "" {
		opts = append(opts, client.WithConsumerName(*name))
	}
	c, err := client.NewStreamConsumer(nc, pos[0], *sub, opts...)
	if err != nil {
		return err
	}
	n, began := 0, time.Now()
	for *count == 0 || n < *count {
		next := ctx
		var cancel context.CancelFunc = func() {}
		if *idle > 0 {
			next, cancel = context.WithTimeout(ctx, *idle)
		}
		m, err := c.Next(next)
		cancel()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) {
				break
			}
			return err
		}
		n++
		if !*quiet {
			fmt.Printf("%s\t%s\t%s\n", m.ID, m.Key, m.Payload)
		}
		m.Ack()
	}
	closeCtx, cancel := context.WithTimeout(context.Background(), cf.timeout)
	defer cancel()
	if err := c.Close(closeCtx); err != nil {
		return err
	}
	el := time.Since(began)
	fmt.Fprintf(os.Stderr, "consumed %d messages in %s (%.0f msg/s)\n", n, el.Round(time.Millisecond), float64(n)/el.Seconds())
	return nil
}
