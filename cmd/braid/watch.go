package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/client"
	"github.com/braidmq/braid/routing"
	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
)

// watchCommand is `braid topic watch`: the layout as describe prints it,
// again at every change (the layout push), with each unit's append rate
// from the topic's stats every --interval; on a terminal the screen is
// redrawn in place, elsewhere each layout is printed after the one before.
func watchCommand(e *cliEnv) *cobra.Command {
	cmd := &cobra.Command{Use: "watch URI", Args: cobra.ExactArgs(1),
		Short: "show a topic's segments live: redrawn at every split, merge or move, with rates (the web page: /ui on the metrics listener)"}
	interval := cmd.Flags().Duration("interval", 2*time.Second, "how often the rates are read")
	changes := cmd.Flags().Int("changes", 0, "stop after printing this many layouts (0: until interrupted)")
	cmd.RunE = func(c *cobra.Command, args []string) error {
		if *interval < 100*time.Millisecond {
			return usagef("--interval %s: want 100ms or more", *interval)
		}
		if err := positive("changes", *changes, 0); err != nil {
			return err
		}
		name, err := routing.ParseTopic(args[0])
		if err != nil {
			return usagef("%v", err)
		}
		nc, ctx, done, err := e.cf.session()
		if err != nil {
			return err
		}
		defer done()
		return watchTopic(ctx, nc, c.OutOrStdout(), args[0], name, *interval, *changes)
	}
	return cmd
}

func watchTopic(ctx context.Context, nc *nats.Conn, w io.Writer, uri string, name routing.TopicName, interval time.Duration, changes int) error {
	pushes := make(chan api.TopicDescription, 16)
	sub, err := nc.Subscribe(api.TopicSubject(api.LayoutPrefix, name.Tenant, name.Namespace, name.Name), func(m *nats.Msg) {
		var d api.TopicDescription
		if json.Unmarshal(m.Data, &d) == nil {
			select {
			case pushes <- d:
			default:
			}
		}
	})
	if err != nil {
		return err
	}
	defer sub.Unsubscribe()
	adm := client.NewAdmin(nc)
	d, err := adm.DescribeTopic(ctx, uri)
	if err != nil {
		return err
	}
	tty := false
	if f, ok := w.(*os.File); ok {
		tty = isTerminal(f)
	}
	prev := map[[2]uint64]uint64{}
	var prevAt time.Time
	var rates string
	printed := 0
	show := func() {
		if tty {
			fmt.Fprint(w, "\033[H\033[2J")
		}
		printLayout(w, d)
		if rates != "" {
			fmt.Fprint(w, rates)
		}
		fmt.Fprintln(w)
	}
	show()
	printed++
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for changes == 0 || printed < changes {
		select {
		case <-ctx.Done():
			return nil
		case nd := <-pushes:
			if nd.Epoch <= d.Epoch {
				continue
			}
			d = nd
			show()
			printed++
		case <-tick.C:
			st, err := adm.Stats(ctx, uri)
			if err != nil {
				continue
			}
			now := time.Now()
			var buf bytes.Buffer
			tw := tabwriter.NewWriter(&buf, 0, 4, 2, ' ', 0)
			fmt.Fprintf(tw, "\nUNIT\tNEXT\tMSG/S\n")
			for _, u := range st.Buckets {
				k := [2]uint64{u.Segment, uint64(u.Bucket)}
				rate := 0.0
				if p, ok := prev[k]; ok && !prevAt.IsZero() && u.NextOffset >= p {
					rate = float64(u.NextOffset-p) / now.Sub(prevAt).Seconds()
				}
				prev[k] = u.NextOffset
				fmt.Fprintf(tw, "%d/%d\t%d\t%.0f\n", u.Segment, u.Bucket, u.NextOffset, rate)
			}
			subscriptionRows(tw, st.Subscriptions)
			tw.Flush()
			b := buf.Bytes()
			for _, l := range st.Load {
				if l.HotKeyShare >= 0.5 {
					b = fmt.Appendf(b, "segment %d: hot key %q carries %.0f%% of its appends\n", l.Segment, l.HotKeyLabel(), 100*l.HotKeyShare)
				}
			}
			prevAt, rates = now, string(b)
			if tty {
				show()
			}
		}
	}
	return nil
}
