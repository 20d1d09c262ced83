package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/client"
	"github.com/spf13/cobra"
	"golang.org/x/term"
)

func produceCommand() *cobra.Command {
	var cf clientFlags
	cmd := &cobra.Command{Use: "produce URI", Args: cobra.ExactArgs(1),
		Short: "send messages: one per line of stdin, or --count generated ones",
		Example: `  braid produce topic://public/default/orders --key k1 < messages.txt
  braid produce topic://public/default/orders --count 100000 --size 200 --keys 1000
  echo hi | braid produce topic://public/default/orders --header trace=abc --time 2026-01-01T00:00:00Z`}
	cf.register(cmd)
	key := cmd.Flags().String("key", "", "key of every message read from stdin (default: unkeyed)")
	count := cmd.Flags().Int("count", 0, "generate this many messages instead of reading stdin")
	size := cmd.Flags().Int("size", 100, "payload size of generated messages (with --count)")
	keys := cmd.Flags().Int("keys", 1000, "generated messages are keyed over this many keys, 0 unkeyed (with --count)")
	headers := cmd.Flags().StringArray("header", nil, "a header NAME=VALUE on every message (repeatable)")
	at := cmd.Flags().String("time", "", "the time of every message, RFC 3339 or unix milliseconds (default: when the server takes it)")
	cmd.RunE = func(c *cobra.Command, args []string) error {
		uri := args[0]
		if err := positive("count", *count, 0); err != nil {
			return err
		}
		if err := positive("size", *size, 0); err != nil {
			return err
		}
		if err := positive("keys", *keys, 0); err != nil {
			return err
		}
		generated := c.Flags().Changed("count")
		for _, name := range []string{"size", "keys"} {
			if c.Flags().Changed(name) && !generated {
				return usagef("--%s applies to generated messages: give --count", name)
			}
		}
		if generated && c.Flags().Changed("key") {
			return usagef("--key applies to messages read from stdin; generated ones are keyed by --keys")
		}
		var hdrs []api.Header
		for _, h := range *headers {
			name, value, ok := strings.Cut(h, "=")
			if !ok || name == "" {
				return usagef("--header %q: want NAME=VALUE", h)
			}
			hdrs = append(hdrs, api.Header{Name: name, Value: []byte(value)})
		}
		var ts int64
		if *at != "" {
			t, err := parseTime(*at)
			if err != nil {
				return usagef("--time: %v", err)
			}
			ts = t.UnixMilli()
		}
		nc, ctx, done, err := cf.session()
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
		bar := newProgress(c.ErrOrStderr(), "produce", int64(*count))
		send := func(rec api.Record) error {
			rec.Headers, rec.Time = hdrs, ts
			bar.set(sent.Load() + failed.Load())
			return p.Send(ctx, rec, cb)
		}
		if generated {
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
		} else if err := eachLine(stdinProgress(c, &bar), func(line []byte) error {
			rec := api.Record{Payload: line}
			if *key != "" {
				rec.Key = []byte(*key)
			}
			return send(rec)
		}); err != nil {
			return err
		}
		if err := p.Close(ctx); err != nil {
			return err
		}
		bar.finish(sent.Load() + failed.Load())
		el := time.Since(start)
		fmt.Fprintf(c.ErrOrStderr(), "produced %d (%d failed) in %s, %.0f msg/s\n", sent.Load(), failed.Load(), el.Round(time.Millisecond), float64(sent.Load())/el.Seconds())
		if e, ok := firstErr.Load().(error); ok {
			return fmt.Errorf("%d messages failed; first: %w", failed.Load(), e)
		}
		return nil
	}
	return cmd
}

// eachLine calls fn with every line of r, without its line end, however
// long (the server refuses one over the topic's max payload).
func eachLine(r io.Reader, fn func([]byte) error) error {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			line = bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r"))
			if ferr := fn(line); ferr != nil {
				return ferr
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// stdinProgress is the command's input; when it is a regular file (braid
// produce URI < file) and stderr a terminal, *bar becomes a bar of the
// file's bytes, moved as they are read.
func stdinProgress(c *cobra.Command, bar **progress) io.Reader {
	in := c.InOrStdin()
	f, ok := in.(*os.File)
	if !ok {
		return in
	}
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() || fi.Size() == 0 {
		return in
	}
	b := newByteProgress(c.ErrOrStderr(), "produce", fi.Size())
	if b.bar == nil {
		return in
	}
	*bar = &progress{} // the messages' bar gives way to the bytes'
	return &countingReader{r: in, bar: b}
}

// countingReader moves a bar by the bytes read through it.
type countingReader struct {
	r   io.Reader
	n   int64
	bar *progress
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	c.bar.set(c.n)
	if err == io.EOF {
		c.bar.finish(c.n)
	}
	return n, err
}

// isTerminal reports whether f is a terminal (not /dev/null, a pipe, a
// file).
func isTerminal(f *os.File) bool { return term.IsTerminal(int(f.Fd())) }
