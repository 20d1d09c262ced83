package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/client"
	"github.com/braidmq/braid/topology"
)

const topicUsage = `usage: braid topic <verb> [flags]

verbs:
  create   URI [--segments N] [--buckets N] [--policies JSON]
           persistent://t/ns/name [--partitions N]   a fixed topic: keys go to partition hash % N
  partitions URI N           grow a fixed topic to N partitions (keys remap; never fewer)
  migrate  URI [--force] [--buckets N]   turn a fixed topic into topic://t/ns/name in place, irreversibly
  describe URI [--json]
  list     TENANT/NAMESPACE
  split    URI SEGMENT [--at 0xHASH]
  merge    URI SEGMENT SEGMENT
  rebucket URI SEGMENT BUCKETS
  delete   URI
  stats    URI
  policies URI [--set JSON] [--unset KEY,KEY] [--json]
  compact  URI [--json]      compact the topic now, with a progress bar
  compaction URI             the topic's compaction: running, last horizons, keys, bytes
`

func topicCmd(args []string) error {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, topicUsage)
		return errors.New("topic: missing verb")
	}
	verb := args[0]
	if verb == "policies" {
		return policiesCmd(args[1:], false)
	}
	fs := flag.NewFlagSet("topic "+verb, flag.ExitOnError)
	fs.Usage = func() { fmt.Fprint(os.Stderr, topicUsage) }
	var cf clientFlags
	cf.register(fs)
	segments := fs.Int("segments", 1, "initial segments (create)")
	buckets := fs.Int("buckets", 0, "entry-bucket budget over the initial segments (create; default: the policy, 4)")
	policies := fs.String("policies", "", "policies as JSON (create)")
	at := fs.String("at", "", "split hash: the first hash of the upper child (split)")
	asJSON := fs.Bool("json", false, "print JSON instead of a table (describe, compact)")
	partitions := fs.Int("partitions", 1, "partitions of a fixed topic (create persistent://...)")
	force := fs.Bool("force", false, "migrate even while clients address partitions explicitly (migrate)")
	pos, err := parseInterleaved(fs, args[1:])
	if err != nil {
		return err
	}
	nc, err := cf.connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	adm := client.NewAdmin(nc, client.WithRequestTimeout(cf.timeout))
	ctx := context.Background()
	need := func(n int, what string) error {
		if len(pos) != n {
			return fmt.Errorf("topic %s: want %s", verb, what)
		}
		return nil
	}
	number := func(s, what string) (uint64, error) {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s %q is not a number", what, s)
		}
		return v, nil
	}
	show := func(d api.TopicDescription, err error) error {
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(os.Stdout, d)
		}
		printLayout(os.Stdout, d)
		return nil
	}
	switch verb {
	case "create":
		if err := need(1, "URI"); err != nil {
			return err
		}
		var opts []client.TopicOption
		if *buckets > 0 {
			opts = append(opts, client.WithTopicBuckets(*buckets))
		}
		if *policies != "" {
			var p api.Policies
			if err := json.Unmarshal([]byte(*policies), &p); err != nil {
				return fmt.Errorf("--policies: %w", err)
			}
			opts = append(opts, client.WithTopicPolicies(&p))
		}
		if strings.HasPrefix(pos[0], "persistent://") {
			return show(adm.CreateFixedTopic(ctx, pos[0], *partitions, opts...))
		}
		return show(adm.CreateTopic(ctx, pos[0], *segments, opts...))
	case "partitions":
		if err := need(2, "URI PARTITIONS"); err != nil {
			return err
		}
		n, err := number(pos[1], "partitions")
		if err != nil {
			return err
		}
		return show(adm.AddPartitions(ctx, pos[0], int(n)))
	case "migrate":
		if err := need(1, "URI"); err != nil {
			return err
		}
		return show(adm.Migrate(ctx, api.MigrateRequest{Topic: pos[0], Buckets: *buckets, Force: *force}))
	case "describe":
		if err := need(1, "URI"); err != nil {
			return err
		}
		return show(adm.DescribeTopic(ctx, pos[0]))
	case "list":
		if err := need(1, "TENANT/NAMESPACE"); err != nil {
			return err
		}
		return adm.ListTopicPages(ctx, pos[0], 0, func(page []string, _ int64) error {
			for _, t := range page {
				fmt.Println(t)
			}
			return nil
		})
	case "split":
		if err := need(2, "URI SEGMENT"); err != nil {
			return err
		}
		seg, err := number(pos[1], "segment")
		if err != nil {
			return err
		}
		var atHash *uint64
		if *at != "" {
			h, err := topology.ParseHash(*at)
			if err != nil {
				return err
			}
			atHash = &h
		}
		return show(adm.Split(ctx, pos[0], seg, atHash))
	case "merge":
		if err := need(3, "URI SEGMENT SEGMENT"); err != nil {
			return err
		}
		a, err := number(pos[1], "segment")
		if err != nil {
			return err
		}
		b, err := number(pos[2], "segment")
		if err != nil {
			return err
		}
		return show(adm.Merge(ctx, pos[0], a, b))
	case "rebucket":
		if err := need(3, "URI SEGMENT BUCKETS"); err != nil {
			return err
		}
		seg, err := number(pos[1], "segment")
		if err != nil {
			return err
		}
		n, err := number(pos[2], "buckets")
		if err != nil {
			return err
		}
		return show(adm.Rebucket(ctx, pos[0], seg, int(n)))
	case "delete":
		if err := need(1, "URI"); err != nil {
			return err
		}
		if err := adm.DeleteTopic(ctx, pos[0]); err != nil {
			return err
		}
		fmt.Println("deleted", pos[0])
		return nil
	case "stats":
		if err := need(1, "URI"); err != nil {
			return err
		}
		st, err := adm.Stats(ctx, pos[0])
		if err != nil {
			return err
		}
		return printJSON(os.Stdout, st)
	case "compact":
		if err := need(1, "URI"); err != nil {
			return err
		}
		return compactCmd(ctx, adm, pos[0], *asJSON)
	case "compaction":
		if err := need(1, "URI"); err != nil {
			return err
		}
		st, err := adm.Compaction(ctx, pos[0])
		if err != nil {
			return err
		}
		return printJSON(os.Stdout, st)
	default:
		fmt.Fprint(os.Stderr, topicUsage)
		return fmt.Errorf("topic: unknown verb %q", verb)
	}
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// printLayout prints the DAG as a table, one segment a row, with the
// generations drawn as a tree of ids.
func printLayout(w io.Writer, d api.TopicDescription) {
	active := 0
	for _, s := range d.Segments {
		if s.State == "active" {
			active++
		}
	}
	fmt.Fprintf(w, "%s  epoch %d  %d active segments\n\n", d.Topic, d.Epoch, active)
	partitions := slices.ContainsFunc(d.Segments, func(s api.SegmentInfo) bool { return s.Partition != nil })
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	head := "SEGMENT\tSTATE\tRANGE\tBUCKETS\tPARENTS\tCHILDREN\tOWNER"
	if partitions {
		head += "\tPARTITION" // a fixed topic's, or a migrated one's sealed parents
	}
	fmt.Fprintln(tw, head)
	for _, s := range d.Segments {
		owner := s.Owner
		if owner == "" {
			owner = "-"
		}
		fmt.Fprintf(tw, "%s%d\t%s\t[%s, %s]\t%d\t%s\t%s\t%s", strings.Repeat("  ", depth(d, s.ID)), s.ID, s.State,
			s.Range[0], s.Range[1], s.Buckets, list(s.Parents), list(s.Children), owner)
		switch {
		case s.Partition != nil:
			fmt.Fprintf(tw, "\t%d", *s.Partition)
		case partitions:
			fmt.Fprint(tw, "\t-")
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	if d.EffectivePolicies != nil {
		fmt.Fprintln(w)
		printPolicies(w, d.Policies, d.EffectivePolicies)
	}
}

func depth(d api.TopicDescription, id uint64) int {
	byID := map[uint64]api.SegmentInfo{}
	for _, s := range d.Segments {
		byID[s.ID] = s
	}
	var walk func(uint64, int) int
	walk = func(id uint64, guard int) int {
		s, ok := byID[id]
		if !ok || len(s.Parents) == 0 || guard > len(d.Segments) {
			return 0
		}
		deepest := 0
		for _, p := range s.Parents {
			deepest = max(deepest, walk(p, guard+1)+1)
		}
		return deepest
	}
	return walk(id, 0)
}

func list(ids []uint64) string {
	if len(ids) == 0 {
		return "-"
	}
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = strconv.FormatUint(id, 10)
	}
	return strings.Join(parts, ",")
}
