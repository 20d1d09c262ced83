package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/client"
	"github.com/spf13/cobra"
)

func messageCommand() *cobra.Command {
	cmd, e := newGroup("message", "look at messages without a subscription: get one by id, peek the first or last")
	get := e.verb("get URI SEGMENT/BUCKET/OFFSET", "print one message by its id (as a produce reply or consume names it)", cobra.ExactArgs(2),
		func(c *cobra.Command, ctx context.Context, adm *client.Admin, args []string) error {
			id, err := client.ParseMessageID(args[1])
			if err != nil {
				return usagef("%v", err)
			}
			m, err := adm.GetMessage(ctx, args[0], id)
			if err != nil {
				return err
			}
			return e.printMessages(c.OutOrStdout(), []api.Message{m})
		})
	peek := e.verb("peek URI", "print the first (or --last) messages of a topic, without a subscription: each unit's first (last) by position, merged by time", cobra.ExactArgs(1), nil)
	n := peek.Flags().IntP("count", "n", 10, "how many messages (1 to 10000)")
	last := peek.Flags().Bool("last", false, "the last messages instead of the first")
	peek.RunE = func(c *cobra.Command, args []string) error {
		if *n < 1 || *n > 10000 {
			return usagef("--count %d: want 1 to 10000", *n)
		}
		return e.admin(func(ctx context.Context, adm *client.Admin) error {
			msgs, err := adm.Peek(ctx, args[0], *n, *last)
			if err != nil {
				return err
			}
			return e.printMessages(c.OutOrStdout(), msgs)
		})
	}
	cmd.AddCommand(get, peek)
	return cmd
}

// printMessages prints messages one a line (id, time, key, payload,
// headers), or as the JSON of read.fetch's "format":"json".
func (e *cliEnv) printMessages(w io.Writer, msgs []api.Message) error {
	if e.out.json() {
		out := make([]api.JSONMessage, len(msgs))
		for i, m := range msgs {
			out[i] = api.JSONMessage{Segment: m.Segment, Bucket: m.Bucket, Offset: m.Offset, Time: m.Time, Key: string(m.Key), Payload: m.Payload}
			for _, h := range m.Headers {
				if out[i].Headers == nil {
					out[i].Headers = map[string]string{}
				}
				out[i].Headers[h.Name] = string(h.Value)
			}
		}
		return printJSON(w, map[string]any{"messages": out})
	}
	for _, m := range msgs {
		id := client.MessageID{Segment: m.Segment, Bucket: m.Bucket, Offset: m.Offset}
		line := formatConsumed(consumed{id: id, key: m.Key, payload: m.Payload, headers: m.Headers})
		fmt.Fprintf(w, "%s\t%s", time.UnixMilli(m.Time).UTC().Format(time.RFC3339Nano), line)
	}
	return nil
}
