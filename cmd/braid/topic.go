package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
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
	"github.com/spf13/cobra"
)

// cliEnv is what the commands of one group share: the connection flags and
// --output.
type cliEnv struct {
	cf  clientFlags
	out output
}

func newGroup(use, short string) (*cobra.Command, *cliEnv) {
	env := &cliEnv{}
	cmd := &cobra.Command{Use: use, Short: short, Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, args []string) error {
			return usagef("%s: missing verb (see '%s -h')", c.CommandPath(), c.CommandPath())
		}}
	env.cf.register(cmd)
	env.out.register(cmd)
	return cmd, env
}

// admin connects and runs fn with an admin client.
func (e *cliEnv) admin(fn func(ctx context.Context, adm *client.Admin) error) error {
	if err := e.out.check(); err != nil {
		return err
	}
	nc, ctx, done, err := e.cf.session()
	if err != nil {
		return err
	}
	defer done()
	return fn(ctx, client.NewAdmin(nc, client.WithRequestTimeout(e.cf.timeout)))
}

// show prints a layout as the output format says.
func (e *cliEnv) show(w io.Writer) func(api.TopicDescription, error) error {
	return func(d api.TopicDescription, err error) error {
		if err != nil {
			return err
		}
		if e.out.json() {
			return printJSON(w, d)
		}
		printLayout(w, d)
		return nil
	}
}

// verb makes a subcommand that runs fn with an admin client.
func (e *cliEnv) verb(use, short string, args cobra.PositionalArgs, fn func(c *cobra.Command, ctx context.Context, adm *client.Admin, args []string) error) *cobra.Command {
	return &cobra.Command{Use: use, Short: short, Args: args,
		RunE: func(c *cobra.Command, a []string) error {
			return e.admin(func(ctx context.Context, adm *client.Admin) error { return fn(c, ctx, adm, a) })
		}}
}

func number(s, what string) (uint64, error) {
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, usagef("%s %q is not a number", what, s)
	}
	return v, nil
}

func topicCommand() *cobra.Command {
	cmd, e := newGroup("topic", "create, describe, list, split, merge, rebucket, delete, compact and migrate topics")
	out := func(c *cobra.Command) io.Writer { return c.OutOrStdout() }

	create := e.verb("create URI", "create a topic: topic://t/ns/name (scalable) or persistent://t/ns/name (fixed partitions)", cobra.ExactArgs(1),
		nil)
	segments := create.Flags().Int("segments", 1, "initial segments (topic://)")
	buckets := create.Flags().Int("buckets", 0, "entry-bucket budget over the initial segments (default: the policy, 4)")
	policies := create.Flags().String("policies", "", "policies as JSON")
	partitions := create.Flags().Int("partitions", 1, "partitions of a fixed topic (persistent://): keys go to partition hash % N")
	create.RunE = func(c *cobra.Command, args []string) error {
		fixed := strings.HasPrefix(args[0], "persistent://")
		if err := positive("segments", *segments, 1); err != nil {
			return err
		}
		if err := positive("partitions", *partitions, 1); err != nil {
			return err
		}
		if err := positive("buckets", *buckets, 0); err != nil {
			return err
		}
		if fixed && c.Flags().Changed("segments") {
			return usagef("--segments: a fixed topic (persistent://) has --partitions")
		}
		if !fixed && c.Flags().Changed("partitions") {
			return usagef("--partitions: only a fixed topic (persistent://t/ns/name) has partitions")
		}
		var opts []client.TopicOption
		if *buckets > 0 {
			opts = append(opts, client.WithTopicBuckets(*buckets))
		}
		if *policies != "" {
			var p api.Policies
			if err := json.Unmarshal([]byte(*policies), &p); err != nil {
				return usagef("--policies: %v", err)
			}
			opts = append(opts, client.WithTopicPolicies(&p))
		}
		return e.admin(func(ctx context.Context, adm *client.Admin) error {
			if fixed {
				return e.show(out(c))(adm.CreateFixedTopic(ctx, args[0], *partitions, opts...))
			}
			return e.show(out(c))(adm.CreateTopic(ctx, args[0], *segments, opts...))
		})
	}

	describe := e.verb("describe URI", "show a topic's segments: the DAG as a tree, states, ranges, owners", cobra.ExactArgs(1),
		func(c *cobra.Command, ctx context.Context, adm *client.Admin, args []string) error {
			return e.show(out(c))(adm.DescribeTopic(ctx, args[0]))
		})

	list := e.verb("list TENANT/NAMESPACE", "list a namespace's topics", cobra.ExactArgs(1),
		func(c *cobra.Command, ctx context.Context, adm *client.Admin, args []string) error {
			var all []string
			err := adm.ListTopicPages(ctx, args[0], 0, func(page []string, _ int64) error {
				if e.out.json() {
					all = append(all, page...)
					return nil
				}
				for _, t := range page {
					fmt.Fprintln(out(c), t)
				}
				return nil
			})
			if err == nil && e.out.json() {
				err = printJSON(out(c), api.NameListReply{Names: append([]string{}, all...)})
			}
			return err
		})

	split := e.verb("split URI SEGMENT", "split an active segment in two (at its range's middle, or --at)", cobra.ExactArgs(2), nil)
	at := split.Flags().String("at", "", "split hash: the first hash of the upper child (0x...)")
	split.RunE = func(c *cobra.Command, args []string) error {
		seg, err := number(args[1], "segment")
		if err != nil {
			return err
		}
		var atHash *uint64
		if *at != "" {
			h, err := topology.ParseHash(*at)
			if err != nil {
				return usagef("--at: %v", err)
			}
			atHash = &h
		}
		return e.admin(func(ctx context.Context, adm *client.Admin) error {
			return e.show(out(c))(adm.Split(ctx, args[0], seg, atHash))
		})
	}

	merge := e.verb("merge URI SEGMENT SEGMENT", "merge two adjacent active segments", cobra.ExactArgs(3),
		func(c *cobra.Command, ctx context.Context, adm *client.Admin, args []string) error {
			a, err := number(args[1], "segment")
			if err != nil {
				return err
			}
			b, err := number(args[2], "segment")
			if err != nil {
				return err
			}
			return e.show(out(c))(adm.Merge(ctx, args[0], a, b))
		})

	rebucket := e.verb("rebucket URI SEGMENT BUCKETS", "give an active segment another number of entry buckets", cobra.ExactArgs(3),
		func(c *cobra.Command, ctx context.Context, adm *client.Admin, args []string) error {
			seg, err := number(args[1], "segment")
			if err != nil {
				return err
			}
			n, err := number(args[2], "buckets")
			if err != nil {
				return err
			}
			return e.show(out(c))(adm.Rebucket(ctx, args[0], seg, int(n)))
		})

	del := e.verb("delete URI", "delete a topic and its data (asks to confirm unless --force)", cobra.ExactArgs(1), nil)
	force := del.Flags().Bool("force", false, "delete without asking")
	del.RunE = func(c *cobra.Command, args []string) error {
		if !*force {
			if err := confirm(c.InOrStdin(), c.ErrOrStderr(), fmt.Sprintf("delete %s and all its messages?", args[0]), "--force"); err != nil {
				return err
			}
		}
		return e.admin(func(ctx context.Context, adm *client.Admin) error {
			if err := adm.DeleteTopic(ctx, args[0]); err != nil {
				return err
			}
			if e.out.json() {
				return printJSON(out(c), map[string]any{"ok": true, "topic": args[0]})
			}
			fmt.Fprintln(out(c), "deleted", args[0])
			return nil
		})
	}

	stats := e.verb("stats URI", "a topic's units (offsets, bytes), segments' load and hottest keys, subscriptions' backlogs, storage", cobra.ExactArgs(1),
		func(c *cobra.Command, ctx context.Context, adm *client.Admin, args []string) error {
			st, err := adm.Stats(ctx, args[0])
			if err != nil {
				return err
			}
			if e.out.json() {
				return printJSON(out(c), st)
			}
			printStats(out(c), st)
			return nil
		})

	verify := e.verb("verify URI", "compare the replicas of a replicated topic: a checksum of each bucket log's committed records on every copy (exit status 1 when they differ or one does not answer)", cobra.ExactArgs(1),
		func(c *cobra.Command, ctx context.Context, adm *client.Admin, args []string) error {
			v, err := adm.VerifyReplicas(ctx, args[0])
			if err != nil {
				return err
			}
			if e.out.json() {
				err = printJSON(out(c), v)
			} else {
				printVerification(out(c), v)
			}
			if err == nil && !v.Agree {
				err = fmt.Errorf("the replicas of %s do not all agree: %d units disagree, %d with a replica not answering", v.Topic, v.Disagree, v.Unanswered)
			}
			return err
		})

	compact := e.verb("compact URI", "compact the topic now (the latest value of each key), with a progress bar", cobra.ExactArgs(1),
		func(c *cobra.Command, ctx context.Context, adm *client.Admin, args []string) error {
			return compactCmd(ctx, adm, args[0], e.out.json(), out(c), c.ErrOrStderr())
		})
	compaction := e.verb("compaction URI", "the topic's compaction: running, last horizons, keys, bytes", cobra.ExactArgs(1),
		func(c *cobra.Command, ctx context.Context, adm *client.Admin, args []string) error {
			st, err := adm.Compaction(ctx, args[0])
			if err != nil {
				return err
			}
			if e.out.json() {
				return printJSON(out(c), st)
			}
			printCompaction(out(c), st)
			return nil
		})

	parts := e.verb("partitions URI N", "grow a fixed topic to N partitions (keys remap; never fewer)", cobra.ExactArgs(2),
		func(c *cobra.Command, ctx context.Context, adm *client.Admin, args []string) error {
			n, err := number(args[1], "partitions")
			if err != nil {
				return err
			}
			return e.show(out(c))(adm.AddPartitions(ctx, args[0], int(n)))
		})

	migrate := e.verb("migrate URI", "turn a fixed topic into topic://t/ns/name in place, irreversibly", cobra.ExactArgs(1), nil)
	migForce := migrate.Flags().Bool("force", false, "migrate even while clients address partitions explicitly")
	migBuckets := migrate.Flags().Int("buckets", 0, "entry buckets of each new segment (default: the policy)")
	migrate.RunE = func(c *cobra.Command, args []string) error {
		if err := positive("buckets", *migBuckets, 0); err != nil {
			return err
		}
		return e.admin(func(ctx context.Context, adm *client.Admin) error {
			return e.show(out(c))(adm.Migrate(ctx, api.MigrateRequest{Topic: args[0], Buckets: *migBuckets, Force: *migForce}))
		})
	}

	cmd.AddCommand(create, describe, list, split, merge, rebucket, del, stats, verify, policiesCommand(e, false), compact, compaction, parts, migrate, watchCommand(e))
	return cmd
}

// confirm asks question on w and reads the answer from r: an error unless
// it is yes. It refuses at once when r is not a terminal: a script must
// say so with skip, the flag that skips the question ("--force").
func confirm(r io.Reader, w io.Writer, question, skip string) error {
	if f, ok := r.(*os.File); !ok || !isTerminal(f) {
		return usagef("%s refusing without %s: there is no terminal to confirm on", question, skip)
	}
	fmt.Fprintf(w, "%s [y/N] ", question)
	answer, _ := bufio.NewReader(r).ReadString('\n')
	if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
		return fmt.Errorf("not confirmed: nothing done")
	}
	return nil
}

// replicaList names a segment's copies, the leader (its owner, first)
// starred: "n2*,n3,n1"; "-" for a segment of one copy.
func replicaList(rs []api.ReplicaInfo) string {
	if len(rs) == 0 {
		return "-"
	}
	names := make([]string, len(rs))
	for i, r := range rs {
		names[i] = r.Node
		if i == 0 {
			names[i] += "*"
		}
	}
	return strings.Join(names, ",")
}

// printLayout prints the DAG as a table, one segment a row, as a tree:
// each segment under the parent it descends from (a merge's child after
// the last of its parents), indented by its depth.
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
	replicated := slices.ContainsFunc(d.Segments, func(s api.SegmentInfo) bool { return len(s.Replicas) > 0 })
	if replicated {
		head += "\tREPLICAS" // the leader (the owner) first, starred
	}
	if partitions {
		head += "\tPARTITION" // a fixed topic's, or a migrated one's sealed parents
	}
	fmt.Fprintln(tw, head)
	depths := depths(d)
	for _, s := range treeOrder(d) {
		owner := s.Owner
		if owner == "" {
			owner = "-"
		}
		fmt.Fprintf(tw, "%s%d\t%s\t[%s, %s]\t%d\t%s\t%s\t%s", strings.Repeat("  ", depths[s.ID]), s.ID, s.State,
			s.Range[0], s.Range[1], s.Buckets, list(s.Parents), list(s.Children), owner)
		if replicated {
			fmt.Fprintf(tw, "\t%s", replicaList(s.Replicas))
		}
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

// treeOrder returns the segments depth first from the roots in id order,
// a segment once all its parents are out (so under the last of them).
func treeOrder(d api.TopicDescription) []api.SegmentInfo {
	byID := make(map[uint64]api.SegmentInfo, len(d.Segments))
	for _, s := range d.Segments {
		byID[s.ID] = s
	}
	done := make(map[uint64]bool, len(d.Segments))
	out := make([]api.SegmentInfo, 0, len(d.Segments))
	var visit func(s api.SegmentInfo)
	visit = func(s api.SegmentInfo) {
		done[s.ID] = true
		out = append(out, s)
		children := slices.Clone(s.Children)
		slices.Sort(children)
		for _, id := range children {
			c, ok := byID[id]
			if !ok || done[id] || slices.ContainsFunc(c.Parents, func(p uint64) bool { _, known := byID[p]; return known && !done[p] }) {
				continue
			}
			visit(c)
		}
	}
	sorted := slices.Clone(d.Segments)
	slices.SortFunc(sorted, func(a, b api.SegmentInfo) int { return cmp.Compare(a.ID, b.ID) })
	for _, s := range sorted {
		if !done[s.ID] && !slices.ContainsFunc(s.Parents, func(p uint64) bool { _, known := byID[p]; return known }) {
			visit(s)
		}
	}
	for _, s := range sorted { // a malformed layout: whatever is left
		if !done[s.ID] {
			visit(s)
		}
	}
	return out
}

// depths returns each segment's depth: the longest chain of parents above
// it.
func depths(d api.TopicDescription) map[uint64]int {
	byID := map[uint64]api.SegmentInfo{}
	for _, s := range d.Segments {
		byID[s.ID] = s
	}
	memo := map[uint64]int{}
	var walk func(uint64, int) int
	walk = func(id uint64, guard int) int {
		if v, ok := memo[id]; ok {
			return v
		}
		s, ok := byID[id]
		if !ok || len(s.Parents) == 0 || guard > len(d.Segments) {
			return 0
		}
		deepest := 0
		for _, p := range s.Parents {
			deepest = max(deepest, walk(p, guard+1)+1)
		}
		memo[id] = deepest
		return deepest
	}
	for id := range byID {
		walk(id, 0)
	}
	return memo
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
