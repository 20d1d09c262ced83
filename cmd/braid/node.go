package main

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/braidmq/braid/client"
	"github.com/spf13/cobra"
)

func nodeCommand() *cobra.Command {
	cmd, e := newGroup("node", "list the cluster's nodes, drain one")
	list := e.verb("list", "the cluster's nodes: id, data directory incarnation (its first 8 digits), NATS URL, live, entry, draining, segments owned, bytes/s, segments short of a copy, consumer groups short of a copy, bytes left to copy, lease times", cobra.NoArgs,
		func(c *cobra.Command, ctx context.Context, adm *client.Admin, _ []string) error {
			reply, err := adm.ListNodes(ctx)
			if err != nil {
				return err
			}
			if e.out.json() {
				return printJSON(c.OutOrStdout(), reply)
			}
			w := tabwriter.NewWriter(c.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "NODE\tINCARNATION\tNATS\tLIVE\tENTRY\tDRAINING\tSEGMENTS\tBYTES/S\tUNDER-REPLICATED\tGROUPS SHORT\tCOPY BYTES LEFT\tSTARTED\tEXPIRES")
			for _, nd := range reply.Nodes {
				inc := nd.Incarnation
				if len(inc) > 8 {
					inc = inc[:8]
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%v\t%v\t%v\t%d\t%.0f\t%d\t%d\t%d\t%s\t%s\n", nd.ID, inc, nd.NATSURL, nd.Live, nd.Entry, nd.Draining, nd.Segments, nd.BytesPerSec,
					nd.UnderReplicated, nd.GroupsShort, nd.CopyBytesLeft, nd.Started, nd.Expires)
			}
			return w.Flush()
		})
	drain := e.verb("drain NODE", "move every active segment the node owns (and its consumer groups) to other nodes, so that it can stop", cobra.ExactArgs(1),
		func(c *cobra.Command, ctx context.Context, adm *client.Admin, args []string) error {
			reply, err := adm.DrainNode(ctx, args[0])
			if err != nil {
				return err
			}
			if e.out.json() {
				if err := printJSON(c.OutOrStdout(), reply); err != nil {
					return err
				}
			} else {
				fmt.Fprintf(c.OutOrStdout(), "node %s drained in %.1fs: %d topics, %d segments sealed with successors elsewhere, %d consumer groups handed over\n",
					reply.Node, reply.Seconds, reply.Topics, reply.Segments, reply.Groups)
				for _, f := range reply.Failed {
					fmt.Fprintf(c.OutOrStdout(), "not moved: %s\n", f)
				}
			}
			if len(reply.Failed) > 0 {
				return fmt.Errorf("node drain: %d topics not moved", len(reply.Failed))
			}
			return nil
		})
	cmd.AddCommand(list, drain)
	return cmd
}
