package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/client"
	"github.com/spf13/cobra"
)

// subscriptionCommand is `braid subscription`: what pulsar-admin topics
// subscriptions/unsubscribe/reset-cursor and `nats consumer` do, for
// Braid's stream and queue subscriptions (api/subscriptions.go).
func subscriptionCommand() *cobra.Command {
	cmd, e := newGroup("subscription", "list a topic's subscriptions with their lag, delete one, move one (seek)")
	out := func(c *cobra.Command) io.Writer { return c.OutOrStdout() }

	list := e.verb("list URI", "a topic's subscriptions: kind, consumers, backlog, and each unit's acked offset and lag", cobra.ExactArgs(1),
		func(c *cobra.Command, ctx context.Context, adm *client.Admin, args []string) error {
			subs, err := adm.ListSubscriptions(ctx, args[0])
			if err != nil {
				return err
			}
			if e.out.json() {
				return printJSON(out(c), map[string]any{"topic": args[0], "subscriptions": subs})
			}
			printSubscriptions(out(c), subs)
			return nil
		})

	del := e.verb("delete URI NAME", "delete a subscription and its state (asks to confirm unless --yes or --force)", cobra.ExactArgs(2), nil)
	force := del.Flags().Bool("force", false, "delete even while consumers are attached (they are told it is gone), without asking")
	yes := del.Flags().BoolP("yes", "y", false, "delete without asking (refused while consumers are attached)")
	del.RunE = func(c *cobra.Command, args []string) error {
		if !*force && !*yes {
			if err := confirm(c.InOrStdin(), c.ErrOrStderr(), fmt.Sprintf("delete subscription %s of %s and its positions?", args[1], args[0]), "--yes (or --force)"); err != nil {
				return err
			}
		}
		return e.admin(func(ctx context.Context, adm *client.Admin) error {
			detached, err := adm.DeleteSubscription(ctx, args[0], args[1], *force)
			if err != nil {
				return err
			}
			if e.out.json() {
				return printJSON(out(c), map[string]any{"ok": true, "topic": args[0], "subscription": args[1], "detached": append([]string{}, detached...)})
			}
			fmt.Fprintf(out(c), "deleted subscription %s of %s\n", args[1], args[0])
			if len(detached) > 0 {
				fmt.Fprintf(out(c), "detached consumers: %s\n", strings.Join(detached, ", "))
			}
			return nil
		})
	}

	seek := e.verb("seek URI NAME", "move a subscription's positions in every unit: --to earliest|latest, --time or --message", cobra.ExactArgs(2), nil)
	seek.Example = `  braid subscription seek topic://public/default/orders billing --to earliest
  braid subscription seek topic://public/default/orders billing --time 15m
  braid subscription seek topic://public/default/orders billing --message 3/0/120 --force`
	seekTo := seek.Flags().String("to", "", "earliest (everything retained again) or latest (only what comes next)")
	seekTime := seek.Flags().String("time", "", "each unit from its first message at or after a time: RFC 3339, unix milliseconds, or a duration ago (15m)")
	seekMessage := seek.Flags().String("message", "", "a message id SEGMENT/BUCKET/OFFSET, delivered next; its segment's ancestors drained, its descendants from their start")
	seekForce := seek.Flags().Bool("force", false, "seek even while consumers are attached (a stream subscription's are detached)")
	seek.RunE = func(c *cobra.Command, args []string) error {
		target, err := seekTarget(*seekTo, *seekTime, *seekMessage, time.Now())
		if err != nil {
			return err
		}
		return e.admin(func(ctx context.Context, adm *client.Admin) error {
			r, err := adm.SeekSubscription(ctx, args[0], args[1], target, *seekForce)
			if err != nil {
				return err
			}
			if e.out.json() {
				return printJSON(out(c), r)
			}
			fmt.Fprintf(out(c), "moved subscription %s of %s: backlog %d\n", args[1], args[0], r.Backlog)
			if len(r.Detached) > 0 {
				fmt.Fprintf(out(c), "detached consumers: %s\n", strings.Join(r.Detached, ", "))
			}
			fmt.Fprintln(out(c))
			printUnits(out(c), r.SubscriptionInfo)
			return nil
		})
	}

	cmd.AddCommand(list, del, seek)
	return cmd
}

// seekTarget reads the seek flags: exactly one of them.
func seekTarget(to, at, message string, now time.Time) (client.SeekTarget, error) {
	given := 0
	for _, f := range []string{to, at, message} {
		if f != "" {
			given++
		}
	}
	if given != 1 {
		return client.SeekTarget{}, usagef("seek: give one of --to, --time and --message")
	}
	switch {
	case to == api.SeekEarliest:
		return client.SeekEarliest(), nil
	case to == api.SeekLatest:
		return client.SeekLatest(), nil
	case to != "":
		return client.SeekTarget{}, usagef("--to %q: want earliest or latest", to)
	case at != "":
		t, err := parseSeekTime(at, now)
		if err != nil {
			return client.SeekTarget{}, err
		}
		return client.SeekTime(t), nil
	}
	id, err := parseMessageID(message)
	if err != nil {
		return client.SeekTarget{}, err
	}
	return client.SeekMessage(id), nil
}

// parseSeekTime reads unix milliseconds, an RFC 3339 time, or a duration
// before now.
func parseSeekTime(s string, now time.Time) (time.Time, error) {
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
		if ms < 0 {
			return time.Time{}, usagef("--time %d: want unix milliseconds, 0 or more", ms)
		}
		return time.UnixMilli(ms), nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, usagef("--time %q: want RFC 3339, unix milliseconds, or a duration ago (15m)", s)
}

// parseMessageID reads SEGMENT/BUCKET/OFFSET.
func parseMessageID(s string) (client.MessageID, error) {
	parts := strings.Split(s, "/")
	if len(parts) != 3 {
		return client.MessageID{}, usagef("--message %q: want SEGMENT/BUCKET/OFFSET", s)
	}
	var v [3]uint64
	for i, p := range parts {
		n, err := strconv.ParseUint(p, 10, 64)
		if err != nil || i == 1 && n > 1<<16 {
			return client.MessageID{}, usagef("--message %q: want SEGMENT/BUCKET/OFFSET, three numbers", s)
		}
		v[i] = n
	}
	return client.MessageID{Segment: v[0], Bucket: int(v[1]), Offset: v[2]}, nil
}

// printSubscriptions prints one row per subscription, then each one's
// units and consumers.
func printSubscriptions(w io.Writer, subs []api.SubscriptionInfo) {
	if len(subs) == 0 {
		fmt.Fprintln(w, "no subscriptions")
		return
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SUBSCRIPTION\tKIND\tCONSUMERS\tBACKLOG\tSTART")
	for _, s := range subs {
		if s.Error != "" {
			fmt.Fprintf(tw, "%s\t%s\t-\t-\t%s\n", s.Name, s.Kind, s.Error)
			continue
		}
		start := s.Start
		if s.ReadCompacted {
			start += " (compacted)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\n", s.Name, s.Kind, len(s.Consumers), s.Backlog, start)
	}
	tw.Flush()
	for _, s := range subs {
		if s.Error != "" {
			continue
		}
		fmt.Fprintf(w, "\n%s (%s)\n", s.Name, s.Kind)
		printUnits(w, s)
	}
}

// printUnits prints a subscription's units, then its consumers.
func printUnits(w io.Writer, s api.SubscriptionInfo) {
	queue := s.Kind == api.SubscriptionQueue
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	if queue {
		fmt.Fprintln(tw, "  UNIT\tACKED\tNEXT\tLAG\tINFLIGHT\tACKED AHEAD")
	} else {
		fmt.Fprintln(tw, "  UNIT\tACKED\tNEXT\tLAG\tOWNER")
	}
	for _, u := range s.Units {
		next, lag := strconv.FormatUint(u.Next, 10), strconv.FormatUint(u.Lag, 10)
		if u.Unavailable {
			next, lag = "?", "?"
		}
		fmt.Fprintf(tw, "  %d/%d\t%d\t%s\t%s", u.Segment, u.Bucket, u.Acked, next, lag)
		switch {
		case queue:
			fmt.Fprintf(tw, "\t%d\t%d\n", u.Inflight, u.AckedAhead)
		case u.Withheld:
			fmt.Fprint(tw, "\t(withheld: ancestors not drained)\n")
		case u.Owner != "":
			fmt.Fprintf(tw, "\t%s\n", u.Owner)
		default:
			fmt.Fprint(tw, "\t-\n")
		}
	}
	tw.Flush()
	if len(s.Drained) > 0 {
		fmt.Fprintf(w, "  drained segments: %s\n", list(s.Drained))
	}
	if len(s.Consumers) == 0 {
		fmt.Fprintln(w, "  no consumers")
		return
	}
	tw = tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	if queue {
		fmt.Fprintln(tw, "  CONSUMER\tINFLIGHT")
	} else {
		fmt.Fprintln(tw, "  CONSUMER\tUNITS\tLAG")
	}
	for _, c := range s.Consumers {
		if queue {
			fmt.Fprintf(tw, "  %s\t%d\n", c.Name, c.Inflight)
			continue
		}
		units := make([]string, len(c.Units))
		for i, u := range c.Units {
			units[i] = fmt.Sprintf("%d/%d", u.Segment, u.Bucket)
		}
		held := strings.Join(units, ",")
		if held == "" {
			held = "-"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%d\n", c.Name, held, c.Lag)
	}
	tw.Flush()
}
