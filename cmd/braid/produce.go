package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/client"
)

func produceCmd(args []string) error {
	fs := flag.NewFlagSet("produce", flag.ExitOnError)
	fs.Usage = usageOf(fs, "braid produce URI [--key K] < lines   |   braid produce URI --count N [--size B] [--keys K]")
	var cf clientFlags
	cf.register(fs)
	key := fs.String("key", "", "key of every message read from stdin (default: unkeyed)")
	count := fs.Int("count", 0, "generate this many messages instead of reading stdin")
	size := fs.Int("size", 100, "payload size of generated messages")
	keys := fs.Int("keys", 1000, "generated messages are keyed over this many keys (0: unkeyed)")
	uri, nc, ctx, done, err := cf.topicSession(fs, args)
	if err != nil {
		return err
	}
	defer done()
	p, err := client.NewProducer(nc, uri, client.WithRequestTimeout(cf.timeout))
	if err != nil {
		return err
	}
	var sent, failed atomic.Int64
	var firstErr atomic.Value
	cb := func(id client.MessageID, err error) {
		if err != nil {
			failed.Add(1)
			firstErr.CompareAndSwap(nil, err)
			return
		}
		sent.Add(1)
	}
	start := time.Now()
	progress := time.NewTicker(time.Second)
	defer progress.Stop()
	report := func() {
		fmt.Fprintf(os.Stderr, "\rproduced %d (%d failed) in %s", sent.Load(), failed.Load(), time.Since(start).Round(time.Millisecond))
	}
	send := func(rec api.Record) error {
		select {
		case <-progress.C:
			report()
		default:
		}
		return p.Send(ctx, rec, cb)
	}
	if *count > 0 {
		payload := make([]byte, *size)
		for i := 0; i < *count && ctx.Err() == nil; i++ {
			rec := api.Record{Payload: payload}
			if *keys > 0 {
				rec.Key = []byte(fmt.Sprintf("key-%d", i%*keys))
			}
			if err := send(rec); err != nil {
				return err
			}
		}
	} else {
		sc := bufio.NewScanner(os.Stdin)
		sc.Buffer(make([]byte, 64<<10), 8<<20)
		for sc.Scan() && ctx.Err() == nil {
			rec := api.Record{Payload: append([]byte(nil), sc.Bytes()...)}
			if *key != "" {
				rec.Key = []byte(*key)
			}
			if err := send(rec); err != nil {
				return err
			}
		}
		if err := sc.Err(); err != nil {
			return err
		}
	}
	if err := p.Close(ctx); err != nil {
		return err
	}
	report()
	el := time.Since(start)
	fmt.Fprintf(os.Stderr, "\n%.0f msg/s\n", float64(sent.Load())/el.Seconds())
	if e, ok := firstErr.Load().(error); ok {
		return fmt.Errorf("%d messages failed; first: %w", failed.Load(), e)
	}
	return nil
}
