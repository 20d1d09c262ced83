package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/braidmq/braid/client"
)

const nodeUsage = `usage: braid node <verb> [flags]

verbs:
  list [--json]   the cluster's nodes: id, NATS URL, live, entry, draining, segments owned, bytes/s, lease times
  drain <id>      move every active segment the node owns (and its consumer groups) to other nodes, so that it can stop
`

func nodeCmd(args []string) error {
	if len(args) > 0 && args[0] == "drain" {
		return nodeDrainCmd(args[1:])
	}
	if len(args) == 0 || args[0] != "list" {
		fmt.Fprint(os.Stderr, nodeUsage)
		if len(args) == 0 {
			return errors.New("node: missing verb")
		}
		return fmt.Errorf("node: unknown verb %q", args[0])
	}
	fs := flag.NewFlagSet("node list", flag.ExitOnError)
	fs.Usage = func() { fmt.Fprint(os.Stderr, nodeUsage) }
	var cf clientFlags
	cf.register(fs)
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	if _, err := parseInterleaved(fs, args[1:]); err != nil {
		return err
	}
	nc, err := cf.connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	reply, err := client.NewAdmin(nc).ListNodes(context.Background())
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(reply)
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NODE\tNATS\tLIVE\tENTRY\tDRAINING\tSEGMENTS\tBYTES/S\tSTARTED\tEXPIRES")
	for _, nd := range reply.Nodes {
		fmt.Fprintf(w, "%s\t%s\t%v\t%v\t%v\t%d\t%.0f\t%s\t%s\n", nd.ID, nd.NATSURL, nd.Live, nd.Entry, nd.Draining, nd.Segments, nd.BytesPerSec,
			nd.Started, nd.Expires)
	}
	return w.Flush()
}

func nodeDrainCmd(args []string) error {
	fs := flag.NewFlagSet("node drain", flag.ExitOnError)
	fs.Usage = func() { fmt.Fprint(os.Stderr, nodeUsage) }
	var cf clientFlags
	cf.register(fs)
	rest, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		fmt.Fprint(os.Stderr, nodeUsage)
		return errors.New("node drain: want one node id")
	}
	nc, err := cf.connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	reply, err := client.NewAdmin(nc).DrainNode(context.Background(), rest[0])
	if err != nil {
		return err
	}
	fmt.Printf("node %s drained in %.1fs: %d topics, %d segments sealed with successors elsewhere, %d consumer groups handed over\n",
		reply.Node, reply.Seconds, reply.Topics, reply.Segments, reply.Groups)
	for _, f := range reply.Failed {
		fmt.Printf("not moved: %s\n", f)
	}
	if len(reply.Failed) > 0 {
		return fmt.Errorf("node drain: %d topics not moved", len(reply.Failed))
	}
	return nil
}
